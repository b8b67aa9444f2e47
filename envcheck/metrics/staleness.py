"""Staleness per suite and kind: the age of the stalest scheduled environment's newest result,
the longest interval in force, and the newest pass; what the StaleResults alert compares.

Only what is scheduled now counts: an environment removed from the catalogue, or a kind
turned off, does not age forever. The schedule is read from the catalogue once per catalogue
(a reload swaps the object) and the intervals in force once per change of quarantine.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from envcheck.catalogue.models import Catalogue

__all__ = ["Staleness"]


Group = tuple[str, str]  # (suite, kind)


class Staleness:
    """The schedule in force, cached per catalogue and per quarantine change."""

    def __init__(self) -> None:
        self._catalogue: Catalogue | None = None
        # (env, kind) -> (interval, interval while quarantined), for what is scheduled
        self._scheduled: dict[tuple[str, str], tuple[float, float]] = {}
        self._longest: dict[Group, float] = {}
        self._longest_key: int | None = None  # the fleet's version they were read at

    def follow(self, catalogue: Catalogue) -> None:
        """Read the schedule of ``catalogue`` if it is not the one read last."""
        if catalogue is self._catalogue:
            return
        scheduled: dict[tuple[str, str], tuple[float, float]] = {}
        for env in catalogue.environments:
            for kind in env.declared_kinds():
                plain = env.schedules.interval(kind, False)
                slowed = env.schedules.interval(kind, True)
                if plain is not None and slowed is not None:
                    scheduled[(env.id, str(kind))] = (plain, slowed)
        self._catalogue, self._scheduled, self._longest_key = catalogue, scheduled, None

    def families(self, scheduled: bool, last_seen: dict[tuple[str, str], float],
                 last_pass: dict[tuple[str, str], float], suite_of: dict[str, str],
                 quarantined: set[str], fleet_version: int, now: float) -> Iterable[Metric]:
        """``scheduled`` False: no scheduler, every stored result counts and no interval."""
        oldest: dict[Group, float] = {}
        for (env_id, kind), at in last_seen.items():
            if scheduled and (env_id, kind) not in self._scheduled:
                continue
            group = (suite_of.get(env_id, ""), kind)
            if at < oldest.get(group, float("inf")):
                oldest[group] = at
        age = GaugeMetricFamily("envcheck_oldest_result_age_seconds",
                                "Age of the newest result of the suite's stalest scheduled "
                                "environment, per probe kind", labels=["suite", "kind"])
        for group, at in sorted(oldest.items()):
            age.add_metric(list(group), now - at)
        yield age
        if scheduled:
            interval = GaugeMetricFamily(
                "envcheck_probe_interval_seconds",
                "Longest probe interval in force in the suite for this kind (quarantined "
                "environments are probed more slowly)", labels=["suite", "kind"])
            for group, value in sorted(self._intervals(suite_of, quarantined,
                                                       fleet_version).items()):
                interval.add_metric(list(group), value)
            yield interval
        newest_pass: dict[Group, float] = {}
        for (env_id, kind), at in last_pass.items():
            group = (suite_of.get(env_id, ""), kind)
            if at > newest_pass.get(group, 0.0):
                newest_pass[group] = at
        last = GaugeMetricFamily("envcheck_last_success_timestamp_seconds",
                                 "When a probe of this suite and kind last passed",
                                 labels=["suite", "kind"])
        for group, at in sorted(newest_pass.items()):
            last.add_metric(list(group), at)
        yield last

    def _intervals(self, suite_of: dict[str, str], quarantined: set[str],
                   fleet_version: int) -> dict[Group, float]:
        if fleet_version != self._longest_key:
            longest: dict[Group, float] = {}
            for (env_id, kind), (plain, slowed) in self._scheduled.items():
                group = (suite_of.get(env_id, ""), kind)
                value = slowed if env_id in quarantined else plain
                if value > longest.get(group, 0.0):
                    longest[group] = value
            self._longest, self._longest_key = longest, fleet_version
        return self._longest
