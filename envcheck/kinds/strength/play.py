"""The wrong-fix controls' runs in sandboxes: the gold patch's files read back, and each
candidate patch (a mutant, a partial patch) through the environment's own verification.

**Post-images**: one fresh container, the gold patch applied as the positive control applies
it (the harness's ``git apply`` / ``patch --fuzz=5`` chain), then each changed Python file
read back whole up to :data:`POST_IMAGE_MAX` (a file past it is not mutated, and said so:
its text would be cut). **A candidate** goes where the gold patch goes: the tests spec with
the candidate as its ``oracle.patch``, through
:func:`~envcheck.kinds.testvalidity.runs.execute` (a fresh container; a dataset's test patch
applied after it, its log parser), fail-to-pass tests first; pass-to-pass tests only when
every fail-to-pass test passed.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from envcheck.catalogue.probe_specs import Oracle, TestSpec
from envcheck.core.results import CommandEvidence, Reason
from envcheck.kinds.base import ProbeContext
from envcheck.kinds.strength.diffs import PatchError, parse_patch
from envcheck.kinds.strength.model import Skipped
from envcheck.kinds.strength.paths import is_doc_path, is_test_path
from envcheck.kinds.strength.readback import UNREADABLE, read_back
from envcheck.kinds.strength.verdict import Outcome
from envcheck.kinds.testvalidity.patches import steps_for_gold
from envcheck.kinds.testvalidity.runs import Patch, Phase, Problem, Run, execute
from envcheck.sandbox.base import Sandbox

__all__ = ["POST_IMAGE_MAX", "PostImages", "Trial", "mutable_files", "post_images", "trial"]

POST_IMAGE_MAX = 1024 * 1024  # bytes of one file read back
FILES_MAX = 20  # files read back at most
SHOWN = 160  # characters of a detail
_MARK = "envcheck:strength:"
# A run whose tests fail because the code no longer imports or compiles shows the mutant
# broke the module, not that the tests refused its behaviour.
_BROKEN = re.compile(r"\b(ImportError|ModuleNotFoundError|SyntaxError|IndentationError)\b")
# A SyntaxError is the module's own only where it is located in a file the patch changes (a
# compile error's frame has no ``, in <function>``; its message ends ``(<file>, line N)``):
# raised by code that parses a text at run time (``sympify``, ``lambdify``, ``eval``) it is
# the behaviour the tests refused, a kill.
_SYNTAX = ("SyntaxError", "IndentationError")
_INCOMPETENT = {Reason.GOLD_PATCH_DOES_NOT_APPLY: "does not apply",
                Reason.TEST_PATCH_DOES_NOT_APPLY: "the test patch does not apply after it",
                Reason.NO_TESTS_COLLECTED: "no test collected",
                Reason.PARSE_ERROR: "no usable report"}


def mutable_files(gold: str) -> list[str]:
    """The non-test Python files the gold patch leaves (whose post-images the generator
    needs); PatchError if it is not a unified diff."""
    found = []
    for fp in parse_patch(gold).files:
        path = fp.new_path
        if path and path.endswith(".py") and fp.hunks and not fp.binary \
                and not is_test_path(path) and not is_doc_path(path):
            found.append(path)
    return found


@dataclass(frozen=True)
class PostImages:
    texts: dict[str, str]
    why: str | None = None  # why they could not be read: the controls are not played
    evidence: tuple[CommandEvidence, ...] = ()
    skipped: tuple[Skipped, ...] = ()  # read, not handed on, and why


def post_images(ctx: ProbeContext, spec: TestSpec, files: list[str]) -> PostImages:
    """``files`` as the gold patch leaves them, read in one fresh container."""
    env = ctx.env
    assert spec.oracle is not None and spec.oracle.patch is not None
    gold = Patch("gold patch", spec.oracle.patch, "strength-gold", steps_for_gold,
                 Reason.GOLD_PATCH_DOES_NOT_APPLY)
    with ctx.fresh_sandbox() as sandbox:
        steps, variables = gold.deliver(sandbox, "ENVCHECK_PATCH_0")
        script = (f"cd -- {shlex.quote(env.workdir)} || exit 3\n"
                  f"if ! {{ {steps}\n}} >/dev/null 2>&1; then echo {_MARK}not-applied; "
                  "exit 4; fi\n")
        applied = sandbox.exec([env.shell, "-c", script], user=env.user, env=variables or None,
                               timeout_s=env.timeouts.exec_s)
        evidence = (applied.evidence("wrong-fix controls: apply the gold patch"),)
        if applied.exit_code != 0 or applied.timed_out:
            return PostImages({}, f"the gold patch did not apply in a fresh container (exit "
                              f"{applied.exit_code}): its files could not be read", evidence)
        texts: dict[str, str] = {}
        skipped: list[Skipped] = []
        for path in files[:FILES_MAX]:
            read = read_back(sandbox, path, POST_IMAGE_MAX, user=env.user,
                             timeout_s=env.timeouts.exec_s, shell=env.shell, cwd=env.workdir)
            if read.why == UNREADABLE:
                return PostImages({}, f"{path} could not be read after the gold patch (exit "
                                  f"{read.result.exit_code})",
                                  (*evidence, read.result.evidence(f"read {path}")))
            if read.data is None:  # too large to mutate whole
                skipped.append(Skipped(path, f"larger than {POST_IMAGE_MAX} bytes after the "
                                       "gold patch: not read whole"))
                continue
            try:
                texts[path] = read.data.decode("utf-8")
            except UnicodeDecodeError:
                skipped.append(Skipped(path, "not UTF-8 after the gold patch"))
    return PostImages(texts, None, evidence, tuple(skipped))


@dataclass(frozen=True)
class Trial:
    outcome: Outcome
    detail: str
    runs: int
    evidence: tuple[CommandEvidence, ...]


def _failed(run: Run, ids: tuple[str, ...]) -> list[str]:
    return [t for t in ids if not run.passed(t)]


def _shown(ids: list[str]) -> str:
    more = f" (+{len(ids) - 1} more)" if len(ids) > 1 else ""
    return f"{ids[0]}{more}"


def _problem(run: Run) -> tuple[Outcome, str] | None:
    problem = run.problem
    if problem is None:
        return None
    if problem.reason is Reason.TIMEOUT:
        return Outcome.TIMEOUT, problem.detail[:SHOWN]
    what = _INCOMPETENT.get(problem.reason, str(problem.reason))
    return Outcome.INCOMPETENT, f"{what}: {problem.detail}"[:SHOWN]


def _own_syntax_error(text: str, files: list[str]) -> bool:
    """Whether ``text`` locates a syntax error in one of ``files`` (the patch's)."""
    for path in files:
        name = re.escape(path.rsplit("/", 1)[-1])
        if re.search(rf'File "[^"\n]*{re.escape(path)}", line \d+\s*$', text, re.M) or \
                re.search(rf"\({name}, line \d+\)", text):
            return True
    return False


def _broken(run: Run, failed: list[str], files: list[str]) -> str | None:
    """The sign that the module under test no longer imports, in the failures or the output;
    ``files``: the Python files the candidate patch changes."""
    texts = [case.message for case in (run.outcomes.get(t) for t in failed) if case is not None]
    for text in (*texts, run.output):
        for found in _BROKEN.finditer(text):
            if found.group(1) not in _SYNTAX or _own_syntax_error(text, files):
                return found.group(1)
    return None


def _patched(patch: str | None) -> list[str]:
    """The Python files ``patch`` changes (none if it is not a unified diff)."""
    try:
        return [f.new_path for f in parse_patch(patch or "").files
                if f.new_path and f.new_path.endswith(".py")]
    except PatchError:
        return []


def trial(ctx: ProbeContext, spec: TestSpec, patch: str | None, label: str,
          after_oracle: Callable[[Sandbox], Problem | None] | None = None) -> Trial:
    """``patch`` in the gold patch's place: fail-to-pass tests, then pass-to-pass tests if
    every fail-to-pass test passed. ``patch`` None: the spec's own oracle, then
    ``after_oracle`` in each run (a wrong output written over the oracle's)."""
    candidate = spec if patch is None else spec.model_copy(update={"oracle": Oracle(patch=patch)})
    evidence: list[CommandEvidence] = []
    runs = 0
    for phase, ids in (("fail-to-pass", tuple(spec.fail_to_pass)),
                       ("pass-to-pass", tuple(spec.pass_to_pass))):
        if not ids:
            continue
        run = execute(ctx, candidate, Run(Phase.POSITIVE, ids, f"{label}: {phase} tests"),
                      after_oracle=after_oracle)
        runs += 1
        evidence.extend(run.evidence)
        stopped = _problem(run)
        if stopped is not None:
            return Trial(*stopped, runs, tuple(evidence))
        failed = _failed(run, ids)
        if failed:
            sign = _broken(run, failed, _patched(patch if patch is not None else (
                spec.oracle.patch if spec.oracle is not None else None)))
            if sign is not None:
                return Trial(Outcome.INCOMPETENT, f"the code no longer imports ({sign})", runs,
                             tuple(evidence))
            outcome = Outcome.KILLED if phase == "fail-to-pass" else Outcome.KILLED_P2P
            return Trial(outcome, f"{phase} test failed: {_shown(failed)}"[:SHOWN], runs,
                         tuple(evidence))
    return Trial(Outcome.SURVIVED, "every fail-to-pass and pass-to-pass test passed", runs,
                 tuple(evidence))


def readable(exc: PatchError) -> str:
    return f"the gold patch is not a unified diff the generator reads: {exc}"[:SHOWN * 2]
