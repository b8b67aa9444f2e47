"""Where a check goes on Ray: first to a node whose engine already holds its image, else
anywhere Ray's own scheduling puts it.

The caller learns which node holds which image (``registry.node.image_key``: the repository at
the watch's digest, or the catalogue's reference) in two ways, both bounded:

- every task's outcome says which node ran it and whether its engine holds the image after
  (it pulled it, or had it): free;
- images no node has said anything about within ``ttl_s`` (15 minutes: longer than the
  terminal schedule, so a steady fleet's own outcomes keep it fresh) are asked of every live
  node that runs checks, in one small task per node
  (:func:`~envcheck.executors.ray_task.census_on_node`: one listing of the node's images,
  however many are asked), at most ``max_keys`` per look, waited for ``timeout_s`` at most (a
  node that does not answer holds nothing, as far as placement goes).

Placement itself is Ray's: a check whose image a node holds is submitted with
``NodeAffinitySchedulingStrategy(node, soft=True)``, spilling to another node when that one
has no free slot (which then pulls the image, under its own budget): a held image never holds
work back, and a node that is gone or lacks the check's resources is simply not chosen.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import ray
import ray.exceptions
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from envcheck.catalogue.models import Environment
from envcheck.core.results import ProbeKind
from envcheck.executors.ray_task import Census
from envcheck.registry.fleet import RegistryImages
from envcheck.registry.node import NodeImagesSpec, image_key
from envcheck.registry.reference import ImageReference

__all__ = ["Holdings", "LiveNodes", "affinity", "carried_image", "checking_nodes", "chosen_node",
           "feasible"]

log = logging.getLogger(__name__)

TTL_S = 900.0  # longer than the terminal schedule: a steady fleet is never asked again
MAX_KEYS = 2000
TIMEOUT_S = 15.0
_MAX_REMEMBERED = 50_000
# ray.nodes() is untyped; named here once, typed.
_ray_nodes: Callable[[], list[dict[str, Any]]] = ray.nodes


class LiveNodes:
    """The cluster's live nodes (``ray.nodes()``), asked again after ``ttl_s``; thread-safe."""

    def __init__(self, ttl_s: float) -> None:
        self._ttl_s = ttl_s
        self._nodes: list[dict[str, Any]] = []
        self._at = float("-inf")
        self._lock = threading.Lock()

    def __call__(self, refresh: bool = False) -> list[dict[str, Any]]:
        with self._lock:
            now = time.monotonic()
            if refresh or now - self._at > self._ttl_s:
                self._nodes = [n for n in _ray_nodes() if n.get("Alive")]
                self._at = now
            return self._nodes


