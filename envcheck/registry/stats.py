"""What the tag watch, the puller and the image cache did, as counters the metrics read: tag
looks by registry and outcome and their seconds, the registry's remaining rate limit, pulls by
registry and outcome, their bytes and seconds, the cache's bytes, budget, evictions and hits.

Counters only grow (the metrics turn them into rates); gauges hold the last value seen. One
lock guards them all: updates are a few additions, never a call out.

On Ray each node pulls into its own engine under its own budget, in its own processes: a node's
process hands the caller what its stage did since it last said (``delta``, carried back with
each task's outcome), and the caller adds it in (``fold``): the looks and pulls into its own
counters by registry and outcome (a registry's figures, wherever the pull ran), the cache's
figures per node (``nodes``: bytes and budget as the node last measured them, its evictions,
hits and misses), which is what a dashboard compares per node.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["NODE_TTL_S", "OUTCOME_OK", "OUTCOME_TIMEOUT", "NodeCache", "RegistryStats",
           "StatsSnapshot"]

OUTCOME_OK = "ok"
# a pull cancelled at its deadline (the registry too slow or hanging): registry_unreachable
OUTCOME_TIMEOUT = "timeout"
# a node not heard from for this long (gone from the cluster, or idle a whole day) is dropped
# from the per-node figures; at most this many nodes are kept, the longest silent dropped first
NODE_TTL_S = 86400.0
NODES_MAX = 4096


@dataclass(frozen=True)
class NodeCache:
    """One Ray node's image cache as its processes said: bytes and budget as last measured
    (``measured_at``, wall clock; None: not yet), and its counters since the caller started."""

    host: str
    cache_bytes: int = 0
    budget_bytes: int | None = None
    measured_at: float | None = None
    evictions: int = 0
    evicted_bytes: int = 0
    hits: int = 0
    misses: int = 0
    heard_at: float = 0.0  # monotonic, when the caller last heard from it


@dataclass(frozen=True)
class StatsSnapshot:
    """A consistent copy of the counters at one moment."""

    pulls: dict[tuple[str, str], int]  # (registry, outcome) -> pulls
    pull_seconds: dict[tuple[str, str], float]  # (registry, outcome) -> seconds summed
    pull_bytes: dict[str, int]  # registry -> bytes the engine downloaded
    cache_bytes: int
    budget_bytes: int | None
    evictions: int
    evicted_bytes: int
    hits: int  # ensure() found the image on the engine
    misses: int  # ensure() had to pull
    looks: dict[tuple[str, str], int] = field(default_factory=dict)  # (registry, outcome)
    look_seconds: dict[tuple[str, str], float] = field(default_factory=dict)
    rate_remaining: dict[str, int] = field(default_factory=dict)  # registry -> last said
    prefetches: dict[str, int] = field(default_factory=dict)  # outcome (ok, failed) -> pulls
    prefetch_used: int = 0  # probes that found the image a prefetch had pulled for them
    # when cache_bytes was last measured (wall clock; None: never, the 0 is no measure)
    measured_at: float | None = None
    # the Ray nodes' caches (node id -> figures), as folded in by the caller
    nodes: dict[str, NodeCache] = field(default_factory=dict)


@dataclass
class RegistryStats:
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _pulls: Counter[tuple[str, str]] = field(default_factory=Counter)
    _pull_seconds: defaultdict[tuple[str, str], float] = field(
        default_factory=lambda: defaultdict(float))
    _pull_bytes: Counter[str] = field(default_factory=Counter)
    _cache_bytes: int = 0
    _budget_bytes: int | None = None
    _evictions: int = 0
    _evicted_bytes: int = 0
    _hits: int = 0
    _misses: int = 0
    _looks: Counter[tuple[str, str]] = field(default_factory=Counter)
    _look_seconds: defaultdict[tuple[str, str], float] = field(
        default_factory=lambda: defaultdict(float))
    _rate_remaining: dict[str, int] = field(default_factory=dict)
    _prefetches: Counter[str] = field(default_factory=Counter)
    _prefetch_used: int = 0
    _measured_at: float | None = None
    _nodes: dict[str, NodeCache] = field(default_factory=dict)
    _said: StatsSnapshot | None = None  # what the last delta handed on

    def looked(self, registry: str, outcome: str, seconds: float,
               rate_remaining: int | None = None) -> None:
        """One tag look ended (``outcome``: ``ok`` or a registry reason's value)."""
        with self._lock:
            self._looks[(registry, outcome)] += 1
            self._look_seconds[(registry, outcome)] += seconds
            if rate_remaining is not None:
                self._rate_remaining[registry] = rate_remaining

    def pulled(self, registry: str, outcome: str, seconds: float, downloaded: int) -> None:
        """One pull attempt ended (``outcome``: ``ok``, ``timeout`` or a reason's value)."""
        with self._lock:
            self._pulls[(registry, outcome)] += 1
            self._pull_seconds[(registry, outcome)] += seconds
            self._pull_bytes[registry] += max(downloaded, 0)

    def cache(self, used: int, budget: int | None) -> None:
        with self._lock:
            self._cache_bytes = used
            self._budget_bytes = budget
            self._measured_at = time.time()

    def evicted(self, freed: int) -> None:
        with self._lock:
            self._evictions += 1
            self._evicted_bytes += max(freed, 0)

    def looked_up(self, hit: bool) -> None:
        with self._lock:
            if hit:
                self._hits += 1
            else:
                self._misses += 1

    def prefetched(self, *, failed: bool = False) -> None:
        """A pull ahead of its probe ended (a prefetch that found the image local is none)."""
        with self._lock:
            self._prefetches["failed" if failed else OUTCOME_OK] += 1

    def prefetch_used(self) -> None:
        """A probe found the image a prefetch had pulled for it."""
        with self._lock:
            self._prefetch_used += 1

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> StatsSnapshot:
        now = time.monotonic()
        for node in [n for n, c in self._nodes.items() if now - c.heard_at > NODE_TTL_S]:
            del self._nodes[node]
        return StatsSnapshot(
            pulls=dict(self._pulls), pull_seconds=dict(self._pull_seconds),
            pull_bytes=dict(self._pull_bytes), cache_bytes=self._cache_bytes,
            budget_bytes=self._budget_bytes, evictions=self._evictions,
            evicted_bytes=self._evicted_bytes, hits=self._hits, misses=self._misses,
            looks=dict(self._looks), look_seconds=dict(self._look_seconds),
            rate_remaining=dict(self._rate_remaining),
            prefetches=dict(self._prefetches), prefetch_used=self._prefetch_used,
            measured_at=self._measured_at, nodes=dict(self._nodes))

    def delta(self) -> StatsSnapshot:
        """What changed since the last delta (the counters' growth; the gauges as they are
        now): what a Ray node's process hands the caller with a task's outcome. Each growth
        is handed on once."""
        with self._lock:
            now = self._snapshot()
            said, self._said = self._said, now
        if said is None:
            return now
        return dataclasses.replace(
            now, pulls=_less(now.pulls, said.pulls),
            pull_seconds=_less(now.pull_seconds, said.pull_seconds),
            pull_bytes=_less(now.pull_bytes, said.pull_bytes),
            evictions=now.evictions - said.evictions,
            evicted_bytes=now.evicted_bytes - said.evicted_bytes,
            hits=now.hits - said.hits, misses=now.misses - said.misses,
            looks=_less(now.looks, said.looks),
            look_seconds=_less(now.look_seconds, said.look_seconds),
            prefetches=_less(now.prefetches, said.prefetches),
            prefetch_used=now.prefetch_used - said.prefetch_used, nodes={})

    def fold(self, node: str, host: str, delta: StatsSnapshot) -> None:
        """A Ray node's ``delta`` (:meth:`delta`, from one of its processes) added in: its
        looks and pulls to this stage's counters by registry and outcome, its cache's figures
        to the node's (bytes and budget only if measured after what the node said before)."""
        with self._lock:
            _add(self._looks, delta.looks)
            _add(self._look_seconds, delta.look_seconds)
            _add(self._pulls, delta.pulls)
            _add(self._pull_seconds, delta.pull_seconds)
            _add(self._pull_bytes, delta.pull_bytes)
            _add(self._prefetches, delta.prefetches)
            self._prefetch_used += delta.prefetch_used
            self._rate_remaining.update(delta.rate_remaining)
            was = self._nodes.pop(node, None) or NodeCache(host)
            measured = delta.measured_at is not None and (
                was.measured_at is None or delta.measured_at >= was.measured_at)
            self._nodes[node] = NodeCache(
                host or was.host,
                delta.cache_bytes if measured else was.cache_bytes,
                delta.budget_bytes if measured else was.budget_bytes,
                delta.measured_at if measured else was.measured_at,
                was.evictions + delta.evictions, was.evicted_bytes + delta.evicted_bytes,
                was.hits + delta.hits, was.misses + delta.misses, time.monotonic())
            while len(self._nodes) > NODES_MAX:
                del self._nodes[min(self._nodes, key=lambda n: self._nodes[n].heard_at)]


_K = TypeVar("_K")
_N = TypeVar("_N", int, float)


def _less(now: Mapping[_K, _N], before: Mapping[_K, _N]) -> dict[_K, _N]:
    """What grew between two readings of counters (nothing for what did not)."""
    grown = {key: value - before.get(key, 0) for key, value in now.items()}
    return {key: value for key, value in grown.items() if value}


def _add(into: MutableMapping[_K, _N], more: Mapping[_K, _N]) -> None:
    for key, value in more.items():
        into[key] = into.get(key, 0) + value
