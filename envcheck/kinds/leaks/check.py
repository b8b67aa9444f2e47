"""The leak checks of one tests probe: which apply, one container to play them, reuse.

They run when the environment declares ``leaks:`` and the probe's own verdict is a pass (a
broken task is broken already). The answer can only change with the image (its digest) or
with what is checked (the tests spec's hash covers ``leaks``, the patches, a Harbor task's
``solution/`` and ``tests/``), so a whole outcome is reused while both hold, through the same
ledger as the adversarial controls (locally the store; on a Ray node what the caller sent).
They get a ``timeouts.probe_s`` budget of their own and each command ``timeouts.exec_s``; a
check the budget cuts short is listed as such and the outcome is not reused.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from envcheck.catalogue.models import Environment
from envcheck.catalogue.probe_specs import LeakChecks
from envcheck.core.results import ProbeKind, Status
from envcheck.kinds.adversarial.ledger import ControlsLedger
from envcheck.kinds.base import ProbeContext, Verdict
from envcheck.kinds.leaks.files import (
    DeclaredPath,
    Target,
    files_script,
    folder_targets,
    read_files,
    text_target,
)
from envcheck.kinds.leaks.gitstore import git_inputs, git_script, read_git
from envcheck.kinds.leaks.verdict import DETAIL_KEY, Checked, LeakOutcome, judge, stored_outcome
from envcheck.kinds.testvalidity.harbor_run import harbor_sandbox
from envcheck.sandbox.base import Deadline, ExecResult, Sandbox

__all__ = ["declared_paths", "host_targets", "planned", "with_leak_checks"]

OUTPUT_LIMIT = 1024 * 1024  # all of it is read back: a line dropped would be a finding lost
EVIDENCE_BYTES = 16 * 1024  # of each command's output kept as evidence
MIN_EXEC_S = 1.0  # less time left than this: the check is not started (a walk of / takes more)
_LABELS = {"git": "leak check: the git object store and the commits after the base commit",
           "files": "leak checks: declared paths and the answer's files across the image"}


def host_targets(env: Environment) -> list[Target]:
    """The answer's files envcheck holds itself, hashed here."""
    if env.harbor is not None:
        task = Path(env.harbor.task_dir)
        return (folder_targets(task / "solution", "solution", "solution")
                + folder_targets(task / "tests", "tests", "tests"))
    spec = env.tests
    assert spec is not None
    oracle = spec.oracle
    found = [text_target(oracle.script if oracle else None, "solution",
                         "the oracle script (oracle.script)"),
             text_target(oracle.patch if oracle else None, "solution",
                         "the gold patch (oracle.patch)"),
             text_target(spec.test_patch, "tests", "the test patch (test_patch)")]
    return [t for t in found if t is not None]


def declared_paths(env: Environment, plan: LeakChecks) -> list[DeclaredPath]:
    found = []
    oracle = env.tests.oracle if env.harbor is None and env.tests is not None else None
    if oracle is not None and oracle.path is not None:
        found.append(DeclaredPath("solution", oracle.path, "the oracle (oracle.path)"))
    found.extend(DeclaredPath("solution", p, "leaks.solution") for p in plan.solution)
    found.extend(DeclaredPath("tests", p, "leaks.tests") for p in plan.tests)
    return found


def planned(env: Environment, plan: LeakChecks) -> list[str]:
    """The checks that apply, in the order they run and are reported."""
    names = ["git"] if env.harbor is None else []
    if declared_paths(env, plan):
        names.append("paths")
    if env.harbor is not None or _holds_texts(env):
        names.append("files")  # envcheck holds files of the answer to look for
    return names


def _holds_texts(env: Environment) -> bool:
    """The spec carries the answer's text: an oracle script or patch, a test patch."""
    spec = env.tests
    if spec is None:
        return False
    oracle = spec.oracle
    return spec.test_patch is not None or (
        oracle is not None and (oracle.script is not None or oracle.patch is not None))


