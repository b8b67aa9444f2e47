"""The daemon's own series, which read no store: its process (``process_*``: CPU, memory,
open files, start time) and its lease on the store (``envcheck_lease_held``).

A standby serves these alone: nothing derived from the store, so two daemons scraped beside
each other never fire the fleet's alerts twice, and ``envcheck_up`` (which ``EnvcheckAbsent``
reads) comes only from the daemon that writes the store. The active daemon serves them beside
the store's (:class:`~envcheck.metrics.collector.StoreMetrics` registers itself in the same
registry).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["LeaseSeries", "own_registry"]


class LeaseSeries(Collector):
    """``envcheck_lease_held``: ``held()`` at scrape time, 1 or 0."""

    def __init__(self, held: Callable[[], bool]) -> None:
        self._held = held

    def collect(self) -> Iterable[Metric]:
        held = GaugeMetricFamily(
            "envcheck_lease_held",
            "1 while this daemon holds the store's lease and writes the store; 0 on a standby "
            "waiting for it, or while a lost lease is being taken back")
        held.add_metric([], 1.0 if self._held() else 0.0)
        yield held


def own_registry(held: Callable[[], bool]) -> CollectorRegistry:
    """A registry holding the process's series and the lease's (``held``: is it ours)."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    registry.register(LeaseSeries(held))
    return registry
