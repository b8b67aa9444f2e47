"""One run of an environment's tests, in a fresh sandbox, read back as per-test outcomes.

A run is: prepare (as the sandbox user: enter the workdir, remove any report left in the
image), maybe the oracle, the test command (``timeout_s``, output capped), then the JUnit
report read back with a size cap and parsed. Anything that makes the run unusable is a
:class:`Problem`, never a pass: a hang (``timeout``), a flood, a missing or unparsable report
(``parse_error``), a report with no test, none of the declared tests, or a non-zero exit that
no failed test explains (``no_tests_collected``).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from envcheck.catalogue.models import Environment
from envcheck.catalogue.probe_specs import TestSpec
from envcheck.core.results import CommandEvidence, Reason
from envcheck.kinds.base import ProbeContext
from envcheck.kinds.startup import READY, command_start_failure
from envcheck.kinds.testvalidity.chain import Step, chain_script, split
from envcheck.kinds.testvalidity.junit import Case, ReportError, match, parse_report
from envcheck.kinds.testvalidity.logs import read_log
from envcheck.kinds.testvalidity.offline import network_error
from envcheck.kinds.testvalidity.patches import (
    directive_files,
    directive_modules,
    steps_for_gold,
    steps_for_test_patch,
)
from envcheck.sandbox.base import ExecResult, Sandbox

__all__ = ["INLINE_IDS_MAX", "MAX_REPORT_BYTES", "ORACLE_DIR", "Phase", "Problem", "Run",
           "execute", "network_error"]

# The oracle script goes here: not under /tmp, a tmpfs the engine cannot copy into.
ORACLE_DIR = "/var/tmp/envcheck"
MAX_REPORT_BYTES = 8 * 1024 * 1024  # a JUnit report, or a log a parser reads
# Linux refuses any one argument or environment string over 128 KiB (MAX_ARG_STRLEN): past
# this many bytes of ids, '{tests}' becomes "$@" (one argument per id) and the ids go to
# $ENVCHECK_TEST_IDS_FILE instead of $ENVCHECK_TEST_IDS.
INLINE_IDS_MAX = 32 * 1024
IDS_FILE = "/var/tmp/envcheck-test-ids"

class Phase(StrEnum):
    NEGATIVE = "negative"  # no oracle: f2p must fail, p2p must pass
    POSITIVE = "positive"  # after the oracle: everything must pass


@dataclass(frozen=True, slots=True)
class Problem:
    reason: Reason
    detail: str


@dataclass(frozen=True, slots=True)
class Patch:
    """A patch to apply: what it is (for messages), its text, its file's name, the shell steps
    applying the file at a path, and the reason when it does not apply."""

    what: str
    content: str
    name: str
    steps: Callable[[str], str]
    reason: Reason

    def deliver(self, sandbox: Sandbox, variable: str) -> tuple[str, dict[str, str]]:
        """(shell steps writing it and applying it, exec environment). A patch that fits in
        one environment string travels in it, written by the shell to /tmp (no copy call); a
        larger one is copied to /var/tmp (the engine cannot copy into the /tmp tmpfs)."""
        if len(self.content.encode()) <= INLINE_IDS_MAX:
            path = f"/tmp/envcheck-{self.name}.patch"
            return (f'printf %s "${variable}" > {path} && {self.steps(path)}',
                    {variable: self.content})
        path = f"/var/tmp/envcheck-{self.name}.patch"
        sandbox.put_file(path, self.content.encode(), 0o644)
        return self.steps(path), {}


@dataclass
class Run:
    phase: Phase
    order: tuple[str, ...]
    label: str
    seed: int | None = None  # of a shuffled order: random.Random(seed).shuffle(declared)
    outcomes: dict[str, Case | None] = field(default_factory=dict)
    problem: Problem | None = None
    exit_code: int | None = None
    output: str = ""  # the test command's (capped) output, for network signs
    evidence: list[CommandEvidence] = field(default_factory=list)
    start_s: float = 0.0  # container start
    duration_s: float = 0.0

    def passed(self, test_id: str) -> bool:
        case = self.outcomes.get(test_id)
        return case is not None and case.passed

    def not_passed(self, ids: Sequence[str]) -> list[str]:
        return [t for t in ids if not self.passed(t)]


def render(spec: TestSpec, order: Sequence[str], inline: bool = True) -> str:
    """The command with its placeholders filled in (no str.format: shell braces). Not
    ``inline``: '{tests}' is ``"$@"``, the ids being the script's arguments."""
    tests = " ".join(shlex.quote(t) for t in order) if inline else '"$@"'
    files = " ".join(shlex.quote(f) for f in directive_files(spec.test_patch))
    modules = " ".join(shlex.quote(m) for m in directive_modules(spec.test_patch))
    return (spec.command.replace("{tests}", tests).replace("{junit}", shlex.quote(spec.junit_path))
            .replace("{test_files}", files).replace("{test_modules}", modules))


