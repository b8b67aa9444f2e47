"""Test-case validity: do an environment's tests tell a fix from a no-op, every time, offline?

1. **Negative control**: the declared tests without the oracle. Every fail-to-pass test must
   fail (a skipped or missing one counts as failed) and every pass-to-pass test pass. A
   fail-to-pass test that passes ends the probe: the task rewards a no-op.
2. **Positive control**, ``reruns`` times: the oracle, then the tests; all must pass. The first
   run keeps the declared order, the others shuffle it (the command takes the order from
   ``{tests}`` or ``$ENVCHECK_TEST_IDS``). Without an oracle the negative control is what is
   repeated.
3. **Confirmation**, only when runs disagree about a test. Observations are every run where
   the test's expected outcome is the same: all runs for a pass-to-pass test (the negative
   control counts), positive runs for a fail-to-pass test. The failing (phase, order) and a
   passing one are re-run alternately, up to ``CONFIRM`` times each, stopping at the first
   run that disagrees. Both reproduce, orders differ: ``order_dependent``. Any re-run
   disagrees (or the same phase and order already gave both outcomes): ``nondeterministic``.
   Both reproduce, same order, phases differ: no flakiness but a pass-to-pass test the oracle
   breaks (or one that belongs in fail_to_pass): ``p2p_broken``. Four each leave an order
   verdict for a coin-flip test at most (1/2)^8 = 0.4% likely; a nondeterministic test rarely
   needs more than one extra run.

**Depth** (``core.depth``; the health model advises it through a
:class:`~envcheck.kinds.testvalidity.depth.DepthAdvisor`): the above is a full validation. An
environment long healthy under its current image digest and spec gets a **light check**: the
negative control and one shuffled positive run. At the first doubt (a test that must pass did
not, a fail-to-pass test passed without the oracle) it goes on to the whole protocol at once:
the declared-order run, the other reruns, confirmation. The result says which
(``details.depth``: mode, why, runs, failed runs), and the health model weighs its runs.

**Dataset tasks** (SWE-bench style): every run first applies the spec's ``test_patch`` (after
the oracle, as the harness applies it after the prediction), and an ``oracle.patch`` is the
gold patch; a patch that does not apply ends the probe with ``test_patch_does_not_apply`` or
``gold_patch_does_not_apply`` (never flaky: the same patch on the same image). With
``report: <log parser>`` outcomes come from the command's log, ids matched exactly.

Every run uses a **fresh container** (``ctx.fresh_sandbox()``): the oracle edits the repo,
tests leave caches, ``.pyc`` files and temp files, and a run must not inherit them (a positive
run in a container where the negative one ran would test two changes at once; a rerun in the
same container would miss flakiness that a clean start shows). Measured with bench/flaky.py
on the demo task (2 cores, 2 probes at a time): create + start + remove of a hardened
container costs ~0.3 s; a whole run (container, oracle, pytest, report read) 0.5-1.0 s; a
healthy 9-run probe 5-9 s, a third of it container overhead. Real suites that take minutes
dwarf it; clean state is worth it.

Any run that cannot be trusted ends the probe with its reason (``timeout``, ``output_flood``,
``parse_error``, ``no_tests_collected``, ``oracle_failed``): ``fail`` if it is the first run of
its phase, ``flaky`` if earlier runs of that phase were fine. A hang costs ``timeout_s`` once;
the remaining runs are skipped. Runs that ``probe_s`` leaves no time for are skipped (the
details' notes say how many); if that leaves no positive run at all, nothing shows the oracle
fixes anything: ``fail`` / ``timeout``, never a pass. A failure whose JUnit message (or
output) shows a resolver or socket error is ``needs_network``: sandboxes have no network.

Verdict order: a deterministic failure (``f2p_passes_before_oracle``, ``needs_network``,
``oracle_does_not_fix``, ``p2p_broken``, first of these names it) outranks flakiness; every
problem is listed in ``details``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from envcheck.catalogue.probe_specs import TestSpec
from envcheck.core.depth import DEPTH_KEY, Depth, DepthAdvice
from envcheck.core.results import CommandEvidence, ProbeKind, Reason, Status
from envcheck.kinds.adversarial.swebench import with_swebench_controls
from envcheck.kinds.adversarial.testspec import with_controls
from envcheck.kinds.base import Probe, ProbeContext, Verdict
from envcheck.kinds.leaks.check import with_leak_checks
from envcheck.kinds.strength.controls import with_strength_controls
from envcheck.kinds.testvalidity.agreement import controls_agree
from envcheck.kinds.testvalidity.depth import plan
from envcheck.kinds.testvalidity.harbor import verify_harbor
from envcheck.kinds.testvalidity.runs import Phase, Problem, Run, execute, network_error
from envcheck.sandbox.base import Deadline

__all__ = ["CONFIRM", "TestsProbe"]

CONFIRM = 4
EVIDENCE_MAX = 8
LISTED_MAX = 50  # test ids listed per problem or run in details
PRIORITY = [Reason.F2P_PASSES_BEFORE_ORACLE, Reason.NEEDS_NETWORK, Reason.ORACLE_DOES_NOT_FIX,
            Reason.P2P_BROKEN]
# Properties of the image, not of a run: never flaky.
SETUP = {Reason.USER_MISSING, Reason.SHELL_MISSING, Reason.WORKDIR_MISSING,
         Reason.LOGIN_SHELL_BROKEN, Reason.TEST_PATCH_DOES_NOT_APPLY,
         Reason.GOLD_PATCH_DOES_NOT_APPLY}
Kind = Literal["order", "random", "phase"]
_FULL = DepthAdvice(Depth.FULL, "no evidence at hand")


class _Stop(Exception):  # control flow: never leaves this module
    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict


@dataclass
class _Found:
    problems: list[tuple[Reason, str, list[str]]] = field(default_factory=list)

    def add(self, reason: Reason, detail: str, tests: list[str]) -> None:
        if tests:
            shown = ", ".join(tests[:3]) + (f" (+{len(tests) - 3} more)" if len(tests) > 3 else "")
            self.problems.append((reason, f"{detail}: {shown}", tests[:LISTED_MAX]))


class _Validation:
    def __init__(self, ctx: ProbeContext, spec: TestSpec,
                 depth: DepthAdvice = _FULL) -> None:
        self.ctx, self.spec, self.depth = ctx, spec, depth
        self.escalated: str | None = None  # why a light check went on to the whole protocol
        self.f2p, self.p2p = tuple(spec.fail_to_pass), tuple(spec.pass_to_pass)
        self.declared = self.f2p + self.p2p
        self.runs: list[Run] = []
        self.rng = random.Random()  # seeded from os.urandom; each shuffle's seed is recorded
        self.deadline = Deadline(ctx.env.timeouts.probe_s)
        self.notes: list[str] = []

    # --- running ---------------------------------------------------------------------------

    def run(self, phase: Phase, label: str, order: tuple[str, ...] | None = None,
            seed: int | None = None) -> Run:
        run = execute(self.ctx, self.spec, Run(phase, order or self.declared, label, seed))
        self.runs.append(run)
        if run.problem is not None:
            raise _Stop(self.invalid(run, run.problem))
        return run

    def shuffled(self) -> tuple[int, tuple[str, ...]]:
        for _ in range(20):  # a shuffle that gives the declared order back tests nothing new
            seed = self.rng.getrandbits(32)
            order = list(self.declared)
            random.Random(seed).shuffle(order)
            if tuple(order) != self.declared:
                break
        return seed, tuple(order)

    def invalid(self, run: Run, problem: Problem) -> Verdict:
        earlier = [r for r in self.runs[:-1] if r.phase is run.phase]
        flaky = bool(earlier) and problem.reason not in SETUP
        summary = f"{run.label}: {problem.detail}"
        if flaky:
            summary += f" (after {len(earlier)} good {run.phase} run(s))"
        return self.verdict(Status.FLAKY if flaky else Status.FAIL, problem.reason, summary)

    def check(self) -> Verdict:
        try:
            return self.validate()
        except _Stop as stop:
            return stop.verdict

    def validate(self) -> Verdict:
        if not self.f2p:
            return self.verdict(Status.FAIL, Reason.F2P_PASSES_BEFORE_ORACLE, "no fail_to_pass "
                                "test declared: nothing tells a fix from a no-op")
        negative = self.run(Phase.NEGATIVE, "negative control")
        passing = [t for t in self.f2p if negative.passed(t)]
        if passing:
            found = _Found()
            found.add(Reason.F2P_PASSES_BEFORE_ORACLE, "fail-to-pass test(s) pass without the "
                      "oracle", passing)
            return self.conclude(found, {})
        oracle = self.spec.oracle is not None
        phase = Phase.POSITIVE if oracle else Phase.NEGATIVE
        total = self.spec.reruns if oracle else self.spec.reruns - 1
        # A light check's one run is shuffled; escalated, the declared order runs next.
        light = self.depth.depth is Depth.LIGHT
        declared_at = 1 if light else 0
        for i in range(total):
            if light and i == 1:
                self.escalated = self.doubt()
                if self.escalated is None:
                    break  # the light check stands: nothing to look into
            if self.deadline.expired():
                self.notes.append(f"probe_s reached: {total - i} of {total} runs skipped")
                if oracle and i == 0:  # nothing shows the oracle fixes anything: never a pass
                    return self.verdict(Status.FAIL, Reason.TIMEOUT, f"probe_s "
                                        f"({self.ctx.env.timeouts.probe_s:g}s) reached after "
                                        "the negative control: the positive control was not "
                                        "played (the oracle never ran)")
                break
            label = f"{phase} run {i + 1}/{total}"
            if (oracle and i == declared_at) or not self.spec.shuffle:
                self.run(phase, label)
            else:
                seed, order = self.shuffled()
                self.run(phase, label + " (shuffled)", order, seed)
        kinds = self.flakiness()
        return self.conclude(self.deterministic(kinds), kinds)

    def doubt(self) -> str | None:
        """Why a light check cannot stand on its runs (then the whole protocol runs): a test
        that must pass did not (in any run so far: runs that disagree show it too), or a
        fail-to-pass test passed without the oracle."""
        failed = [t for t in self.declared if any(not r.passed(t) for r in self.comparable(t))]
        if failed:
            return f"{failed[0]} did not pass" + (
                f" (+{len(failed) - 1} more)" if len(failed) > 1 else "")
        fixed = [t for t in self.f2p if any(r.passed(t) for r in self.runs
                                            if r.phase is Phase.NEGATIVE)]
        return f"{fixed[0]} passed without the oracle" if fixed else None

    def went_wrong(self, run: Run) -> bool:
        """The run is invalid, or a test that must pass in it did not."""
        return run.problem is not None or any(
            not run.passed(t) for t in self.declared
            if run.phase is Phase.POSITIVE or t in self.p2p)

    # --- flakiness ---------------------------------------------------------------------------

    def comparable(self, test_id: str) -> list[Run]:
        """Runs in which ``test_id`` must pass."""
        if test_id in self.p2p:
            return list(self.runs)
        return [r for r in self.runs if r.phase is Phase.POSITIVE]

    def disagrees(self, test_id: str) -> bool:
        seen = {r.passed(test_id) for r in self.comparable(test_id)}
        return len(seen) == 2

    def flakiness(self) -> dict[str, Kind]:
        kinds: dict[str, Kind] = {}
        for _ in range(3):  # groups of tests failing together; more than 3 is just random
            open_ = [t for t in self.declared if t not in kinds and self.disagrees(t)]
            if not open_:
                return kinds
            failing = next(r for r in self.runs
                           if any(not r.passed(t) and r in self.comparable(t) for t in open_))
            group = [t for t in open_ if not failing.passed(t) and failing in self.comparable(t)]
            passing = max((r for r in self.runs if r is not failing), key=lambda r: (
                sum(r.passed(t) for t in group), r.phase is failing.phase,
                r.order == failing.order))
            group = [t for t in group if passing.passed(t)]
            kinds.update(dict.fromkeys(group, self.confirm(failing, passing, group)))
        kinds.update(dict.fromkeys((t for t in self.declared
                                    if t not in kinds and self.disagrees(t)), "random"))
        return kinds

    def confirm(self, failing: Run, passing: Run, group: list[str]) -> Kind:
        if failing.phase is passing.phase and failing.order == passing.order:
            return "random"
        for k in range(1, CONFIRM + 1):
            if self.deadline.expired():
                self.notes.append("probe_s reached: confirmation cut short")
                return "random"
            again = self.run(failing.phase, f"confirm failing {failing.label} ({k}/{CONFIRM})",
                             failing.order, failing.seed)
            if any(again.passed(t) for t in group):
                return "random"
            again = self.run(passing.phase, f"confirm passing {passing.label} ({k}/{CONFIRM})",
                             passing.order, passing.seed)
            if not all(again.passed(t) for t in group):
                return "random"
        return "order" if failing.order != passing.order else "phase"

    # --- verdict -----------------------------------------------------------------------------

    def deterministic(self, kinds: dict[str, Kind]) -> _Found:
        found = _Found()
        positive = [r for r in self.runs if r.phase is Phase.POSITIVE]
        negative = [r for r in self.runs if r.phase is Phase.NEGATIVE]
        found.add(Reason.F2P_PASSES_BEFORE_ORACLE, "fail-to-pass test(s) pass without the oracle",
                  [t for t in self.f2p if any(r.passed(t) for r in negative)])
        flaky = {t for t, k in kinds.items() if k != "phase"}
        not_fixed = [t for t in self.f2p if t not in flaky and positive
                     and not any(r.passed(t) for r in positive)]
        broken = [t for t in self.p2p if t not in flaky and kinds.get(t) != "phase"
                  and any(not r.passed(t) for r in self.runs)]
        offline = [t for t in not_fixed + broken if self.network_sign(t)]
        absent = {t for t in not_fixed + broken if all(r.outcomes.get(t) is None
                                                       for r in self.runs)}
        found.add(Reason.NEEDS_NETWORK, "test(s) fail reaching for the network (the sandbox is "
                  "offline)", offline)
        found.add(Reason.ORACLE_DOES_NOT_FIX, "fail-to-pass test(s) still fail after the oracle",
                  [t for t in not_fixed if t not in offline and t not in absent])
        found.add(Reason.ORACLE_DOES_NOT_FIX, "fail-to-pass test(s) in no report (a wrong id?)",
                  [t for t in not_fixed if t in absent])
        found.add(Reason.P2P_BROKEN, "pass-to-pass test(s) fail in every run",
                  [t for t in broken if t not in offline and t not in absent])
        found.add(Reason.P2P_BROKEN, "pass-to-pass test(s) in no report (a wrong id?)",
                  [t for t in broken if t in absent])
        phase = [t for t, k in kinds.items() if k == "phase"]
        found.add(Reason.P2P_BROKEN, "pass-to-pass test(s) fail without the oracle and pass after "
                  "it, every time (fail-to-pass?)", [t for t in phase if positive[0].passed(t)])
        found.add(Reason.P2P_BROKEN, "pass-to-pass test(s) pass without the oracle and fail "
                  "after it, every time (the oracle breaks them)",
                  [t for t in phase if not positive[0].passed(t)])
        return found

    def network_sign(self, test_id: str) -> str | None:
        for run in self.runs:
            case = run.outcomes.get(test_id)
            if case is not None and not case.passed:
                return network_error(case.message or run.output)
        return None

    def conclude(self, found: _Found, kinds: dict[str, Kind]) -> Verdict:
        flaky = {t: k for t, k in kinds.items() if k != "phase"}
        details: dict[str, Any] = {"flaky_tests": sorted(flaky)}
        if flaky:
            details["flaky"] = {t: {"kind": k, "passed": sum(r.passed(t) for r in self.comparable(
                t)), "runs": len(self.comparable(t))} for t, k in sorted(flaky.items())}
        details["problems"] = [{"reason": str(r), "detail": d, "tests": t}
                               for r, d, t in found.problems]
        if found.problems:
            ranked = sorted(found.problems, key=lambda p: PRIORITY.index(p[0]))
            more = f" (+{len(ranked) - 1} more problem(s))" if len(ranked) > 1 else ""
            return self.verdict(Status.FAIL, ranked[0][0], ranked[0][1] + more, details)
        if flaky:
            reason = (Reason.NONDETERMINISTIC if "random" in flaky.values()
                      else Reason.ORDER_DEPENDENT)
            shown = ", ".join(f"{t} ({details['flaky'][t]['passed']}/"
                              f"{details['flaky'][t]['runs']} passed)" for t in sorted(flaky)[:3])
            what = "only in some test orders" if reason is Reason.ORDER_DEPENDENT else "at random"
            return self.verdict(Status.FLAKY, reason, f"{len(flaky)} test(s) fail {what}: "
                                f"{shown}", details)
        light = " (a light check)" if self.light_stood() else ""
        negative = [r for r in self.runs if r.phase is Phase.NEGATIVE]
        summary = controls_agree(
            "negative control", len(negative),
            "fail-to-pass tests fail, pass-to-pass tests pass",
            len(self.runs) - len(negative),
            "every declared test passes" if self.spec.oracle is not None else None,
            "none declared")
        return self.verdict(Status.PASS, Reason.OK, summary + light, details)

    def light_stood(self) -> bool:
        return self.depth.depth is Depth.LIGHT and self.escalated is None

    def depth_record(self) -> dict[str, Any]:
        """How deep the probe went and why, and the runs it holds (core.depth.RunCount)."""
        mode, why = self.depth.depth, self.depth.why
        if self.depth.depth is Depth.LIGHT and not self.light_stood():
            mode, why = Depth.FULL, f"escalated from a light check: {self.escalated}"
        return {"mode": str(mode), "why": why, "runs": len(self.runs),
                "failed_runs": sum(self.went_wrong(r) for r in self.runs)}

    def verdict(self, status: Status, reason: Reason, summary: str,
                details: dict[str, Any] | None = None) -> Verdict:
        info = dict(details or {})
        info["runs"] = [_summary(r) for r in self.runs]
        info["container_start_s"] = round(sum(r.start_s for r in self.runs), 3)
        info.update(reruns=self.spec.reruns, shuffle=self.spec.shuffle,
                    oracle=self.spec.oracle is not None)
        info[DEPTH_KEY] = self.depth_record()
        if self.notes:
            info["notes"] = self.notes
        return Verdict(status, reason, summary, info, self.evidence())

    def evidence(self) -> tuple[CommandEvidence, ...]:
        """The first run of each phase, then runs that went wrong, up to EVIDENCE_MAX."""
        chosen: list[Run] = []
        for run in self.runs:
            first = all(r.phase is not run.phase for r in chosen)
            if first or self.went_wrong(run):
                chosen.append(run)
        return tuple(e for r in chosen for e in r.evidence)[:EVIDENCE_MAX]


def _summary(run: Run) -> dict[str, Any]:
    failed = run.not_passed(run.order) if run.problem is None else []
    return {"label": run.label, "phase": str(run.phase), "seed": run.seed,
            "exit_code": run.exit_code, "problem": str(run.problem.reason) if run.problem else None,
            "not_passed": failed[:LISTED_MAX], "start_s": round(run.start_s, 3),
            "duration_s": round(run.duration_s, 3)}


class TestsProbe(Probe):
    __test__: ClassVar[bool] = False  # not a pytest test class, though its name says so
    kind = ProbeKind.TESTS

    def check(self, ctx: ProbeContext) -> Verdict:
        # answer-leak checks, if declared, on the verdict of the protocol's own controls;
        # then the wrong-fix controls, the dearest (a container run or two per mutant)
        return with_strength_controls(ctx, with_leak_checks(ctx, self.verify(ctx)))

    def verify(self, ctx: ProbeContext) -> Verdict:
        if ctx.env.harbor is not None:  # a Harbor task folder: its own reward protocol
            return verify_harbor(ctx, ctx.env.harbor)
        assert ctx.env.tests is not None  # applies() said so
        spec = ctx.env.tests
        verdict = _Validation(ctx, spec, plan(ctx, spec)).check()
        # adversarial controls, if declared, in the protocol the environment verifies by
        if spec.test_patch is not None:  # a dataset task: the SWE-bench harness's
            return with_swebench_controls(ctx, spec, verdict)
        return with_controls(ctx, spec, verdict)
