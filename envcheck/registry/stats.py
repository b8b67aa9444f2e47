"""What the tag watch, the puller and the image cache did, as counters the metrics read: tag
looks by registry and outcome and their seconds, the registry's remaining rate limit, pulls by
registry and outcome, their bytes and seconds, the cache's bytes, budget, evictions and hits.

Counters only grow (the metrics turn them into rates); gauges hold the last value seen. One
lock guards them all: updates are a few additions, never a call out.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

__all__ = ["OUTCOME_OK", "OUTCOME_TIMEOUT", "RegistryStats", "StatsSnapshot"]

OUTCOME_OK = "ok"
# a pull cancelled at its deadline (the registry too slow or hanging): registry_unreachable
OUTCOME_TIMEOUT = "timeout"


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
            return StatsSnapshot(
                pulls=dict(self._pulls), pull_seconds=dict(self._pull_seconds),
                pull_bytes=dict(self._pull_bytes), cache_bytes=self._cache_bytes,
                budget_bytes=self._budget_bytes, evictions=self._evictions,
                evicted_bytes=self._evicted_bytes, hits=self._hits, misses=self._misses,
                looks=dict(self._looks), look_seconds=dict(self._look_seconds),
                rate_remaining=dict(self._rate_remaining),
                prefetches=dict(self._prefetches), prefetch_used=self._prefetch_used)