class _Runner:
    def __init__(self, sandbox: Sandbox, env: Environment, spec: TestSpec, run: Run) -> None:
        self.sandbox, self.env, self.spec, self.run = sandbox, env, spec, run
        self._deferred = False  # the preparation waits for the run's first command

    def exec(self, script: str, label: str, *, timeout_s: float, keep: bool = True,
             extra: dict[str, str] | None = None, limit: int | None = None,
             args: Sequence[str] = ()) -> ExecResult:
        env = self.env
        result = self.sandbox.exec([env.shell, "-c", script, "envcheck", *args], user=env.user,
                                   env=extra, timeout_s=timeout_s,
                                   output_limit=limit or env.limits.output_kb * 1024)
        if keep:
            self.run.evidence.append(result.evidence(label))
        return result

    def prepare(self, patches: Sequence[Patch] = ()) -> Problem | None:
        """Enter the workdir, remove a stale report, then apply ``patches`` in order: one exec
        (each costs engine round trips; a dataset task runs this in every fresh container)."""
        script = self._preparation()
        variables: dict[str, str] = {}
        for i, patch in enumerate(patches):
            steps, extra = patch.deliver(self.sandbox, f"ENVCHECK_PATCH_{i}")
            variables.update(extra)
            # stderr into stdout: the engine sends the two apart, so only one stream keeps
            # git's last line ahead of the marker
            script += (f"if ! {{ {steps}\n}} 2>&1; then echo envcheck:patch-failed:{i}; exit 0; "
                       "fi\n")
        label = "prepare" + "".join(f"; apply the {p.what}" for p in patches)
        result = self.exec(script, label, timeout_s=self.env.timeouts.exec_s, keep=False,
                           extra=variables or None)
        failure = self._prepared(result, combined=False) or _patch_failure(result.text, patches)
        if failure is not None or patches:
            self.run.evidence.append(result.evidence(label))
        return failure

    def defer_preparation(self) -> None:
        """With nothing to apply, the preparation runs at the head of the run's first command
        (:meth:`chain`): one exec less per run."""
        self._deferred = True

    def chain(self, steps: list[Step], *, extra: dict[str, str] | None = None,
              args: Sequence[str] = ()) -> tuple[list[ExecResult], Problem | None]:
        """Run ``steps`` in one exec (:mod:`.chain`), a deferred preparation first: the result
        of each step reached (their evidence kept but a report read's), and the
        preparation's failure, if any."""
        deferred, self._deferred = self._deferred, False
        script, sections = chain_script(steps)
        env, first = self.env, steps[0]
        result = self.sandbox.exec(
            [env.shell, "-c", (self._preparation() if deferred else "") + script, "envcheck",
             *args], user=env.user, env=extra, timeout_s=first.timeout_s,
            output_limit=first.output_limit, sections=sections)
        results = split(result, steps)
        self.run.evidence.extend(r.evidence() for r, step in zip(results, steps, strict=False)
                                 if step.evidence)
        return results, self._prepared(results[0], combined=True) if deferred else None

    def _preparation(self) -> str:
        workdir, report = shlex.quote(self.env.workdir), shlex.quote(self.spec.junit_path)
        return (f"cd -- {workdir} 2>/dev/null || {{ echo envcheck:no-workdir; exit 0; }}\n"
                f"rm -f -- {report} 2>/dev/null\n"
                f"if [ -e {report} ]; then echo envcheck:stale-report; exit 0; fi\n"
                f"echo {READY}\n")

    def _prepared(self, result: ExecResult, *, combined: bool) -> Problem | None:
        """What went wrong in the preparation, if anything; ``combined``: a command ran after
        it in the same exec, whose own timeout is the caller's to report."""
        ready = READY in result.text  # printed: the user exists and the shell runs
        start = None if ready else command_start_failure(result, self.env.user, self.env.shell)
        if start is not None:
            return Problem(*start)
        if not ready and "envcheck:no-workdir" in result.text:
            return Problem(Reason.WORKDIR_MISSING, f"workdir {self.env.workdir} does not exist")
        if not ready and "envcheck:stale-report" in result.text:
            return Problem(Reason.PARSE_ERROR, f"{self.spec.junit_path} is in the image and "
                                               "cannot be removed: no report could be trusted")
        if result.timed_out and not (combined and ready):
            doing = "to apply the patches" if ready else "to enter the workdir"
            return Problem(Reason.TIMEOUT, f"the shell took over {result.duration_s:.3g}s "
                                           f"{doing}")
        if not ready:
            return Problem(Reason.LOGIN_SHELL_BROKEN, f"{self.env.shell} -c did not run "
                                                      "envcheck's preparation")
        return None

    def oracle_step(self) -> Step:
        """The oracle as a step (a script oracle copied in first)."""
        oracle = self.spec.oracle
        assert oracle is not None
        target = oracle.path or ""
        if oracle.script is not None:
            target = f"{ORACLE_DIR}/oracle.sh"
            self.sandbox.exec(["mkdir", "-p", "-m", "0755", ORACLE_DIR], user="0",
                              timeout_s=self.env.timeouts.exec_s)
            self.sandbox.put_file(target, oracle.script.encode(), 0o755)
        runner = "exec" if oracle.script is None or oracle.script.startswith("#!") else (
            f"exec {shlex.quote(self.env.shell)}")
        script = f"cd -- {shlex.quote(self.env.workdir)} || exit 1\n{runner} {shlex.quote(target)}"
        return Step(script, f"oracle: {target}", self.spec.timeout_s,
                    self.env.limits.output_kb * 1024, stop_unless_ok=True)

    def oracle(self) -> Problem | None:
        """The oracle in an exec of its own (something runs between it and the tests)."""
        [result], unprepared = self.chain([self.oracle_step()])
        return unprepared or self.oracle_outcome(result)

    def oracle_outcome(self, result: ExecResult) -> Problem | None:
        target = result.command.removeprefix("oracle: ")
        if result.timed_out:
            return Problem(Reason.TIMEOUT, f"the oracle ran past {self.spec.timeout_s:g}s and "
                                           "was killed")
        if result.exit_code != 0:
            # The marker is stdout's, the oracle's complaint often stderr's: the engine keeps
            # no order between the two streams, so the marker may come last. It says nothing.
            said = [line for line in result.text.strip().splitlines() if line.strip() != READY]
            last = (said or [""])[-1][:200]
            return Problem(Reason.ORACLE_FAILED, f"the oracle {target} exited "
                                                 f"{result.exit_code}: {last}")
        return None

    def apply(self, patch: Patch) -> Problem | None:
        """Apply ``patch`` in an exec of its own (after an oracle script)."""
        steps, extra = patch.deliver(self.sandbox, "ENVCHECK_PATCH_0")
        script = (f"cd -- {shlex.quote(self.env.workdir)} || exit 1\n"
                  f"if ! {{ {steps}\n}} 2>&1; then echo envcheck:patch-failed:0; fi\n")
        result = self.exec(script, f"apply the {patch.what}", timeout_s=self.env.timeouts.exec_s,
                           extra=extra or None)
        if result.timed_out:
            return Problem(Reason.TIMEOUT, f"applying the {patch.what} ran past "
                                           f"{self.env.timeouts.exec_s:g}s")
        return _patch_failure(result.text, [patch])

    def tests(self, oracle: bool = False) -> Problem | None:
        """The tests (after the oracle, with ``oracle``) and the read of their JUnit report,
        in one exec."""
        spec, run = self.spec, self.run
        ids = "\n".join(run.order)
        inline = len(ids.encode()) <= INLINE_IDS_MAX
        variables = {"ENVCHECK_JUNIT": spec.junit_path}
        if inline:
            variables["ENVCHECK_TEST_IDS"] = ids
        if not inline or "ENVCHECK_TEST_IDS_FILE" in spec.command:
            self.sandbox.put_file(IDS_FILE, (ids + "\n").encode(), 0o644)
            variables["ENVCHECK_TEST_IDS_FILE"] = IDS_FILE
        log = spec.report != "junit"  # the output is the report: keep it up to the report cap
        steps = [self.oracle_step()] if oracle else []
        steps.append(Step(f"cd -- {shlex.quote(self.env.workdir)} || exit 1\n"
                          f"{render(spec, run.order, inline)}", f"{run.label}: {spec.command}",
                          spec.timeout_s, MAX_REPORT_BYTES if log else
                          self.env.limits.output_kb * 1024))
        if not log:
            path = shlex.quote(spec.junit_path)
            steps.append(Step(f"test -f {path} || exit 3\nexec head -c {MAX_REPORT_BYTES + 1} "
                              f"-- {path}", "read report", self.env.timeouts.exec_s,
                              2 * (MAX_REPORT_BYTES + 1), bare=True, evidence=False))
        results, unprepared = self.chain(steps, extra=variables,
                                         args=() if inline else run.order)
        if unprepared is not None:
            return unprepared
        if oracle:
            problem = self.oracle_outcome(results.pop(0))
            if problem is not None:
                return problem
        result = results[0]
        run.exit_code, run.output = result.exit_code, result.text
        if result.timed_out:
            return Problem(Reason.TIMEOUT, f"the tests ran past {spec.timeout_s:g}s and were "
                                           "killed")
        if result.flooded:
            return Problem(Reason.OUTPUT_FLOOD, "the tests flooded their output" + (
                f" (over {MAX_REPORT_BYTES >> 20} MiB: more than a log parser reads)"
                if log else ""))
        if log:
            return self.log_report(result)
        return self.report(result.exit_code, results[1] if len(results) > 1 else None)

    def log_report(self, result: ExecResult) -> Problem | None:
        read = read_log(result.output.head, self.spec.report, self.run.order)
        return self.judge(result.exit_code, read.outcomes, read.reported, read.failed,
                          f"the {self.spec.report} log")

    def report(self, exit_code: int | None, read: ExecResult | None) -> Problem | None:
        path = self.spec.junit_path
        if read is None or read.timed_out or read.exit_code != 0:
            return Problem(Reason.PARSE_ERROR, f"no JUnit report at {path} (the test command "
                                               f"exited {exit_code})")
        data = read.output.head
        if read.output.total > MAX_REPORT_BYTES:
            return Problem(Reason.PARSE_ERROR, f"the JUnit report is larger than "
                                               f"{MAX_REPORT_BYTES >> 20} MiB")
        try:
            report = parse_report(data)
        except ReportError as exc:
            return Problem(Reason.PARSE_ERROR, f"the JUnit report is unusable: {exc}")
        return self.judge(exit_code, match(report, self.run.order), len(report.cases),
                          report.failed, "the report")

    def judge(self, exit_code: int | None, outcomes: dict[str, Case | None], reported: int,
              failed: int, source: str) -> Problem | None:
        """Keep ``outcomes`` unless the run is invalid: no test reported, or a non-zero exit
        with no failure reported, or none of the declared tests among those reported."""
        if not reported:
            return Problem(Reason.NO_TESTS_COLLECTED, f"{source} lists no test (exit "
                                                      f"{exit_code})")
        if exit_code != 0 and not failed:
            return Problem(Reason.NO_TESTS_COLLECTED, f"the tests exited {exit_code} but "
                                                      f"{source} shows no failure: invalid run")
        self.run.outcomes = outcomes
        # With failures reported (e.g. a collection error) a missing test simply did not
        # pass; with none, not one declared test found means the ids do not name these tests.
        if not failed and not any(outcomes.values()):
            return Problem(Reason.NO_TESTS_COLLECTED, f"none of the {len(self.run.order)} "
                           f"declared tests is among the {reported} in {source}")
        return None


