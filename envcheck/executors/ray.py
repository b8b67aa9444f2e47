"""The Ray executor: each check of an environment is a Ray task on a node with a Docker engine.

Imported only when ``executor: ray`` is chosen (``pip install envcheck[ray]``).

Placement is Ray's: every task asks for ``docker_per_task`` of the custom ``docker``
resource (and ``num_cpus``), each node declares how many sandboxes its engine takes, so Ray
bounds the concurrency per node. A data source with ``node: NAME`` pins the ``datasource``
checks that use it to nodes declaring the resource ``NAME``. A check whose image a node's
engine holds asks Ray, softly, for that node (:mod:`envcheck.executors.ray_placement`); an
image envcheck pulls carries the watch's look, and the node that runs it pulls it, under its
own budget (:mod:`envcheck.registry.node`).

On the node the task (:func:`envcheck.executors.ray_task.run_on_node`) builds its own engine
client from the node's environment and runs the same check as the local executor. Results
(and the data-source shapes it observed) are *returned*; the caller writes them. So:

- a node that dies mid-task loses nothing: Ray retries the task elsewhere (``max_retries``);
  the dead attempt returned nothing, so it is recorded nowhere, and its containers, labelled
  with their owner process, are removed by the next envcheck reaper on that host;
- retries exhausted: the check is recorded as ``error``/``worker_lost``, never ``fail``;
- a task no live node can take (its pinned node is gone) is ``error``/``node_unavailable``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias, TypeVar

import ray
import ray.exceptions

from envcheck.catalogue.models import Environment
from envcheck.core.clock import SYSTEM_CLOCK
from envcheck.core.depth import DepthAdvice
from envcheck.core.errors import ExecutorUnavailable
from envcheck.core.outages import StoreOutages
from envcheck.core.results import ProbeKind, ProbeResult, Reason
from envcheck.executors.base import RayOptions, infra_results
from envcheck.executors.cycle import ResultSink, Services
from envcheck.executors.ray_ahead import NodePullsAhead
from envcheck.executors.ray_jobs import Job, jobs_of
from envcheck.executors.ray_placement import (
    Holdings,
    LiveNodes,
    affinity,
    carried_image,
    checking_nodes,
    feasible,
)
from envcheck.executors.ray_task import (
    Observation,
    Shape,
    TaskOutcome,
    census_on_node,
    prefetch_on_node,
    run_on_node,
)
from envcheck.kinds.adversarial.ledger import ControlsLedger
from envcheck.kinds.datasource.probe import DataSourceChecker
from envcheck.kinds.datasource.sampling import ShapeStore
from envcheck.kinds.datasource.shapewrites import ThrottledShapes
from envcheck.kinds.reuse import ReuseAdvisor
from envcheck.kinds.testvalidity.depth import DepthAdvisor
from envcheck.registry.fleet import RegistryImages
from envcheck.registry.node import node_spec

__all__ = ["RayExecutor"]

log = logging.getLogger(__name__)

_POLL_S = 1.0
_BATCH = 256  # environments looked up and placed before their checks are submitted
_NODES_TTL_S = 5.0
# what the store's outages stop here, in the caller (said once per outage)
_SHAPES_READ = "reading accepted shapes"
_SHAPES_WRITE = "keeping observed shapes"
_KIND_ORDER = {kind: i for i, kind in enumerate(ProbeKind)}


_T = TypeVar("_T")
Ref: TypeAlias = ray.ObjectRef["TaskOutcome"]


def _reason(exc: BaseException) -> Reason:
    if isinstance(exc, ray.exceptions.TaskCancelledError):
        return Reason.INTERRUPTED
    if isinstance(exc, ray.exceptions.OutOfMemoryError):
        return Reason.CHECKER_OOM
    if isinstance(exc, ray.exceptions.TaskUnschedulableError | ray.exceptions.RuntimeEnvSetupError):
        return Reason.NODE_UNAVAILABLE
    if isinstance(exc, ray.exceptions.RayTaskError):
        return Reason.CHECKER_CRASHED  # envcheck's own code raised on the node
    return Reason.WORKER_LOST  # the worker, its node or its result died with every retry


def _reuse(advisor: ReuseAdvisor | None, env: Environment, kinds: Sequence[ProbeKind]
           ) -> dict[ProbeKind, DepthAdvice]:
    """The reuse advice of ``kinds``, looked up here: a node has no store to ask."""
    if advisor is None:
        return {}
    found = {kind: advisor.lookup(env, kind) for kind in kinds}
    return {kind: advice for kind, advice in found.items() if advice is not None}


def _service(services: Services | None, cls: type[_T]) -> _T | None:
    found = services.get(cls) if services is not None else None
    return found if isinstance(found, cls) else None


def _preflight(address: str, timeout_s: float) -> None:
    """ray.init waits on an unreachable address for minutes: try it ourselves first."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ExecutorUnavailable(f"Ray cluster unreachable at {address}: {exc}") from exc


