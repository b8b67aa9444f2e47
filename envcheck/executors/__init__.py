"""Executors: where the checks of a cycle run.

``local`` (the default) runs them in a thread pool against this host's Docker engine, as
:func:`envcheck.executors.cycle.run_cycle` always has. ``ray`` runs each check of an
environment as a Ray task on a worker node that declares the ``docker`` resource, against
that node's engine (:mod:`envcheck.executors.ray`, imported only when chosen;
``pip install envcheck[ray]``).

Whatever the executor, results come back to the caller (the CLI or the daemon), which hands
them to its sink: the caller stays the one writer of the store. The executor never writes
results itself, so a retried attempt can never be recorded twice.

::

    executor = open_executor(ExecutorConfig.parse("ray", ray_address="10.0.0.5:6379"),
                             shapes=store)
    try:
        results = executor.run_cycle(envs, kinds, run_id, sink, services)   # a CLI cycle
        results = executor.check(env, [kind], run_id, sink, services)       # one daemon job
    finally:
        executor.close()
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from envcheck.catalogue.models import Environment
from envcheck.core.errors import InfraError
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.executors.cycle import ResultSink, Services, check_environment, run_cycle
from envcheck.kinds import Verdict, load_probe
from envcheck.sandbox.base import SandboxRuntime

if TYPE_CHECKING:
    from envcheck.kinds.datasource.sampling import ShapeStore

__all__ = [
    "Executor",
    "ExecutorConfig",
    "ExecutorKind",
    "LocalExecutor",
    "RayOptions",
    "infra_results",
    "open_executor",
    "wait_for_executor",
]

log = logging.getLogger(__name__)


class ExecutorKind(StrEnum):
    LOCAL = "local"
    RAY = "ray"


@dataclass(frozen=True, slots=True)
class RayOptions:
    """How checks are placed on a Ray cluster.

    ``address``: ``host:port`` of the cluster's GCS (``ray start --head`` prints it); None
    reads ``RAY_ADDRESS``, else the cluster started on this host. Every worker node that may
    run checks declares ``docker_resource`` (``ray start --resources='{"docker": 4}'``): how
    many sandboxes its engine takes at once. Each task takes ``docker_per_task`` of it and
    ``num_cpus`` CPUs (0: the task's process only waits on the engine), so Ray alone bounds
    the concurrency per node.
    """

    address: str | None = None
    docker_resource: str = "docker"
    docker_per_task: float = 1.0
    num_cpus: float = 0.0
    # Attempts after the first when a worker or its node dies (Ray's task retries). Results
    # are returned, never written, by tasks: only the attempt that returns is recorded.
    max_retries: int = 2
    # A task no live node can take (its pinned node is gone) waits this long, then is
    # recorded as node_unavailable instead of waiting forever.
    unschedulable_grace_s: float = 60.0
    connect_timeout_s: float = 10.0
    # Variables of the caller passed to the tasks (never secrets: Ray keeps runtime_env in
    # its control store); the operator's container tag labels every sandbox on every node.
    forward_env: tuple[str, ...] = ("ENVCHECK_CONTAINER_TAG",)

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError("ray max_retries must be >= 0")
        if not 0 < self.docker_per_task <= 1000 or self.num_cpus < 0:
            raise ValueError("ray docker_per_task must be in (0, 1000] and num_cpus >= 0")
        if self.unschedulable_grace_s <= 0 or self.connect_timeout_s <= 0:
            raise ValueError("ray timeouts must be positive")
        if not self.docker_resource:
            raise ValueError("ray docker_resource must name a custom resource")


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    """``executor: local | ray`` with its options, validated once."""

    kind: ExecutorKind = ExecutorKind.LOCAL
    # local: threads, i.e. sandboxes at once on this host (Ray: the nodes' docker resource)
    concurrency: int = 2
    ray: RayOptions = field(default_factory=RayOptions)

    @classmethod
    def parse(cls, kind: str, *, concurrency: int = 2, ray_address: str | None = None,
              ray: RayOptions | None = None) -> ExecutorConfig:
        try:
            chosen = ExecutorKind(kind)
        except ValueError:
            raise ValueError(f"executor {kind!r} is not one of: "
                             f"{', '.join(k.value for k in ExecutorKind)}") from None
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        options = ray or RayOptions()
        if ray_address is not None:
            options = dataclasses.replace(options, address=ray_address)
        return cls(chosen, concurrency, options)


class Executor(Protocol):
    """Runs checks and returns their results; ``sink`` sees each result once, in the
    caller's process, as it arrives."""

    @property
    def name(self) -> str: ...

    def check(self, env: Environment, kinds: Sequence[ProbeKind], run_id: str,
              sink: ResultSink | None = None,
              services: Services | None = None) -> list[ProbeResult]:
        """One environment, blocking (a daemon worker's job)."""
        ...

    def run_cycle(self, envs: Sequence[Environment], kinds: Sequence[ProbeKind], run_id: str,
                  sink: ResultSink | None = None,
                  services: Services | None = None) -> list[ProbeResult]:
        """Every environment, as many at once as the executor allows; results in
        environment then kind order."""
        ...

    def capacity(self) -> int:
        """Checks that can run at once (local: the pool; ray: the cluster's docker slots)."""
        ...

    def ping(self) -> None:
        """Raise an :class:`~envcheck.core.errors.InfraError` when checks cannot run (readiness)."""

    def close(self) -> None: ...


class LocalExecutor:
    """This host's engine, ``concurrency`` environments at a time (threads)."""

    name = "local"

    def __init__(self, runtime: SandboxRuntime, concurrency: int = 2) -> None:
        self.runtime = runtime
        self._concurrency = max(concurrency, 1)
        self.reaped = 0  # leftover containers removed when connecting

    @classmethod
    def from_env(cls, concurrency: int = 2, timeout_s: float = 30.0) -> LocalExecutor:
        """Connect to the engine (``EngineUnreachable`` if down) and reap the leftovers of
        envcheck processes that died."""
        from envcheck.sandbox.docker import DockerRuntime

        runtime = DockerRuntime.from_env(timeout_s=timeout_s)
        try:
            reaped = runtime.reap()
        except BaseException:
            runtime.close()
            raise
        executor = cls(runtime, concurrency)
        executor.reaped = reaped
        return executor

    def check(self, env: Environment, kinds: Sequence[ProbeKind], run_id: str,
              sink: ResultSink | None = None,
              services: Services | None = None) -> list[ProbeResult]:
        return check_environment(env, kinds, self.runtime, run_id, sink, services)

    def run_cycle(self, envs: Sequence[Environment], kinds: Sequence[ProbeKind], run_id: str,
                  sink: ResultSink | None = None,
                  services: Services | None = None) -> list[ProbeResult]:
        return run_cycle(envs, kinds, self.runtime, run_id, sink, self._concurrency, services)

    def capacity(self) -> int:
        return self._concurrency

    def ping(self) -> None:
        self.runtime.ping()

    def tidy(self) -> int:
        """Remove the containers an engine outage left behind, if the engine answers again
        (cheap: no engine call unless a removal failed); how many."""
        tidy = getattr(self.runtime, "tidy", None)
        return int(tidy()) if tidy is not None else 0

    def close(self) -> None:
        """Close the runtime, which removes every container it started."""
        close = getattr(self.runtime, "close", None)
        if close is not None:
            close()


def open_executor(config: ExecutorConfig, *, shapes: ShapeStore | None = None) -> Executor:
    """The configured executor, connected. Raises ``EngineUnreachable`` (local) or
    ``ExecutorUnavailable`` (ray) when it has nowhere to run checks.

    ``shapes`` is where data-source fingerprints are read and written (the store): remote
    checks return what they observed and the executor writes it here, in the caller.
    """
    if config.kind is ExecutorKind.LOCAL:
        return LocalExecutor.from_env(config.concurrency)
    from envcheck.executors.ray import RayExecutor  # the only place Ray is ever imported

    return RayExecutor.connect(config.ray, shapes=shapes)


def wait_for_executor(config: ExecutorConfig, stop: threading.Event, *,
                      shapes: ShapeStore | None = None,
                      max_wait_s: float | None = None) -> Executor:
    """:func:`open_executor` for a daemon: the engine or the cluster may come up after us.
    Retries with backoff (1 s doubling to 30 s) until ``stop`` or ``max_wait_s``; every
    attempt has its own timeout."""
    delay, waited = 1.0, 0.0
    while True:
        try:
            return open_executor(config, shapes=shapes)
        except InfraError as exc:
            if stop.is_set() or (max_wait_s is not None and waited >= max_wait_s):
                raise
            log.warning("executor unavailable, retrying",
                        extra={"executor": str(config.kind), "error": str(exc),
                               "retry_in_s": delay})
            stop.wait(delay)
            waited += delay
            delay = min(delay * 2, 30.0)


def infra_results(env: Environment, kinds: Sequence[ProbeKind], reason: Reason,
                  summary: str, *, started_at: datetime | None = None,
                  duration_s: float = 0.0) -> list[ProbeResult]:
    """``error`` results for checks that produced nothing (never an environment's fault);
    attempted from ``started_at`` for ``duration_s`` (default: not attempted, now)."""
    verdict = Verdict(Status.ERROR, reason, summary)
    return [load_probe(kind).result(env, verdict, duration_s, None, started_at=started_at)
            for kind in kinds]