def _patch_failure(text: str, patches: Sequence[Patch]) -> Problem | None:
    """The patch the output's marker names as not applying, with the line git printed."""
    for i, patch in enumerate(patches):
        marker = f"envcheck:patch-failed:{i}"
        if marker in text:
            before = text[:text.index(marker)].strip().splitlines() or [""]
            return Problem(patch.reason, f"the {patch.what} does not apply: {before[-1][:200]}")
    return None


def _patches(spec: TestSpec, phase: Phase, acted: bool) -> tuple[list[Patch], list[Patch]]:
    """(patches applied while preparing, patches applied after an oracle script or an agent's
    action): the gold patch then the test patch, as the harness applies a prediction then the
    test patch (an agent never sees the test patch)."""
    found = []
    oracle = spec.oracle if phase is Phase.POSITIVE and not acted else None
    if oracle is not None and oracle.patch is not None:
        found.append(Patch("gold patch", oracle.patch, "gold", steps_for_gold,
                           Reason.GOLD_PATCH_DOES_NOT_APPLY))
    if spec.test_patch is not None:
        test_patch = spec.test_patch
        found.append(Patch("test patch", test_patch, "test",
                           lambda path: steps_for_test_patch(test_patch, path,
                                                             spec.base_commit),
                           Reason.TEST_PATCH_DOES_NOT_APPLY))
    if acted or (oracle is not None and oracle.patch is None):
        return [], found  # an action, or a script or path oracle, runs first
    return found, []