class _Player:
    def __init__(self, ctx: ProbeContext, sandbox: Sandbox, user: str | None) -> None:
        self.ctx, self.sandbox, self.user = ctx, sandbox, user
        self.deadline = Deadline(ctx.env.timeouts.probe_s)
        self.outcome = LeakOutcome()

    def exec(self, check: str, script: str, variables: dict[str, str]) -> ExecResult | None:
        """``script`` as the agent's user, or None when the time budget is (all but) spent."""
        env = self.ctx.env
        remaining = self.deadline.remaining()
        if remaining < MIN_EXEC_S:
            return None
        result = self.sandbox.exec([env.shell, "-c", script], user=self.user, env=variables,
                                   timeout_s=min(env.timeouts.exec_s, remaining),
                                   output_limit=OUTPUT_LIMIT)
        evidence = result.evidence(_LABELS[check])
        kept = dataclasses.replace(evidence, output_head=evidence.output_head[:EVIDENCE_BYTES],
                                   output_tail=evidence.output_tail[-EVIDENCE_BYTES:],
                                   truncated=evidence.truncated or len(evidence.output_head)
                                   > EVIDENCE_BYTES)
        self.outcome.evidence += (kept,)
        return result

    def git(self) -> list[Target]:
        env = self.ctx.env
        assert env.tests is not None
        patches, variables = git_inputs(env.tests)
        steps = []
        for i, patch in enumerate(patches):
            step, extra = patch.deliver(self.sandbox, f"ENVCHECK_PATCH_{i}")
            steps.append(step)
            variables.update(extra)
        budget = min(env.timeouts.exec_s, self.deadline.remaining())
        variables.update(ENVCHECK_WORKDIR=env.workdir,
                         ENVCHECK_HISTORY_S=str(max(1, int(budget / 2))))
        result = self.exec("git", git_script("\n".join(steps)), variables)
        if result is None:
            self.outcome.checked.append(_unplayed("git"))
            return []
        found, checked, leaves = read_git(result.text, result.timed_out)
        self.outcome.found.extend(found)
        self.outcome.checked.append(checked)
        return leaves

    def files(self, targets: list[Target], paths: list[DeclaredPath], names: list[str]) -> None:
        script, variables = files_script(targets, paths)
        result = self.exec("files", script, variables)
        if result is None:
            self.outcome.checked.extend(_unplayed(n) for n in names)
            return
        who = self.user or "the image's user"
        found, checked = read_files(result.text, result.timed_out, targets, paths, who,
                                    look="files" in names)
        self.outcome.found.extend(found)
        self.outcome.checked.extend(checked)


def _unplayed(check: str) -> Checked:
    return Checked(check, False, "not played: probe_s reached", cut_short=True)


def play(ctx: ProbeContext, plan: LeakChecks, names: list[str]) -> LeakOutcome:
    """Every check of ``names`` in one fresh container of the image."""
    env, harbor = ctx.env, ctx.env.harbor
    spec = ctx.spec() if harbor is None else harbor_sandbox(ctx.spec(), harbor, env.image)
    user = env.user if harbor is None else harbor.agent_user
    started = time.monotonic()
    with ctx.open_sandbox(spec) as sandbox:
        player = _Player(ctx, sandbox, user)
        targets = host_targets(env)
        if "git" in names:
            targets += player.git()
        rest = [n for n in names if n != "git"]
        if rest:
            player.files(targets, declared_paths(env, plan), rest)
    player.outcome.seconds = time.monotonic() - started
    return player.outcome


def with_leak_checks(ctx: ProbeContext, verdict: Verdict) -> Verdict:
    """``verdict`` with the leak checks' outcome, if the environment declares them: the
    stored outcome for this image digest and spec if there is a whole one, else played."""
    plan = ctx.env.leaks()
    if plan is None or verdict.status is not Status.PASS:
        return verdict
    names = planned(ctx.env, plan)
    ledger = ctx.service(ControlsLedger)
    prior = ledger.prior(ctx.env.id, ctx.image_digest, ctx.env.spec_hash(ProbeKind.TESTS),
                         key=DETAIL_KEY) if ledger is not None else None
    stored = stored_outcome(prior[1], names) if prior is not None else None
    if prior is not None and stored is not None:
        return judge(verdict, stored, require=plan.require,
                     reused={"from": prior[0].isoformat()})
    return judge(verdict, play(ctx, plan, names), require=plan.require)
