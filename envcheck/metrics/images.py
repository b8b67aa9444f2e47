"""The registry stage's series (images envcheck follows in a registry and pulls): tag looks
and pulls by registry and outcome, their seconds and bytes, the registry's remaining rate
limit, and the image cache (bytes, budget, evictions, hits and misses).

Read at scrape time from what the daemon hands in (``snapshot()``: the stage's counters, or
None while no catalogue has an image envcheck pulls): the metrics never open the stage. No
stage, no series: a fleet of local images exports none of these.

The looks and pulls are a registry's figures, wherever they ran (on Ray the nodes' pulls are
folded into the caller's counters). The cache's series are per cache, one per engine, labelled
``node`` and ``host``: the daemon's own engine is ``node="local"``; a Ray node's is its node
ID (as results name it in ``details.ray``), with the bytes and budget it last measured. Under
Ray the daemon's own engine pulls nothing, and its series are left out once nodes reported.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["LOCAL_NODE", "CacheFigures", "RegistrySeries", "RegistrySnapshot"]


LOCAL_NODE = "local"


class CacheCounts(Protocol):
    """A cache's size, budget and counters, as one engine's cache or the stage's sum."""

    @property
    def cache_bytes(self) -> int: ...
    @property
    def budget_bytes(self) -> int | None: ...
    @property
    def evictions(self) -> int: ...
    @property
    def evicted_bytes(self) -> int: ...
    @property
    def hits(self) -> int: ...
    @property
    def misses(self) -> int: ...


class CacheFigures(CacheCounts, Protocol):
    """One cache's figures (``registry.stats.NodeCache`` fits)."""

    @property
    def host(self) -> str: ...


class RegistrySnapshot(CacheCounts, Protocol):
    """What the series read of the stage's counters (``registry.stats.StatsSnapshot`` fits)."""

    @property
    def looks(self) -> Mapping[tuple[str, str], int]: ...
    @property
    def look_seconds(self) -> Mapping[tuple[str, str], float]: ...
    @property
    def rate_remaining(self) -> Mapping[str, int]: ...
    @property
    def pulls(self) -> Mapping[tuple[str, str], int]: ...
    @property
    def pull_seconds(self) -> Mapping[tuple[str, str], float]: ...
    @property
    def pull_bytes(self) -> Mapping[str, int]: ...
    @property
    def nodes(self) -> Mapping[str, CacheFigures]: ...


@dataclass(frozen=True)
class _Own:
    """The daemon's own engine's cache, as the figures of a node."""

    host: str
    cache_bytes: int
    budget_bytes: int | None
    evictions: int
    evicted_bytes: int
    hits: int
    misses: int


class RegistrySeries(Collector):
    """The ``envcheck_registry_*`` and ``envcheck_image_cache_*`` families of ``snapshot()``."""

    def __init__(self, snapshot: Callable[[], RegistrySnapshot | None]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        got = self._snapshot()
        if got is None:
            return []
        return [*_registry_families(got), *_cache_families(got)]


def _by_outcome(name: str, help_text: str, values: Mapping[tuple[str, str], float]
                ) -> CounterMetricFamily:
    family = CounterMetricFamily(name, help_text, labels=["registry", "outcome"])
    for (registry, outcome), value in sorted(values.items()):
        family.add_metric([registry, outcome], value)
    return family


def _registry_families(got: RegistrySnapshot) -> Iterable[Metric]:
    yield _by_outcome("envcheck_registry_looks",
                      "Tag looks (a HEAD of the tag's manifest) by registry and outcome: ok, "
                      "or the failure's reason (registry_unreachable, registry_auth_failed, "
                      "registry_rate_limited, image_not_found)", got.looks)
    yield _by_outcome("envcheck_registry_look_seconds",
                      "Seconds the tag looks took, by registry and outcome", got.look_seconds)
    remaining = GaugeMetricFamily("envcheck_registry_rate_remaining",
                                  "Pulls the registry's rate limit still allows, as its last "
                                  "answer said (absent: it never said)", labels=["registry"])
    for registry, value in sorted(got.rate_remaining.items()):
        remaining.add_metric([registry], value)
    yield remaining
    yield _by_outcome("envcheck_registry_pulls",
                      "Pull attempts by registry and outcome: ok, timeout (cancelled at its "
                      "deadline), or the failure's reason", got.pulls)
    yield _by_outcome("envcheck_registry_pull_seconds",
                      "Seconds the pulls took, by registry and outcome", got.pull_seconds)
    pulled = CounterMetricFamily("envcheck_registry_pull_bytes",
                                 "Bytes the engine downloaded for envcheck's pulls",
                                 labels=["registry"])
    for registry, value in sorted(got.pull_bytes.items()):
        pulled.add_metric([registry], value)
    yield pulled


def _caches(got: RegistrySnapshot) -> dict[str, CacheFigures]:
    """Each cache's figures by node: the daemon's own engine unless it did nothing while Ray
    nodes did the pulling."""
    caches: dict[str, CacheFigures] = {}
    if not got.nodes or got.hits or got.misses or got.evictions:
        caches[LOCAL_NODE] = _Own(socket.gethostname(), got.cache_bytes, got.budget_bytes,
                                  got.evictions, got.evicted_bytes, got.hits, got.misses)
    caches.update(got.nodes)
    return caches


def _cache_families(got: RegistrySnapshot) -> Iterable[Metric]:
    caches = sorted(_caches(got).items())
    labels = ["node", "host"]
    used = GaugeMetricFamily("envcheck_image_cache_bytes",
                             "What removing envcheck's pulls would free, as the engine counts "
                             "it (shared layers once), per cache: node=local for the daemon's "
                             "own engine, else a Ray node's ID", labels=labels)
    budget = GaugeMetricFamily("envcheck_image_cache_budget_bytes",
                               "The image cache's budget (--image-cache; absent: none), per "
                               "cache", labels=labels)
    for node, cache in caches:
        used.add_metric([node, cache.host], cache.cache_bytes)
        if cache.budget_bytes is not None:
            budget.add_metric([node, cache.host], cache.budget_bytes)
    yield used
    yield budget
    counters: list[tuple[str, str, Callable[[CacheFigures], int]]] = [
        ("envcheck_image_cache_evictions", "envcheck's pulls removed to stay under the budget",
         lambda c: c.evictions),
        ("envcheck_image_cache_evicted_bytes", "Bytes the evictions freed",
         lambda c: c.evicted_bytes),
        ("envcheck_image_cache_hits", "Images a probe needed that were on the engine",
         lambda c: c.hits),
        ("envcheck_image_cache_misses", "Images a probe needed that had to be pulled",
         lambda c: c.misses)]
    for name, help_text, value in counters:
        family = CounterMetricFamily(name, help_text + ", per cache", labels=labels)
        for node, cache in caches:
            family.add_metric([node, cache.host], value(cache))
        yield family
