"""What a Ray task carries and does on its node; no Ray import here (see ray_executor).

The node builds its own engine client from its environment (``DOCKER_HOST``, ...), once per
worker process, and reaps what dead workers left on that engine; runs the same
:func:`~envcheck.executors.cycle.check_environment` as the local executor, with no sink; and returns
the results with the data-source shapes it observed. It writes nothing: the caller does. Earlier
adversarial evidence and the depth advice come with the task (the node has no store to ask).

An image envcheck pulls (``pull: watch``) comes with the caller's look at its tag and the
registry stage's settings (:class:`~envcheck.registry.node.NodeImagesSpec`): the node pulls the
digest the look saw into its own engine, under its own budget, recorded in its own ledger
(:mod:`envcheck.registry.node`). The outcome says which node ran it and whether its engine
holds the image afterwards, for the caller's placement, and what the node's registry stage did
(its pulls, evictions and cache), which the caller folds into its metrics;
:func:`census_on_node` answers which of a few images a node's engine holds;
:func:`prefetch_on_node` pulls images ahead of the checks that will run them there.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import docker.errors

from envcheck.catalogue.datasources import DataSource
from envcheck.catalogue.models import Environment
from envcheck.core.depth import DepthAdvice
from envcheck.core.errors import ConfigError, EngineUnreachable, InfraError
from envcheck.core.results import ProbeKind, ProbeResult
from envcheck.executors.cycle import check_environment, unchecked
from envcheck.kinds.adversarial.ledger import ControlsLedger, RecordedEvidence
from envcheck.kinds.datasource.probe import DataSourceChecker
from envcheck.kinds.reuse import ReuseAdvisor
from envcheck.kinds.testvalidity.depth import DepthAdvisor
from envcheck.registry.fleet import RegistryImages
from envcheck.registry.node import HandedLooks, NodeImagesSpec, NodeStage, held_references
from envcheck.registry.pull import PullTarget
from envcheck.registry.state import WatchUpdate
from envcheck.registry.stats import StatsSnapshot
from envcheck.sandbox.docker import DockerRuntime

__all__ = ["AheadOutcome", "Census", "CheckTask", "Observation", "RecordingShapes", "Shape",
           "TaskOutcome", "census_on_node", "prefetch_on_node", "run_on_node"]

log = logging.getLogger(__name__)


# --- what travels ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Shape:
    fingerprint: str
    shape: Any


@dataclass(frozen=True, slots=True)
class Observation:
    """A data-source shape seen on a node, for the caller to write (ShapeStore.observe_shape)."""

    source_id: str
    fingerprint: str
    shape: Any
    at: datetime
    count: int
    auto_accept: bool


@dataclass(frozen=True, slots=True)
class CheckTask:
    env: Environment
    kinds: tuple[ProbeKind, ...]
    run_id: str
    # The environment's data sources, or None when the caller has no data-source checker
    # (then a datasource probe is an error on the node too, as it would be locally).
    sources: tuple[DataSource, ...] | None = None
    accepted: Mapping[str, Shape | None] = field(default_factory=dict)
    # The environment's newest adversarial controls under its spec (ControlsLedger.newest):
    # the node reuses them if its image digest matches, as a local probe would.
    prior: ProbeResult | None = None
    # The depth advice for its tests probe (feed.depth.StoreDepth, looked up by the caller):
    # a light check holds only if the node finds the identity the advice is for.
    depth: DepthAdvice | None = None
    # The reuse advice of its terminal and dependencies probes (feed.reuse.StoreReuse, looked
    # up by the caller): evidence stands only if the node finds the identity it is for.
    reuse: Mapping[ProbeKind, DepthAdvice] = field(default_factory=dict)
    # An image envcheck pulls: the registry stage's settings for the node, and the caller's
    # look at the tag (the node pulls the digest it saw).
    images: NodeImagesSpec | None = None
    watch: WatchUpdate | None = None
    # What names the image on any engine (registry.node.image_key), for the outcome's report.
    image_key: str | None = None


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    results: tuple[ProbeResult, ...]
    observations: tuple[Observation, ...] = ()
    node_id: str = ""
    held: tuple[str, ...] = ()  # the task's image, when the node's engine holds it after
    host: str = ""
    # what the node's registry stage did since its process last said (None: no stage)
    registry: StatsSnapshot | None = None


@dataclass(frozen=True, slots=True)
class AheadOutcome:
    """What a pull ahead on a node left: which of the images asked its engine holds after,
    and what its registry stage did."""

    node_id: str
    host: str
    held: tuple[str, ...]
    registry: StatsSnapshot | None


@dataclass(frozen=True, slots=True)
class Census:
    """Which of the images asked about a node's engine holds."""

    node_id: str
    held: tuple[str, ...]


# --- on the node ----------------------------------------------------------------------------


