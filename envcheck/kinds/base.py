"""The probe contract: one small class per kind, ``check(ctx) -> Verdict``.

Timing, the image digest, the spec hash and exception capture live here once, so a kind
only says what it checks. envcheck's own failures become ``Status.ERROR``, never ``fail``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, ClassVar, TypeVar

from envcheck.catalogue.models import Environment
from envcheck.core.clock import SYSTEM_CLOCK, Clock
from envcheck.core.depth import Depth, DepthAdvice
from envcheck.core.errors import (
    ComposeFailed,
    ImageNotFound,
    InfraError,
    RegistryFailed,
    SandboxStartFailed,
    StoreUnavailable,
)
from envcheck.core.outages import StoreOutages
from envcheck.core.results import CommandEvidence, ProbeKind, ProbeResult, Reason, Status
from envcheck.kinds.reuse import ReuseAdvisor, with_depth
from envcheck.registry.fleet import RegistryImages
from envcheck.registry.images import LocalImage
from envcheck.registry.state import WatchUpdate
from envcheck.sandbox.base import Sandbox, SandboxRuntime, SandboxSpec
from envcheck.sandbox.compose_project import ComposedTask

__all__ = ["Probe", "ProbeContext", "Services", "Verdict"]

log = logging.getLogger(__name__)
# where a store outage is said when the composition root gave no StoreOutages of its own
_OUTAGES = StoreOutages()
# Cycle-wide collaborators by type, built by the composition root (see ProbeContext.service).
Services = Mapping[type[Any], object]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Verdict:
    status: Status
    reason: Reason
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    evidence: tuple[CommandEvidence, ...] = ()


class ProbeContext:
    """What a probe may use for one environment in one check cycle.

    Read-only probes share one container (``sandbox()``); probes that change state ask for
    ``fresh_sandbox()`` per phase. Every container is removed when the cycle's stack closes.
    ``clock`` times the probes: their wall-clock start and their monotonic duration.
    """

    def __init__(self, env: Environment, run_id: str, runtime: SandboxRuntime,
                 image_digest: str | None, stack: ExitStack,
                 services: Mapping[type[Any], object] | None = None, *,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.env = env
        self.clock = clock
        self.run_id = run_id
        self.runtime = runtime
        self.image_digest = image_digest
        self._stack = stack
        self._shared: Sandbox | None = None
        self._services = dict(services or {})
        # Set before any probe runs when no probe can: the image does not build, or the
        # environment is of a shape envcheck does not run yet. Every applicable kind says so.
        self.blocked: Verdict | None = None
        # The reuse advice of the probe running now (a reusable kind with an advisor only).
        self.advice: DepthAdvice | None = None
        # A watched image (``pull: watch``): what its registry said of its tag this cycle,
        # and the image pulled by digest, once a probe asked for a container.
        self.watch: WatchUpdate | None = None
        self._local: LocalImage | None = None
        self.pull_seconds = 0.0  # spent pulling, kept apart from the probes' own durations

    def service(self, cls: type[T]) -> T | None:
        """A collaborator the composition root injected for the cycle, by type (e.g. the
        data-source checker with its store, HTTP sessions and cycle cache); None if none."""
        found = self._services.get(cls)
        return found if isinstance(found, cls) else None

    def provide(self, obj: object) -> None:
        """Make ``obj`` a collaborator of this context's probes, found by its type."""
        self._services[type(obj)] = obj

    def spec(self) -> SandboxSpec:
        return SandboxSpec(env_id=self.env.id, image=self.image_to_run(), run_id=self.run_id,
                           limits=self.env.limits, start_timeout_s=self.env.timeouts.start_s)

    def image_to_run(self) -> str:
        """The image a sandbox runs: the catalogue's, or for an image envcheck pulls
        (``pull: watch``) the digest this cycle's identity names, pulled the first time a
        probe needs a container (a probe that reuses its evidence pulls nothing)."""
        if self.env.pull != "watch":
            return self.env.image
        if self._local is None:
            registry = self.service(RegistryImages)
            if registry is None or self.image_digest is None:
                raise RegistryFailed(f"{self.env.image}: no registry stage in this process, "
                                     "nothing pulls it", reason=Reason.REGISTRY_UNREACHABLE)
            self._local = registry.local(self.env, self.image_digest)
            self.pull_seconds += self._local.pull_seconds
        return self._local.image_id

    def image_record(self) -> dict[str, Any] | None:
        """What a result of a pulled image says of it: the local image id beside the
        registry's digest, and the pull."""
        if self.env.pull != "watch":
            return None
        record: dict[str, Any] = {"reference": self.env.image, "digest": self.image_digest}
        if self._local is not None:
            record.update(local_id=self._local.image_id, pulled=self._local.pulled,
                          pull_s=round(self._local.pull_seconds, 3),
                          pull_bytes=self._local.downloaded)
        return record

    def sandbox(self) -> Sandbox:
        if self._shared is None:
            self._shared = self._stack.enter_context(self.open_sandbox(self.spec()))
        return self._shared

    @contextmanager
    def fresh_sandbox(self) -> Iterator[Sandbox]:
        with self.open_sandbox(self.spec()) as sandbox:
            yield sandbox

    def open_sandbox(self, spec: SandboxSpec) -> AbstractContextManager[Sandbox]:
        """A sandbox for ``spec``, removed on exit: one container, or for a compose task the
        agent's container of the task's services brought up for it (every probe, control
        and run of such a task is in its agent's container, as Harbor's agents are)."""
        composed = self.service(ComposedTask)
        if composed is None:
            return self.runtime.sandbox(spec)
        return composed.sandbox(self.runtime, spec)