class RayExecutor:
    name = "ray"

    def __init__(self, options: RayOptions, *, shapes: ShapeStore | None = None,
                 owns_ray: bool = False, outages: StoreOutages | None = None) -> None:
        self._options = options
        self._owns = owns_ray
        self._outages = outages or StoreOutages()  # the store not answering, said once
        # The caller's store, written here in the caller: nodes only return observations.
        self._shapes = ThrottledShapes(shapes, SYSTEM_CLOCK) if shapes is not None else None
        self._store = shapes
        self._remote = ray.remote(run_on_node)
        self._holdings = Holdings(ray.remote(census_on_node))
        self._live_nodes = LiveNodes(_NODES_TTL_S)
        # the daemon's pulls ahead, into the engines of the nodes the checks will run on
        self.pulls_ahead = NodePullsAhead(ray.remote(prefetch_on_node), self._holdings,
                                          self._live_nodes, options)

    @classmethod
    def connect(cls, options: RayOptions, *, shapes: ShapeStore | None = None,
                outages: StoreOutages | None = None) -> RayExecutor:
        """Join the running cluster (or use the Ray this process already joined); never
        start one: a cluster is the operator's (``ray start``)."""
        if ray.is_initialized():
            return cls(options, shapes=shapes, outages=outages)
        address = options.address or os.environ.get("RAY_ADDRESS") or "auto"
        if address != "auto":
            _preflight(address, options.connect_timeout_s)
        try:
            ray.init(address=address, namespace="envcheck", log_to_driver=False,
                     logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, TimeoutError, ValueError) as exc:
            raise ExecutorUnavailable(f"cannot join the Ray cluster at {address}: {exc}"
                                      ) from exc
        executor = cls(options, shapes=shapes, owns_ray=True, outages=outages)
        if executor.capacity() == 0:
            executor.close()
            raise ExecutorUnavailable(f"no live Ray node declares the "
                                      f"{options.docker_resource!r} resource")
        return executor

    # --- the Executor protocol --------------------------------------------------------------

    def check(self, env: Environment, kinds: Sequence[ProbeKind], run_id: str,
              sink: ResultSink | None = None,
              services: Services | None = None) -> list[ProbeResult]:
        return self.run_cycle([env], kinds, run_id, sink, services)

    def run_cycle(self, envs: Sequence[Environment], kinds: Sequence[ProbeKind], run_id: str,
                  sink: ResultSink | None = None,
                  services: Services | None = None) -> list[ProbeResult]:
        results: list[ProbeResult] = []

        def emit(batch: Sequence[ProbeResult]) -> None:
            for result in sorted(batch, key=lambda r: _KIND_ORDER[r.kind]):
                results.append(result)
                if sink is not None:
                    sink(result)

        checker = _service(services, DataSourceChecker)
        ledger = _service(services, ControlsLedger)
        advisor = _service(services, DepthAdvisor)
        reuser = _service(services, ReuseAdvisor)
        registry = _service(services, RegistryImages)
        spec = node_spec(registry) if registry is not None else None
        tests = ProbeKind.TESTS in kinds
        pending: dict[Ref, Job] = {}
        nodes = self._live_nodes()
        accepted: dict[str, Shape | None] = {}
        try:
            for start in range(0, len(envs), _BATCH):
                jobs: list[Job] = []
                for env in envs[start:start + _BATCH]:
                    prior = ledger.newest(env) if ledger is not None and tests else None
                    depth = advisor.advice(env) if advisor is not None and tests else None
                    reuse = _reuse(reuser, env, kinds)
                    made = jobs_of(env, kinds, run_id, self._options, checker, accepted,
                                   self._accepted, prior, depth, reuse)
                    carried = carried_image(env, kinds, registry, spec)
                    for job in made:
                        job.task = dataclasses.replace(job.task, **carried)
                    jobs.extend(made)
                self._holdings.ask([job.task.image_key for job in jobs],
                                   checking_nodes(nodes, self._options.docker_resource))
                for job in jobs:
                    if not feasible(job.resources, nodes):
                        emit(self._unplaceable(job))
                        continue
                    job.submitted_at = SYSTEM_CLOCK.now()
                    job.submitted = SYSTEM_CLOCK.monotonic()
                    pending[self._submit(job, nodes)] = job
            self._collect(pending, emit, registry)
        except BaseException:
            self._abandon(pending)
            raise
        order = {env.id: i for i, env in enumerate(envs)}
        results.sort(key=lambda r: (order[r.env_id], _KIND_ORDER[r.kind]))
        return results

    def capacity(self) -> int:
        slots = sum(n.get("Resources", {}).get(self._options.docker_resource, 0.0)
                    for n in self._live_nodes(refresh=True) if n.get("Alive"))
        return int(slots / self._options.docker_per_task)

    def ping(self) -> None:
        if not ray.is_initialized():
            raise ExecutorUnavailable("not connected to a Ray cluster")
        if self.capacity() == 0:
            raise ExecutorUnavailable(f"no live Ray node declares the "
                                      f"{self._options.docker_resource!r} resource")

    def pull_ahead(self, registry: RegistryImages,
                   wanted: Sequence[tuple[Environment, str]]) -> int:
        """The images of the next due checks pulled ahead on the nodes they will run on
        (``executors.ray_ahead``), never into this process's engine."""
        return self.pulls_ahead(registry, wanted)

    def close(self) -> None:
        self.pulls_ahead.close()
        if self._owns and ray.is_initialized():
            ray.shutdown()
        self._owns = False

    # --- submitting ---------------------------------------------------------------------

    def _accepted(self, source_id: str) -> Shape | None:
        if self._store is None:
            return None
        try:
            record = self._store.accepted_shape(source_id)
        except Exception as exc:  # the store is the caller's business; the probe reports drift
            if not self._outages.failed(_SHAPES_READ, exc, then="sources sampled without "
                                        "their accepted shape"):
                log.exception("reading the accepted shape of %s failed", source_id)
            return None
        self._outages.ran(_SHAPES_READ)
        return Shape(record.fingerprint, record.shape) if record is not None else None

    def _submit(self, job: Job, nodes: Sequence[Mapping[str, Any]]) -> Ref:
        options = self._options
        env_vars = {name: os.environ[name] for name in options.forward_env
                    if os.environ.get(name)}
        extra: dict[str, Any] = {"runtime_env": {"env_vars": env_vars}} if env_vars else {}
        near = affinity(job.task.env.id, self._holdings.holders(job.task.image_key),
                        job.resources, nodes)
        if near is not None:  # a node holds the image: there first (soft: else anywhere)
            extra["scheduling_strategy"] = near
        return self._remote.options(
            num_cpus=options.num_cpus, resources=job.resources,
            max_retries=options.max_retries, retry_exceptions=False,
            name=f"envcheck:{job.task.env.id}", **extra,
        ).remote(job.task)

    # --- collecting ---------------------------------------------------------------------

    def _collect(self, pending: dict[Ref, Job], emit: Callable[[Sequence[ProbeResult]], None],
                 registry: RegistryImages | None) -> None:
        watched = time.monotonic()
        # not a retry: collects results as they finish, looking for lost nodes in between
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL_S)
            if ready and len(pending) > 1:  # and whatever else is done by now
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            for ref in ready:
                job = pending.pop(ref)
                emit(self._outcome(ref, job, registry))
            if time.monotonic() - watched >= _NODES_TTL_S:
                watched = time.monotonic()
                for ref in self._stranded(pending):
                    job = pending.pop(ref)
                    ray.cancel(ref)  # queued on no node: nothing runs, nothing to clean
                    emit(self._unplaceable(job))

    def _outcome(self, ref: Ref, job: Job, registry: RegistryImages | None
                 ) -> list[ProbeResult]:
        task = job.task
        try:
            outcome: TaskOutcome = ray.get(ref, timeout=60.0)
        except ray.exceptions.RayError as exc:
            reason = _reason(exc)
            log.warning("check of %s on Ray failed: %s", task.env.id, reason,
                        extra={"env": task.env.id, "error": str(exc)[:500]})
            return infra_results(task.env, task.kinds, reason,
                                 f"the Ray task failed ({type(exc).__name__}): "
                                 f"{str(exc).splitlines()[0][:300] if str(exc) else ''}",
                                 started_at=job.submitted_at, duration_s=job.waited_s())
        self._write_shapes(outcome.observations)
        self._holdings.learn(outcome.node_id, task.image_key, task.image_key in outcome.held)
        self.pulls_ahead.used(task.image_key)
        if registry is not None and outcome.registry is not None:  # the node's pulls, cache
            registry.stats.fold(outcome.node_id, outcome.host, outcome.registry)
        return list(outcome.results)

    def _write_shapes(self, observations: Sequence[Observation]) -> None:
        if self._shapes is None:
            return
        for o in observations:
            try:
                self._shapes.observe_shape(o.source_id, o.fingerprint, o.shape, o.at,
                                           count=o.count, auto_accept=o.auto_accept)
            except Exception as exc:  # a lost fingerprint write must not lose the result
                if not self._outages.failed(_SHAPES_WRITE, exc, then="shapes seen not kept"):
                    log.exception("writing the shape of %s failed", o.source_id)
            else:
                self._outages.ran(_SHAPES_WRITE)

    def _stranded(self, pending: Mapping[Ref, Job]) -> list[Ref]:
        """Tasks that no live node could take for longer than the grace period."""
        if not pending:
            return []
        nodes, now, out = self._live_nodes(refresh=True), time.monotonic(), []
        for ref, job in pending.items():
            if feasible(job.resources, nodes):
                job.unschedulable_since = None
            elif job.unschedulable_since is None:
                job.unschedulable_since = now
            elif now - job.unschedulable_since >= self._options.unschedulable_grace_s:
                out.append(ref)
        return out

    def _unplaceable(self, job: Job) -> list[ProbeResult]:
        wanted = ", ".join(f"{k}={v:g}" for k, v in sorted(job.resources.items()))
        return infra_results(job.task.env, job.task.kinds, Reason.NODE_UNAVAILABLE,
                             f"no live Ray node offers {wanted}",
                             started_at=job.submitted_at, duration_s=job.waited_s())

    def _abandon(self, pending: Mapping[Ref, Job]) -> None:
        """Interrupted: queued tasks are dropped, running ones interrupted (their sandboxes
        are removed on the way out); wait a bounded while for them to end."""
        refs = list(pending)
        for ref in refs:
            try:
                ray.cancel(ref)
            except Exception as exc:  # best effort, on the way out
                log.warning("cancelling a Ray task failed: %s", exc)
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=30.0)