class Holdings:
    """Which node holds which image, as the nodes said lately; thread-safe."""

    def __init__(self, census: Any, *, ttl_s: float = TTL_S, max_keys: int = MAX_KEYS,
                 timeout_s: float = TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._census = census  # ray.remote(census_on_node)
        self._ttl_s = ttl_s
        self._max_keys = max_keys
        self._timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, tuple[frozenset[str], float]] = {}
        self.censuses = 0  # looks asked of the nodes (each: one task per node)

    def holders(self, key: str | None) -> frozenset[str]:
        if key is None:
            return frozenset()
        with self._lock:
            found = self._known.get(key)
        return found[0] if found is not None else frozenset()

    def learn(self, node_id: str, key: str | None, held: bool) -> None:
        """What a task's outcome said: ``node_id``'s engine holds ``key`` (or not) now."""
        if key is None or not node_id:
            return
        with self._lock:
            nodes, _ = self._known.pop(key, (frozenset(), 0.0))
            nodes = nodes | {node_id} if held else nodes - {node_id}
            self._remember(key, nodes)

    def ask(self, keys: Iterable[str | None], nodes: Sequence[str]) -> None:
        """Ask ``nodes`` about the images of ``keys`` nobody said anything of lately."""
        now = self._clock()
        with self._lock:
            stale = sorted({k for k in keys if k is not None and
                            now - self._known.get(k, (frozenset(), float("-inf")))[1]
                            >= self._ttl_s})
        for start in range(0, len(stale), self._max_keys):
            if nodes:
                self._look(tuple(stale[start:start + self._max_keys]), nodes)

    def _look(self, keys: tuple[str, ...], nodes: Sequence[str]) -> None:
        refs = {self._census.options(
            num_cpus=0, max_retries=0, name="envcheck:images-held",
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
        ).remote(keys): node for node in nodes}
        self.censuses += 1
        ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=self._timeout_s)
        held: dict[str, set[str]] = {key: set() for key in keys}
        for ref in ready:
            try:
                census: Census = ray.get(ref, timeout=self._timeout_s)
            except ray.exceptions.RayError as exc:
                log.warning("a node did not say which images it holds: %s",
                            str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
                continue
            for key in census.held:
                held.setdefault(key, set()).add(census.node_id or refs[ref])
        for ref in late:
            ray.cancel(ref)
        at = self._clock()
        with self._lock:
            for key in keys:
                self._known.pop(key, None)
                self._remember(key, frozenset(held[key]), at)

    def _remember(self, key: str, nodes: frozenset[str], at: float | None = None) -> None:
        self._known[key] = (nodes, self._clock() if at is None else at)
        while len(self._known) > _MAX_REMEMBERED:  # the oldest said first
            del self._known[next(iter(self._known))]


def feasible(resources: Mapping[str, float], nodes: Sequence[Mapping[str, Any]]) -> bool:
    """Some live node offers ``resources``."""
    return any(node.get("Alive") and all(node.get("Resources", {}).get(name, 0.0) >= amount
                                         for name, amount in resources.items())
               for node in nodes)


def checking_nodes(nodes: Sequence[Mapping[str, Any]], resource: str) -> list[str]:
    """The live nodes that run checks (declare ``resource``)."""
    return [str(n["NodeID"]) for n in nodes
            if n.get("Alive") and n.get("Resources", {}).get(resource, 0.0) > 0]


def chosen_node(env_id: str, among: Collection[str], resources: Mapping[str, float],
                nodes: Sequence[Mapping[str, Any]]) -> str | None:
    """One live node of ``among`` that offers ``resources``, chosen by the environment (so
    that one environment keeps to one node); None when there is none."""
    fit = sorted(str(n["NodeID"]) for n in nodes
                 if n.get("Alive") and str(n.get("NodeID")) in among
                 and all(n.get("Resources", {}).get(name, 0.0) >= amount
                         for name, amount in resources.items()))
    return fit[zlib.crc32(env_id.encode()) % len(fit)] if fit else None


def affinity(env_id: str, holders: Collection[str], resources: Mapping[str, float],
             nodes: Sequence[Mapping[str, Any]]) -> NodeAffinitySchedulingStrategy | None:
    """Ray's soft affinity to the node :func:`chosen_node` picks among ``holders``; None
    when no such node: Ray's default placement."""
    chosen = chosen_node(env_id, holders, resources, nodes)
    if chosen is None:
        return None
    return NodeAffinitySchedulingStrategy(chosen, soft=True, _spill_on_unavailable=True)


def carried_image(env: Environment, kinds: Sequence[ProbeKind], registry: RegistryImages | None,
                  spec: NodeImagesSpec | None) -> dict[str, Any]:
    """What the tasks of ``env`` carry of its image (``CheckTask`` fields): for an image
    envcheck pulls, the watch's look at its tag, taken here where the watch is (the node
    pulls the digest it saw), and the registry stage's settings; what names it anywhere."""
    watch = None
    if (env.pull == "watch" and registry is not None
            and not ImageReference.parse(env.image).pinned):
        watch = registry.identity(env, fresh=ProbeKind.IMAGE in kinds)
    digest = watch.look.digest if watch is not None and watch.look is not None else None
    return {"images": spec if env.pull == "watch" else None, "watch": watch,
            "image_key": image_key(env, digest)}
