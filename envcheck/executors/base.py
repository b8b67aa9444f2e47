"""What every executor is: the protocol, its configuration, and the results of checks that
never ran (an executor's failure is envcheck's, never an environment's)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from envcheck.catalogue.models import Environment
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.executors.cycle import ResultSink, Services
from envcheck.executors.kind import ExecutorKind
from envcheck.kinds import Verdict, load_probe
from envcheck.registry.fleet import RegistryImages

__all__ = ["Executor", "ExecutorConfig", "ExecutorKind", "PullsAhead", "RayOptions",
           "infra_results"]


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


@runtime_checkable
class PullsAhead(Protocol):
    """An executor whose checks run on other hosts pulls the images of the next due checks
    ahead there (Ray: on the node each check will run on), never into the caller's engine;
    how many images it sent ahead. The local executor has none: the registry stage's own
    ``prefetch`` pulls into the engine its checks run on."""

    def pull_ahead(self, registry: RegistryImages,
                   wanted: Sequence[tuple[Environment, str]]) -> int: ...


def infra_results(env: Environment, kinds: Sequence[ProbeKind], reason: Reason,
                  summary: str, *, started_at: datetime | None = None,
                  duration_s: float = 0.0) -> list[ProbeResult]:
    """``error`` results for checks that produced nothing (never an environment's fault);
    attempted from ``started_at`` for ``duration_s`` (default: not attempted, now)."""
    verdict = Verdict(Status.ERROR, reason, summary)
    return [load_probe(kind).result(env, verdict, duration_s, None, started_at=started_at)
            for kind in kinds]
