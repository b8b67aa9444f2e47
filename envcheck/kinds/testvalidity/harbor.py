"""Harbor task verification: does the verifier tell the reference solution from a no-op,
every time? The tests probe runs this for an environment made from a Harbor task folder.

1. **Image**: the one the task names (``docker_image``, or the operator's override), used as
   given; else ``environment/`` built once per content (:mod:`envcheck.sandbox.build`). A
   build that fails is ``image_build_failed`` with the log's tail as evidence.
2. **nop** (Harbor's nop agent does nothing): a fresh container, the verifier, reward must be 0.
   Anything above 0 is ``nop_rewarded``: the task pays for doing nothing.
3. **oracle**, ``reruns`` times, each in a fresh container: ``solve.sh``, then the verifier;
   the reward must be 1 every time. Never 1: ``oracle_failed`` if ``solve.sh`` exited
   non-zero, else ``oracle_does_not_fix``; sometimes 1: ``nondeterministic`` (flaky).
   Without ``solution/solve.sh`` the nop run is what is repeated.

A run that cannot be read (verifier timeout, no reward file, a malformed one) ends the probe
with its reason: ``fail`` on the first run of its phase, ``flaky`` after good ones. Runs that
``probe_s`` leaves no time for are skipped; if no oracle run is left, ``fail`` / ``timeout``
(nothing shows solve.sh earns the reward), never a pass.
A compose task's runs are each in its agent's container, with its services brought up beside
it (:mod:`.harbor_compose`); GPU tasks are skipped with the reason. Runs of one task use the
task's limits and network (see :mod:`envcheck.catalogue.harbor_env`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envcheck.catalogue.harbor_env import image_tag
from envcheck.catalogue.harbor_spec import HarborVerifierSpec
from envcheck.catalogue.treehash import tree_hash
from envcheck.core.depth import DEPTH_KEY, Depth
from envcheck.core.errors import ComposeFailed, ImageBuildFailed, SandboxFailed
from envcheck.core.results import CommandEvidence, Reason, Status
from envcheck.kinds.adversarial.harbor import with_harbor_controls
from envcheck.kinds.base import ProbeContext, Verdict, compose_failed
from envcheck.kinds.testvalidity.agreement import controls_agree
from envcheck.kinds.testvalidity.harbor_compose import prepare_compose
from envcheck.kinds.testvalidity.harbor_run import HarborRun, Phase, harbor_sandbox, run_once
from envcheck.sandbox.base import Deadline
from envcheck.sandbox.build import BuiltImage, ImageBuilder
from envcheck.sandbox.docker import DockerRuntime

__all__ = ["build_image", "verify_harbor"]

EVIDENCE_MAX = 8
SETUP = {Reason.USER_MISSING, Reason.SHELL_MISSING, Reason.LOGIN_SHELL_BROKEN}
_EPS = 1e-9


def _builder(ctx: ProbeContext) -> ImageBuilder:
    builder = ctx.service(ImageBuilder)
    if builder is not None:
        return builder
    if isinstance(ctx.runtime, DockerRuntime):
        return ImageBuilder.for_runtime(ctx.runtime)
    raise SandboxFailed("no image builder for this sandbox runtime")


def build_image(spec: HarborVerifierSpec, builder: ImageBuilder) -> BuiltImage:
    """The task's image built from ``environment/`` (a cache hit when its content is unchanged)."""
    context = Path(spec.task_dir) / "environment"
    # The hash of the folder as it is now: a folder edited since load builds its new content.
    tag = image_tag(spec.task, tree_hash(context))
    return builder.ensure(context, tag, timeout_s=spec.build_timeout_s,
                          labels={"org.envcheck.harbor-task": spec.task})


