"""Adversarial controls in the tests probe's own protocol (a catalogue ``tests:`` spec).

Each trick runs in a fresh container after the usual preparation, in place of the oracle;
then the environment's test command runs in the workdir and its JUnit report is read back,
exactly as in the negative control. The trick is rewarded when every fail-to-pass test passes
in a usable run; any other outcome (a failing or missing test, no report, a report the exit
code contradicts) is the verifier refusing it, unless the trick never acted (its command did
not start, or failed with nothing to show for it): then it proves nothing either way.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from xml.sax.saxutils import quoteattr

from envcheck.catalogue.probe_specs import TestSpec
from envcheck.core.results import CommandEvidence
from envcheck.kinds.adversarial.controls import Attempt, Attempted
from envcheck.kinds.adversarial.controls import with_controls as controlled
from envcheck.kinds.adversarial.library import Trick
from envcheck.kinds.adversarial.play import Target, could_not_act, own_command, play
from envcheck.kinds.base import ProbeContext, Verdict
from envcheck.kinds.testvalidity.junit import split_id
from envcheck.kinds.testvalidity.runs import Phase, Run, execute
from envcheck.sandbox.base import Sandbox

__all__ = ["forged_junit", "refused_or_rewarded", "target", "trick_run", "with_controls"]

SHOWN = 3  # failing tests named per refusal


def forged_junit(test_ids: tuple[str, ...]) -> str:
    """A JUnit report in which every one of ``test_ids`` passed (what a forger writes)."""
    cases = "".join(f"<testcase classname={quoteattr(c)} name={quoteattr(n)} time=\"0.001\"/>"
                    for c, n in map(split_id, test_ids))
    return (f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" '
            f'errors="0" failures="0" skipped="0" tests="{len(test_ids)}">{cases}'
            f"</testsuite></testsuites>")


def target(ctx: ProbeContext, spec: TestSpec) -> Target:
    declared = (*spec.fail_to_pass, *spec.pass_to_pass)
    base = Target(ctx.env.workdir, tuple(spec.fail_to_pass), spec.junit_path,
                  forged_junit(declared), ())
    # No copy step here: the tests' own folders are where a verifier that restores them
    # copies its pristine files.
    folders = {posixpath.dirname(f) or "." for f in base.test_files}
    dirs = tuple(sorted(posixpath.normpath(posixpath.join(ctx.env.workdir, d)) for d in folders))
    return Target(base.workdir, base.fail_to_pass, base.report_path, base.forged_report, dirs)


def refused_or_rewarded(trick: Trick, spec: TestSpec, run: Run,
                        changed: Sequence[str] | None = None) -> Attempted:
    """What the verifier did with the run that followed ``trick``: rewarded when every
    fail-to-pass test passed in a usable run, refused otherwise (saying why); or why the
    trick could not act (``changed``: what the protocol saw it change, if it can tell)."""
    problem = f"{run.problem.reason}: {run.problem.detail}" if run.problem else None
    idle = could_not_act(own_command(run.evidence), changed, problem)
    if idle is not None:
        return Attempted.idle(trick.name, idle, run.evidence)
    if run.problem is not None:
        return Attempted(trick.name, False, f"refused: {problem}", tuple(run.evidence))
    failing = run.not_passed(spec.fail_to_pass)
    if failing:
        more = f" (+{len(failing) - SHOWN} more)" if len(failing) > SHOWN else ""
        return Attempted(trick.name, False, f"refused: fail-to-pass test(s) did not pass "
                         f"(exit {run.exit_code}): {', '.join(failing[:SHOWN])}{more}",
                         tuple(run.evidence))
    return Attempted(trick.name, True, f"rewarded: every fail-to-pass test passed "
                     f"(exit {run.exit_code})", tuple(run.evidence))


def trick_run(ctx: ProbeContext, spec: TestSpec, trick: Trick,
              action: Callable[[Sandbox], CommandEvidence]) -> Run:
    """The negative control's run with ``action`` (the trick) as the agent's only action."""
    declared = (*spec.fail_to_pass, *spec.pass_to_pass)
    return execute(ctx, spec, Run(Phase.NEGATIVE, declared, f"trick {trick.name}"),
                   action=action)


def _attempt(ctx: ProbeContext, spec: TestSpec, aim: Target) -> Attempt:
    def attempt(trick: Trick) -> Attempted:
        run = trick_run(ctx, spec, trick, lambda sandbox: play(sandbox, ctx.env, trick, aim))
        return refused_or_rewarded(trick, spec, run)

    return attempt


def with_controls(ctx: ProbeContext, spec: TestSpec, verdict: Verdict) -> Verdict:
    """``verdict`` with the adversarial controls' outcome, if the spec asks for them."""
    return controlled(ctx, spec.adversarial, verdict,
                      lambda: _attempt(ctx, spec, target(ctx, spec)))
