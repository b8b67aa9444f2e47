"""The daemon's pulls ahead on Ray: the images of the next due checks pulled into the engine of
the node each check will run on, never into the caller's own engine (which runs no check).

A check whose image some node holds goes to one of those nodes (Ray's soft node affinity,
:mod:`envcheck.executors.ray_placement`): nothing to pull ahead. For an image no node holds,
the node is chosen as placement chooses among holders, by the environment, here among every
live node that offers the check's resources, and a small task pinned to it
(:func:`~envcheck.executors.ray_task.prefetch_on_node`, no CPU, no docker slot) pulls the
image into its engine through its registry stage (its ledger, its budget; held in the ledger
for its probe, whichever worker process runs it). Its outcome says which images the node's
engine holds after, so placement then sends the check there; and what the node's stage did,
folded into the caller's metrics.

Bounds: at most ``prefetch_count`` (``--prefetch``) images sent ahead to one node and not yet
checked there (or for ``hold_s``, after which they no longer count); the node's stage applies
its own count and bytes bounds and never evicts for a prefetch what is in use, pinned, just
used or held. The caller never waits on a pull: each pass collects what ended since the last.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any, TypeAlias

import ray
import ray.exceptions
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from envcheck.catalogue.models import Environment
from envcheck.executors.base import RayOptions
from envcheck.executors.ray_placement import Holdings, LiveNodes, checking_nodes, chosen_node
from envcheck.executors.ray_task import AheadOutcome
from envcheck.registry.fleet import RegistryImages
from envcheck.registry.node import image_key, node_spec
from envcheck.registry.reference import ImageReference

__all__ = ["NodePullsAhead"]

log = logging.getLogger(__name__)

HOLD_S = 900.0  # as the stage's own prefetch_hold_s: an image its probe never came for
_Wanted: TypeAlias = tuple[str, str, str]  # (repository, digest, image key)


class NodePullsAhead:
    """``remote``: ``ray.remote(prefetch_on_node)``; thread-safe."""

    def __init__(self, remote: Any, holdings: Holdings, live_nodes: LiveNodes,
                 options: RayOptions, *, hold_s: float = HOLD_S) -> None:
        self._remote = remote
        self._holdings = holdings
        self._live_nodes = live_nodes
        self._options = options
        self._hold_s = hold_s
        self._lock = threading.Lock()
        # a pull ahead under way: its task -> (node, keys), and the stage to fold it into
        self._pending: dict[ray.ObjectRef[AheadOutcome], tuple[str, tuple[str, ...],
                                                              RegistryImages]] = {}
        self._ahead: dict[str, tuple[str, float]] = {}  # image key -> (node, since)
        self.sent = 0  # images sent ahead, since start

    def __call__(self, registry: RegistryImages,
                 wanted: Sequence[tuple[Environment, str]]) -> int:
        """Send the images of ``wanted`` ((environment, digest), soonest due first) ahead to
        the nodes their checks will run on; how many images were sent."""
        self.collect()
        count = registry.prefetch_count
        if count <= 0 or not wanted:
            return 0
        nodes = self._live_nodes()
        checking = checking_nodes(nodes, self._options.docker_resource)
        keyed = [(env, digest, image_key(env, digest)) for env, digest in wanted]
        self._holdings.ask([key for _, _, key in keyed], checking)  # new images: one look
        resources = {self._options.docker_resource: self._options.docker_per_task}
        chosen: dict[str, list[_Wanted]] = {}
        with self._lock:
            self._expire()
            for env, digest, key in keyed:
                if key is None or key in self._ahead or self._holdings.holders(key) & set(
                        checking):
                    continue  # known, on its way, or held: the check goes to its holder
                node = chosen_node(env.id, checking, resources, nodes)
                if node is None:
                    continue  # no live node can run it: the check says so
                waiting = sum(1 for n, _ in self._ahead.values() if n == node)
                if waiting + len(chosen.get(node, [])) >= count:
                    continue
                chosen.setdefault(node, []).append(
                    (ImageReference.parse(env.image).name, digest, key))
        spec = node_spec(registry)
        sent = 0
        for node, images in chosen.items():
            ref = self._remote.options(
                num_cpus=0, max_retries=0, name="envcheck:pull-ahead",
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                **self._runtime_env(),
            ).remote(spec, tuple(images))
            keys = tuple(key for _, _, key in images)
            with self._lock:
                self._pending[ref] = (node, keys, registry)
                for key in keys:
                    self._ahead[key] = (node, time.monotonic())
            sent += len(images)
        self.sent += sent
        if sent:
            log.info("pulling ahead on the nodes", extra={"pulls": sent, "nodes": len(chosen)})
        return sent

    @property
    def pending(self) -> int:
        """Pulls ahead whose outcome was not collected yet."""
        with self._lock:
            return len(self._pending)

    def used(self, key: str | None) -> None:
        """A check of ``key``'s image came back: it no longer waits ahead."""
        if key is not None:
            with self._lock:
                self._ahead.pop(key, None)

    def collect(self, timeout_s: float = 0.0) -> int:
        """What the pulls ahead that ended say (waiting up to ``timeout_s`` for them): which
        node holds which image, and what the nodes' stages did. How many ended."""
        with self._lock:
            refs = list(self._pending)
        if not refs:
            return 0
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        for ref in ready:
            with self._lock:
                node, keys, registry = self._pending.pop(ref)
            try:
                outcome: AheadOutcome = ray.get(ref, timeout=60.0)
            except ray.exceptions.RayError as exc:  # the checks pull what it could not
                log.info("a pull ahead on a node failed: %s",
                         str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)
                with self._lock:
                    for key in keys:
                        self._ahead.pop(key, None)
                continue
            for key in keys:
                self._holdings.learn(outcome.node_id or node, key, key in outcome.held)
            if outcome.registry is not None:
                registry.stats.fold(outcome.node_id or node, outcome.host, outcome.registry)
        return len(ready)

    def close(self) -> None:
        with self._lock:
            refs = list(self._pending)
            self._pending.clear()
        for ref in refs:
            try:
                ray.cancel(ref)
            except Exception as exc:  # best effort, on the way out
                log.warning("cancelling a pull ahead failed: %s", exc)

    def _expire(self) -> None:
        limit = time.monotonic() - self._hold_s
        for key in [k for k, (_, since) in self._ahead.items() if since < limit]:
            del self._ahead[key]

    def _runtime_env(self) -> dict[str, Any]:
        """The checks' own (the same worker processes serve both)."""
        env_vars = {name: os.environ[name] for name in self._options.forward_env
                    if os.environ.get(name)}
        return {"runtime_env": {"env_vars": env_vars}} if env_vars else {}