def prepare_image(ctx: ProbeContext) -> None:
    """Before a check looks up the image's digest: a Harbor task whose image comes from its
    ``environment/`` gets it built (the :class:`BuiltImage` joins the context's services);
    a build that fails, or a task envcheck cannot run yet, blocks every probe with its
    verdict. Engine failures raise (envcheck's own). Other environments: nothing to do."""
    spec = ctx.env.harbor
    if spec is None:
        return
    if spec.unsupported is not None:
        ctx.blocked = _unsupported(spec)
        return
    if spec.image is not None:
        return
    try:
        if spec.compose is not None:
            built = prepare_compose(ctx, spec, _builder(ctx))
        else:
            built = build_image(spec, _builder(ctx))
    except ImageBuildFailed as exc:
        ctx.runtime.ping()  # a build cut short by a dying engine is not the task's defect
        ctx.blocked = _build_failed(spec, exc)
        return
    except ComposeFailed as exc:
        ctx.runtime.ping()  # Compose cut short by a dying engine: not the task's defect
        ctx.blocked = compose_failed(exc, spec.task)
        return
    ctx.provide(built)
    if built.tag != ctx.env.image:  # the folder changed since load: run what it holds now
        ctx.env = ctx.env.model_copy(update={"image": built.tag})


def _unsupported(spec: HarborVerifierSpec) -> Verdict:
    return Verdict(Status.SKIP, Reason.NOT_APPLICABLE, f"{spec.task}: {spec.unsupported}")


def _build_failed(spec: HarborVerifierSpec, exc: ImageBuildFailed) -> Verdict:
    evidence = CommandEvidence(command=f"docker build {spec.task_dir}/environment",
                               exit_code=None, duration_s=round(exc.duration_s, 4),
                               output_tail=exc.log_tail, output_bytes=len(exc.log_tail.encode()))
    return Verdict(Status.FAIL, Reason.IMAGE_BUILD_FAILED, f"{spec.task}: the image does not "
                   f"build: {exc}", {"task": spec.task}, (evidence,))


