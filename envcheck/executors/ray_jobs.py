"""What a check of one environment becomes on Ray: its tasks and the resources each asks for.

One task per environment, asking for ``docker_per_task`` of the nodes' docker resource; or two
when its data sources pin the ``datasource`` probe to nodes declaring a resource of that name
(``node: NAME``): that probe goes there, asking for a sliver of each pinned resource (it
selects nodes, the docker resource bounds the concurrency), and the other kinds need not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from envcheck.catalogue.datasources import DataSource
from envcheck.catalogue.models import Environment
from envcheck.core.clock import SYSTEM_CLOCK
from envcheck.core.depth import DepthAdvice
from envcheck.core.errors import InfraError
from envcheck.core.results import ProbeKind, ProbeResult
from envcheck.executors.base import RayOptions
from envcheck.executors.ray_task import CheckTask, Shape
from envcheck.kinds.datasource.probe import DataSourceChecker

__all__ = ["PIN_AMOUNT", "Job", "jobs_of"]

# A pinned node resource is asked for in a sliver: it selects nodes, the docker resource
# bounds the concurrency.
PIN_AMOUNT = 0.001


@dataclass(slots=True)
class Job:
    task: CheckTask
    resources: dict[str, float]
    unschedulable_since: float | None = None
    # When it was submitted (wall clock, monotonic): a task that dies or is never placed
    # is recorded as an attempt from then, not as one that started when its failure came.
    submitted_at: datetime | None = None
    submitted: float = 0.0

    def waited_s(self) -> float:
        if self.submitted_at is None:
            return 0.0
        return max(SYSTEM_CLOCK.monotonic() - self.submitted, 0.0)


def jobs_of(env: Environment, kinds: Sequence[ProbeKind], run_id: str, options: RayOptions,
            checker: DataSourceChecker | None, accepted: dict[str, Shape | None],
            accepted_shape: Callable[[str], Shape | None],
            prior: ProbeResult | None = None, depth: DepthAdvice | None = None,
            reuse: Mapping[ProbeKind, DepthAdvice] | None = None) -> list[Job]:
    """The tasks of ``env`` (see the module's doc); ``accepted``: the data sources' accepted
    shapes looked up so far this cycle, filled from ``accepted_shape``; ``prior``: the earlier
    adversarial evidence the tests probe may reuse; ``depth``: the depth advice for it;
    ``reuse``: the reuse advice of the read-only kinds."""
    reuse = reuse or {}
    base = {options.docker_resource: options.docker_per_task}
    sources: tuple[DataSource, ...] | None = None
    if ProbeKind.DATASOURCE in kinds and checker is not None:
        sources = tuple(_sources(env, checker))
        for source in sources:
            if source.id not in accepted:
                accepted[source.id] = accepted_shape(source.id)
    snapshot = {s.id: accepted.get(s.id) for s in sources or ()}
    pins = {s.node for s in sources or () if s.node is not None}
    if not pins:
        return [Job(CheckTask(env, tuple(kinds), run_id, sources, snapshot, prior, depth,
                              reuse), base)]
    others = tuple(k for k in kinds if k is not ProbeKind.DATASOURCE)
    jobs = [Job(CheckTask(env, others, run_id, prior=prior, depth=depth, reuse=reuse), base)
            ] if others else []
    pinned = {**base, **dict.fromkeys(sorted(pins), PIN_AMOUNT)}
    jobs.append(Job(CheckTask(env, (ProbeKind.DATASOURCE,), run_id, sources, snapshot),
                    pinned))
    return jobs


def _sources(env: Environment, checker: DataSourceChecker) -> list[DataSource]:
    found: list[DataSource] = []
    for source_id in env.data_sources:
        # unknown here: the node's checker says so in the result, as locally
        with contextlib.suppress(InfraError):
            found.append(checker.source(source_id))
    return found