class RecordingShapes:
    """The node's ShapeStore: accepted shapes from the caller's snapshot, observations kept
    to be returned (the node never writes the store)."""

    def __init__(self, accepted: Mapping[str, Shape | None]) -> None:
        self._accepted = dict(accepted)
        self._lock = threading.Lock()
        self.observed: list[Observation] = []

    def accepted_shape(self, source_id: str) -> Shape | None:
        with self._lock:
            return self._accepted.get(source_id)

    def observe_shape(self, source_id: str, fingerprint: str, shape: Any, at: datetime, *,
                      count: int = 1, auto_accept: bool = False) -> Shape:
        seen = Shape(fingerprint, shape)
        with self._lock:
            self.observed.append(Observation(source_id, fingerprint, shape, at, count,
                                             auto_accept))
            if auto_accept and self._accepted.get(source_id) is None:
                self._accepted[source_id] = seen
        return seen


class _NodeRuntime:
    """This worker process's engine client, built once from the node's environment."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runtime: DockerRuntime | None = None

    def get(self) -> DockerRuntime:
        with self._lock:
            if self._runtime is None:
                runtime = DockerRuntime.from_env()
                try:
                    runtime.reap()  # containers of workers that died here, e.g. with a node
                except InfraError as exc:
                    log.warning("reaping leftovers failed: %s", exc)
                self._runtime = runtime
            return self._runtime


_node_runtime = _NodeRuntime()
_node_stage = NodeStage()


def run_on_node(task: CheckTask) -> TaskOutcome:
    """The body of a Ray task (a plain function: runs without Ray too)."""
    where = {"node_id": _node_id(), "host": socket.gethostname()}
    try:
        runtime = _node_runtime.get()
    except InfraError as exc:
        results = unchecked([task.env], task.kinds, exc)
        return TaskOutcome(tuple(_placed(r, where) for r in results))
    shapes = RecordingShapes(task.accepted)
    services: dict[type[Any], object] = {
        ControlsLedger: ControlsLedger(RecordedEvidence([task.prior] if task.prior else [])),
        DepthAdvisor: DepthAdvisor(lambda env: task.depth),
        ReuseAdvisor: ReuseAdvisor(lambda env, kind: task.reuse.get(kind))}
    if task.sources is not None:
        services[DataSourceChecker] = DataSourceChecker(task.sources, shapes)
    if task.images is not None:
        try:
            stage = _node_stage.get(task.images)
        except (InfraError, ConfigError, docker.errors.DockerException) as exc:
            # the node's, never the environment's: its engine, or its data directory
            failed = exc if isinstance(exc, InfraError) else InfraError(
                f"the node's image cache could not open: {exc}")
            if isinstance(exc, docker.errors.DockerException):
                failed = EngineUnreachable(f"the node's image cache could not open: {exc}")
            results = unchecked([task.env], task.kinds, failed)
            return TaskOutcome(tuple(_placed(r, where) for r in results),
                               node_id=where["node_id"])
        looks = {task.env.id: task.watch} if task.watch is not None else {}
        services[RegistryImages] = HandedLooks(stage, looks)
    results = check_environment(task.env, task.kinds, runtime, task.run_id, None, services)
    return TaskOutcome(tuple(_placed(r, where) for r in results), tuple(shapes.observed),
                       where["node_id"], _held([task.image_key] if task.image_key else []),
                       where["host"], _node_stage.report() if task.images is not None else None)


def prefetch_on_node(spec: NodeImagesSpec, wanted: tuple[tuple[str, str, str], ...]
                     ) -> AheadOutcome:
    """The body of a pull ahead (a plain function: runs without Ray too): the images of
    ``wanted`` ((repository, digest, image key), soonest due first) pulled into this node's
    engine by its registry stage's prefetch, within its bounds, waited for to their deadline."""
    where = {"node_id": _node_id(), "host": socket.gethostname()}
    stage = _node_stage.get(spec)
    futures = stage.images.prefetch([(r, d) for r, d, _ in wanted]) if stage.images else []
    for future in futures:
        try:
            future.result(timeout=spec.pull_deadline_s)
        except Exception as exc:  # the probe pulls what a prefetch could not, and says why
            log.info("a pull ahead did not end: %s", exc)
    if stage.images is not None:  # the caller counts them now; the ledger holds them
        stage.images.handed_off(PullTarget(r, d) for r, d, _ in wanted)
    return AheadOutcome(where["node_id"], where["host"], _held([key for _, _, key in wanted]),
                        _node_stage.report())


def census_on_node(references: tuple[str, ...]) -> Census:
    """The body of a placement look (a plain function: runs without Ray too)."""
    return Census(_node_id(), _held(references))


def _held(references: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    if not references:
        return ()
    try:
        return tuple(held_references(_node_stage.api(), references))
    except docker.errors.DockerException as exc:  # placement's hint only: none held
        log.warning("listing the node's images failed: %s", exc)
        return ()


def _node_id() -> str:
    # Only inside a Ray worker: elsewhere asking for the runtime context would start Ray.
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return ""
    return str(ray.get_runtime_context().get_node_id())


def _placed(result: ProbeResult, where: dict[str, str]) -> ProbeResult:
    return dataclasses.replace(result, details={**result.details, "ray": where})
