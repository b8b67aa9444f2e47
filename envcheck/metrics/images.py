"""The registry stage's series (images envcheck follows in a registry and pulls): tag looks
and pulls by registry and outcome, their seconds and bytes, the registry's remaining rate
limit, and the image cache (bytes, budget, evictions, hits and misses).

Read at scrape time from what the daemon hands in (``snapshot()``: the stage's counters, or
None while no catalogue has an image envcheck pulls): the metrics never open the stage. No
stage, no series: a fleet of local images exports none of these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["RegistrySeries", "RegistrySnapshot"]


class RegistrySnapshot(Protocol):
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


def _cache_families(got: RegistrySnapshot) -> Iterable[Metric]:
    used = GaugeMetricFamily("envcheck_image_cache_bytes",
                             "What removing envcheck's pulls would free, as the engine counts "
                             "it (shared layers once)")
    used.add_metric([], got.cache_bytes)
    yield used
    budget = GaugeMetricFamily("envcheck_image_cache_budget_bytes",
                               "The image cache's budget (--image-cache; absent: none)")
    if got.budget_bytes is not None:
        budget.add_metric([], got.budget_bytes)
    yield budget
    for name, help_text, value in (
            ("envcheck_image_cache_evictions", "envcheck's pulls removed to stay under the "
             "budget", got.evictions),
            ("envcheck_image_cache_evicted_bytes", "Bytes the evictions freed", got.evicted_bytes),
            ("envcheck_image_cache_hits", "Images a probe needed that were on the engine",
             got.hits),
            ("envcheck_image_cache_misses", "Images a probe needed that had to be pulled",
             got.misses)):
        family = CounterMetricFamily(name, help_text)
        family.add_metric([], value)
        yield family