def execute(ctx: ProbeContext, spec: TestSpec, run: Run,
            action: Callable[[Sandbox], CommandEvidence] | None = None,
            after_oracle: Callable[[Sandbox], Problem | None] | None = None,
            after_tests: Callable[[Sandbox], None] | None = None) -> Run:
    """Do ``run`` in a fresh container (removed on return) and fill in what it showed.
    ``action``, if given, is the agent's only action (an adversarial control's trick): it runs
    after the preparation, in place of the oracle. ``after_oracle``, if given, runs after an
    oracle script, before any later patch and the tests (a wrong-output control's write); a
    problem it returns ends the run there. ``after_tests``, if given, runs once the tests
    ran, in the same container (what they left read back)."""
    started = time.monotonic()
    early, late = _patches(spec, run.phase, acted=action is not None)
    with ctx.fresh_sandbox() as sandbox:
        run.start_s = sandbox.start_duration_s
        runner = _Runner(sandbox, ctx.env, spec, run)
        if early or action is not None:
            run.problem = runner.prepare(early)
        else:
            runner.defer_preparation()
        oracle = spec.oracle
        script_oracle = (action is None and run.phase is Phase.POSITIVE and oracle is not None
                         and oracle.patch is None)
        # nothing between the oracle and the tests: both in the tests' exec
        chained = script_oracle and after_oracle is None and not late
        if run.problem is None and action is not None:
            run.evidence.append(action(sandbox))
        elif run.problem is None and script_oracle and not chained:
            run.problem = runner.oracle()
        if run.problem is None and after_oracle is not None:
            run.problem = after_oracle(sandbox)
        for patch in late:
            run.problem = run.problem or runner.apply(patch)
        if run.problem is None:
            run.problem = runner.tests(oracle=chained)
            if after_tests is not None:
                after_tests(sandbox)
    run.duration_s = time.monotonic() - started
    return run