class _Verification:
    def __init__(self, ctx: ProbeContext, spec: HarborVerifierSpec, image: str,
                 built: BuiltImage | None) -> None:
        self.ctx, self.spec, self.image, self.built = ctx, spec, image, built
        self.runs: list[HarborRun] = []
        self.deadline = Deadline(ctx.env.timeouts.probe_s)
        self.notes = list(spec.notes)

    def run(self, phase: Phase, label: str) -> HarborRun:
        with self.ctx.open_sandbox(harbor_sandbox(self.ctx.spec(), self.spec,
                                                  self.image)) as sandbox:
            run = run_once(sandbox, self.spec, HarborRun(phase, label),
                           self.ctx.env.timeouts.exec_s)
        self.runs.append(run)
        return run

    def check(self) -> Verdict:
        nop = self.run("nop", "nop")
        if nop.problem is not None:
            return self.verdict(Status.FAIL, nop.problem.reason, f"nop: {nop.problem.detail}")
        if not self.is_zero(nop):
            return self.nop_rewarded(nop)
        oracle = self.spec.solution_hash is not None
        phase: Phase = "oracle" if oracle else "nop"
        total = self.spec.reruns if oracle else self.spec.reruns - 1
        for i in range(total):
            if self.deadline.expired():
                self.notes.append(f"probe_s reached: {total - i} of {total} runs skipped")
                if oracle and i == 0:  # nothing shows solve.sh earns the reward: never a pass
                    return self.verdict(Status.FAIL, Reason.TIMEOUT, f"probe_s "
                                        f"({self.ctx.env.timeouts.probe_s:g}s) reached after "
                                        "the nop run: the oracle was not played")
                break
            run = self.run(phase, f"{phase} run {i + 1}/{total}")
            if run.problem is not None:
                earlier = [r for r in self.runs[:-1] if r.phase == phase]
                flaky = bool(earlier) and run.problem.reason not in SETUP
                return self.verdict(Status.FLAKY if flaky else Status.FAIL, run.problem.reason,
                                    f"{run.label}: {run.problem.detail}")
            if phase == "nop" and not self.is_zero(run):
                return self.nop_rewarded(run)
        return self.conclude(oracle)

    @staticmethod
    def is_zero(run: HarborRun) -> bool:
        assert run.reward is not None and run.reward.value is not None
        return abs(run.reward.value) <= _EPS

    @staticmethod
    def is_one(run: HarborRun) -> bool:
        assert run.reward is not None and run.reward.value is not None
        return abs(run.reward.value - 1.0) <= _EPS

    def nop_rewarded(self, run: HarborRun) -> Verdict:
        assert run.reward is not None
        return self.verdict(Status.FAIL, Reason.NOP_REWARDED,
                            f"{run.label}: reward {run.reward.value:g} with no solution "
                            f"({run.reward.source}): the verifier pays for a no-op")

    def conclude(self, oracle: bool) -> Verdict:
        runs = [r for r in self.runs if r.phase == "oracle"]
        ones = [r for r in runs if self.is_one(r)]
        if len(ones) == len(runs):
            return self.verdict(Status.PASS, Reason.OK, controls_agree(
                "negative control (nop)", len(self.runs) - len(runs), "reward 0", len(runs),
                "reward 1" if oracle else None, "no solution/solve.sh"))
        if ones:
            return self.verdict(Status.FLAKY, Reason.NONDETERMINISTIC, f"oracle: reward 1 in "
                                f"only {len(ones)} of {len(runs)} runs: random rewards")
        failed = [r for r in runs if r.solve_exit not in (0, None)]
        shown = sorted({f"{r.reward.value:g}" for r in runs if r.reward is not None})
        if failed:
            return self.verdict(Status.FAIL, Reason.ORACLE_FAILED, f"solve.sh exited "
                                f"{failed[0].solve_exit}; the reward stayed {', '.join(shown)}")
        return self.verdict(Status.FAIL, Reason.ORACLE_DOES_NOT_FIX, f"oracle: reward "
                            f"{', '.join(shown)} in every run, never 1")

    def verdict(self, status: Status, reason: Reason, summary: str) -> Verdict:
        details: dict[str, Any] = {
            "task": self.spec.task, "image": self.image, "network": self.spec.network,
            "built": None if self.built is None else self.built.built,
            "runs": [_summary(r) for r in self.runs],
            "container_start_s": round(sum(r.start_s for r in self.runs), 3),
            "reruns": self.spec.reruns, "oracle": self.spec.solution_hash is not None,
            # always the whole protocol (no light check for a Harbor task yet): its runs are
            # what the health model weighs
            DEPTH_KEY: {"mode": str(Depth.FULL), "why": "a Harbor task's protocol, in full",
                        "runs": len(self.runs),
                        "failed_runs": sum(self.went_wrong(r) for r in self.runs)}}
        if self.notes:
            details["notes"] = self.notes
        return Verdict(status, reason, f"{self.spec.task}: {summary}", details, self.evidence())

    def went_wrong(self, run: HarborRun) -> bool:
        """The run is invalid, or an oracle run did not earn reward 1."""
        return run.problem is not None or (run.phase == "oracle" and not self.is_one(run))

    def evidence(self) -> tuple[CommandEvidence, ...]:
        """The first run of each phase, then runs that went wrong, up to EVIDENCE_MAX."""
        chosen: list[HarborRun] = []
        for run in self.runs:
            first = all(r.phase != run.phase for r in chosen)
            if first or self.went_wrong(run):
                chosen.append(run)
        return tuple(e for r in chosen for e in r.evidence)[:EVIDENCE_MAX]


def _summary(run: HarborRun) -> dict[str, Any]:
    reward = run.reward
    return {"label": run.label, "phase": run.phase,
            "reward": None if reward is None else reward.value,
            "reward_source": None if reward is None else reward.source,
            "problem": str(run.problem.reason) if run.problem else None,
            "solve_exit": run.solve_exit, "verifier_exit": run.verifier_exit,
            "start_s": round(run.start_s, 3), "duration_s": round(run.duration_s, 3)}


def verify_harbor(ctx: ProbeContext, spec: HarborVerifierSpec) -> Verdict:
    """The tests probe's verdict on a Harbor task (see the module's docstring)."""
    if ctx.service(BuiltImage) is None:  # not prepared by a check cycle: prepare it here
        prepare_image(ctx)
        if ctx.blocked is not None:
            return ctx.blocked
    built = ctx.service(BuiltImage)
    image = spec.image if built is None else built.tag
    assert image is not None
    verdict = _Verification(ctx, spec, image, built).check()
    return with_harbor_controls(ctx, spec, image, verdict)  # adversarial controls, if given