def compose_failed(exc: ComposeFailed, env_id: str) -> Verdict:
    """A compose task's defect as its verdict: the service named, its log's tail as evidence."""
    tail = exc.log_tail[-4096:]
    evidence = CommandEvidence(command=exc.command or "docker-compose", exit_code=None,
                               duration_s=round(exc.duration_s, 4), output_tail=tail,
                               output_bytes=len(tail.encode()))
    details = {"service": exc.service} if exc.service else {}
    return Verdict(Status.FAIL, exc.reason, f"{env_id}: {exc}", details, (evidence,))


class Probe(ABC):
    kind: ClassVar[ProbeKind]
    # Kinds that work through the sandbox engine confirm it is alive before blaming the
    # environment: a command cut short by a dying engine looks like a broken shell.
    uses_engine: ClassVar[bool] = True
    # What it checks is a property of the image: while the image digest and the spec hold,
    # recent evidence stands (health.reuse) and a scheduled probe is an identity check.
    reusable: ClassVar[bool] = False

    def applies(self, env: Environment) -> bool:
        """False when the environment declares nothing for this kind (result: skip); a kind
        from outside envcheck's own applies to every environment unless it says otherwise."""
        own = self.kind in ProbeKind.__members__.values()
        return not own or self.kind in env.declared_kinds()

    @abstractmethod
    def check(self, ctx: ProbeContext) -> Verdict: ...

    def run(self, ctx: ProbeContext) -> ProbeResult:
        # The start is taken before the check and carried into the result: a result is made
        # when the probe ends, so any clock read there would be its end, not its start.
        started_at, started = ctx.clock.now(), ctx.clock.monotonic()
        pulled_before = ctx.pull_seconds
        outages, part = ctx.service(StoreOutages) or _OUTAGES, f"{self.kind} probes"
        try:
            if not self.applies(ctx.env):
                verdict = Verdict(Status.SKIP, Reason.NOT_APPLICABLE,
                                  f"{ctx.env.id} declares no {self.kind} checks")
            elif ctx.blocked is not None:
                verdict = ctx.blocked
            else:
                verdict = self._checked(ctx)
        except SandboxStartFailed as exc:
            verdict = Verdict(Status.FAIL, Reason.CONTAINER_START_FAILED,
                              f"container did not start: {exc}")
        except ComposeFailed as exc:
            verdict = compose_failed(exc, ctx.env.id)
        except RegistryFailed as exc:
            verdict = Verdict(Status.ERROR, exc.reason, str(exc),
                              {"registry": exc.details or {"registry": exc.registry}})
        except ImageNotFound as exc:  # on one pull: only the watch's second look confirms it
            verdict = Verdict(Status.ERROR, Reason.IMAGE_NOT_FOUND,
                              f"{exc} (one answer: not yet confirmed)", {"registry": exc.details})
        except InfraError as exc:
            verdict = Verdict(Status.ERROR, exc.reason, str(exc))
        except MemoryError:
            verdict = Verdict(Status.ERROR, Reason.CHECKER_OOM, "envcheck ran out of memory")
        except StoreUnavailable as exc:  # what it reads of the store (a source's shape)
            outages.failed(part, exc, then="their results are errors")
            verdict = Verdict(Status.ERROR, Reason.CHECKER_CRASHED,
                              f"envcheck's store is unavailable: {exc.reason}")
        except Exception as exc:  # a bug in envcheck must not read as a broken environment
            log.exception("probe %s crashed on %s", self.kind, ctx.env.id)
            verdict = Verdict(Status.ERROR, Reason.CHECKER_CRASHED,
                              f"envcheck failed: {type(exc).__name__}: {exc}")
        else:
            outages.ran(part)
        if self.uses_engine and verdict.status in (Status.FAIL, Status.FLAKY):
            verdict = self._confirm_engine(ctx, verdict)
        image = ctx.image_record()
        if image is not None:
            verdict = replace(verdict, details={**verdict.details, "image": image})
        # a slow registry is not a slow environment: the pull's seconds are the record's
        pulling = ctx.pull_seconds - pulled_before
        return self.result(ctx.env, verdict, ctx.clock.monotonic() - started - pulling,
                           ctx.image_digest, started_at=started_at)

    def _checked(self, ctx: ProbeContext) -> Verdict:
        """``check``, unless the evidence for the identity found stands (no container)."""
        advisor = ctx.service(ReuseAdvisor) if self.reusable else None
        advice = advisor.advice(ctx.env, self.kind, ctx.image_digest) if advisor else None
        if advice is None:
            return self.check(ctx)
        if advice.depth is Depth.REUSED:
            verdict = Verdict(Status.PASS, Reason.OK, f"evidence reused: {advice.why}")
        else:
            ctx.advice = advice
            try:
                verdict = self.check(ctx)
            finally:
                ctx.advice = None
        failing = verdict.status in (Status.FAIL, Status.FLAKY)
        return replace(verdict, details=with_depth(verdict.details, advice, failing))

    @staticmethod
    def _confirm_engine(ctx: ProbeContext, verdict: Verdict) -> Verdict:
        try:
            ctx.runtime.ping()
        except InfraError as exc:
            return Verdict(Status.ERROR, exc.reason,
                           f"the engine failed during the probe ({exc}); would have read: "
                           f"{verdict.reason}", verdict.details, verdict.evidence)
        return verdict

    def result(self, env: Environment, verdict: Verdict, duration_s: float,
               image_digest: str | None, *, started_at: datetime | None = None) -> ProbeResult:
        """The result of a probe that started at ``started_at`` and took ``duration_s``.
        Without ``started_at`` the probe is taken to end now (it started ``duration_s`` ago)."""
        if started_at is None:
            started_at = SYSTEM_CLOCK.now() - timedelta(seconds=duration_s)
        return ProbeResult(
            env_id=env.id,
            kind=self.kind,
            status=verdict.status,
            reason=verdict.reason,
            summary=verdict.summary,
            duration_s=duration_s,
            image_digest=image_digest,
            spec_hash=env.spec_hash(self.kind),
            started_at=started_at,
            evidence=verdict.evidence,
            details=verdict.details,
        )
