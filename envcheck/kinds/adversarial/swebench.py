"""Adversarial controls in the SWE-bench harness's protocol (a dataset task with a
``test_patch``).

Each trick runs in a fresh container as the agent's only action, in place of a prediction;
then the evaluation runs as the harness runs it: the files the test patch touches are reset
and the test patch applied over the agent's tree, the dataset's test command runs in that
tree, and its log goes through the dataset's parser. A trick is rewarded when every
fail-to-pass test passes. A trick whose command failed and changed nothing git sees never
acted: it is counted apart, neither refused nor rewarded.

The re-applied test patch undoes what a trick did to the files it touches (a rewritten or
deleted test file comes back): the result names the files the trick changed and those the
test patch put back, so a refusal says whether the verifier or the patch refused it. What
the patch does not touch (a ``conftest.py``, start-up hooks in site-packages, files beside
the tests) only the test command can refuse: the harness's own ``pytest -rA`` lets them in,
an isolated interpreter with ``--noconftest`` does not (docs/how-to/hack-resistant.md, "Is my
verifier hack-resistant?"). The result says so (``protocol``).
"""

from __future__ import annotations

import dataclasses
import shlex

from envcheck.catalogue.probe_specs import TestSpec
from envcheck.core.results import CommandEvidence
from envcheck.kinds.adversarial.controls import Attempt, Attempted
from envcheck.kinds.adversarial.controls import with_controls as controlled
from envcheck.kinds.adversarial.library import Trick
from envcheck.kinds.adversarial.play import Target, play
from envcheck.kinds.adversarial.testspec import refused_or_rewarded, target, trick_run
from envcheck.kinds.base import ProbeContext, Verdict
from envcheck.kinds.testvalidity.patches import reset_files
from envcheck.sandbox.base import Sandbox

__all__ = ["PROTOCOL", "changed_files", "with_swebench_controls"]

PROTOCOL = ("SWE-bench harness: the test patch re-applied over the agent's tree, the dataset's "
            "test command run in that tree; what the patch does not touch (conftest.py files, "
            "start-up hooks, files beside the tests) only that command can refuse")
SHOWN = 5  # files named per note


def changed_files(porcelain: str) -> list[str]:
    """Paths ``git status --porcelain`` lists (a rename: its new path), in its order."""
    found = []
    for line in porcelain.splitlines():
        path = line[3:].split(" -> ")[-1].strip()
        if len(line) > 3 and path:
            found.append(path.strip('"'))
    return found


def _status(sandbox: Sandbox, ctx: ProbeContext) -> list[str] | None:
    """What the trick changed in the repository, as git sees it (untracked files too); None:
    git could not tell."""
    env = ctx.env
    result = sandbox.exec([env.shell, "-c", f"cd -- {shlex.quote(env.workdir)} && "
                           "git status --porcelain --untracked-files=all"], user=env.user,
                          timeout_s=env.timeouts.exec_s, output_limit=64 * 1024)
    return changed_files(result.text) if result.exit_code == 0 else None


def _shown(files: list[str]) -> str:
    more = f" (+{len(files) - SHOWN} more)" if len(files) > SHOWN else ""
    return ", ".join(files[:SHOWN]) + more


def _attempt(ctx: ProbeContext, spec: TestSpec, aim: Target) -> Attempt:
    assert spec.test_patch is not None
    restored = set(reset_files(spec.test_patch))

    def attempt(trick: Trick) -> Attempted:
        seen: list[list[str] | None] = []  # what git saw the trick change, once it ran

        def act(sandbox: Sandbox) -> CommandEvidence:
            evidence = play(sandbox, ctx.env, trick, aim)
            seen.append(_status(sandbox, ctx))
            return evidence

        run = trick_run(ctx, spec, trick, act)
        found = seen[0] if seen else None
        outcome = refused_or_rewarded(trick, spec, run, found)
        if outcome.could_not_act is not None:
            return outcome
        changed = found or []
        undone = [f for f in changed if f in restored]
        kept = [f for f in changed if f not in restored]
        what = (f"; the trick changed {_shown(changed)}" if changed
                else "; the trick changed no file of the repository")
        if undone:
            what += f"; the test patch put back {_shown(undone)}"
        if kept and undone:
            what += f"; left as the trick made them: {_shown(kept)}"
        return dataclasses.replace(outcome, verifier=outcome.verifier + what)

    return attempt


def with_swebench_controls(ctx: ProbeContext, spec: TestSpec, verdict: Verdict) -> Verdict:
    """``verdict`` with the adversarial controls' outcome, if the dataset asks for them."""
    return controlled(ctx, spec.adversarial, verdict,
                      lambda: _attempt(ctx, spec, target(ctx, spec)), protocol=PROTOCOL)
