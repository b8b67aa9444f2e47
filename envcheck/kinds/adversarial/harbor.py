"""Adversarial controls in Harbor's protocol (a task folder's ``tests/test.sh``).

Each trick runs in a fresh container after the usual preparation (``/logs`` emptied), as the
agent's user in the image's workdir, in place of the agent; then the verifier runs exactly as
in the nop run, in the steps of the spec's Harbor protocol
(:mod:`envcheck.kinds.testvalidity.harbor_run`): the reward files removed as root (Harbor
0.25.0 on, so a forged reward file pays nothing there), ``tests/`` copied (merged) into
``/tests``, ``test.sh`` run, the reward file read back. Harbor's nop agent must score 0, so a
trick that earns a reward above 0 is a hole; a trick that never acted proves nothing and is
counted apart. The tricks aim at the reward file and at ``/tests``; Harbor tasks name no
tests, so the tricks that rewrite or delete named tests find nothing to do (and exit 0:
nothing to do is no failure).
"""

from __future__ import annotations

from envcheck.catalogue.harbor_spec import HarborVerifierSpec
from envcheck.kinds.adversarial.controls import Attempt, Attempted
from envcheck.kinds.adversarial.controls import with_controls as controlled
from envcheck.kinds.adversarial.library import Trick
from envcheck.kinds.adversarial.play import Target, could_not_act, own_command, play
from envcheck.kinds.base import ProbeContext, Verdict
from envcheck.kinds.testvalidity.harbor_run import HarborRun, harbor_sandbox, run_once
from envcheck.kinds.testvalidity.reward import REWARD_DIR

__all__ = ["target", "with_harbor_controls"]


def target(ctx: ProbeContext) -> Target:
    # The forger writes reward.json: Harbor reads it before reward.txt, so under Harbor 0.24.0
    # it stands against a verifier that writes only reward.txt and leaves the other file where
    # it found it. From 0.25.0 Harbor removes it before the verifier runs.
    return Target(ctx.env.workdir, (), f"{REWARD_DIR}/reward.json", '{"reward": 1}',
                  ("/tests",))


def _attempt(ctx: ProbeContext, spec: HarborVerifierSpec, image: str) -> Attempt:
    aim = target(ctx)

    def attempt(trick: Trick) -> Attempted:
        with ctx.open_sandbox(harbor_sandbox(ctx.spec(), spec, image)) as sandbox:
            run = run_once(sandbox, spec, HarborRun("nop", f"trick {trick.name}"),
                           ctx.env.timeouts.exec_s,
                           action=lambda box: play(box, ctx.env, trick, aim))
        evidence = tuple(run.evidence)
        problem = f"{run.problem.reason}: {run.problem.detail}" if run.problem else None
        idle = could_not_act(own_command(evidence), None, problem)
        if idle is not None:
            return Attempted.idle(trick.name, idle, evidence)
        if run.problem is not None:
            return Attempted(trick.name, False, f"refused: {problem}", evidence)
        assert run.reward is not None and run.reward.value is not None
        value, source = run.reward.value, run.reward.source
        if value > 0:
            return Attempted(trick.name, True, f"rewarded: reward {value:g} ({source}; test.sh "
                             f"exited {run.verifier_exit})", evidence)
        return Attempted(trick.name, False, f"refused: reward {value:g} ({source}; test.sh "
                         f"exited {run.verifier_exit})", evidence)

    return attempt


def with_harbor_controls(ctx: ProbeContext, spec: HarborVerifierSpec, image: str,
                         verdict: Verdict) -> Verdict:
    """``verdict`` with the adversarial controls' outcome, if the task's spec asks for them."""
    return controlled(ctx, spec.adversarial, verdict, lambda: _attempt(ctx, spec, image))
