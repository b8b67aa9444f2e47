"""Staleness per suite and kind: the age of the stalest scheduled environment's newest result,
the longest interval in force, and the newest pass; what the StaleResults alert compares.

Only what is scheduled now counts: an environment removed from the catalogue, or a kind
turned off, does not age forever. Kept up to date by what moved since the last scrape, not
recomputed over the fleet: per suite and kind, a heap of newest-result times (an entry whose
time is no longer its key's newest is dropped when it reaches the top), the newest pass, and
how many environments have each interval in force. Everything is rebuilt when the catalogue
or the environments' suites change.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from envcheck.catalogue.models import Catalogue

__all__ = ["Staleness"]

Group = tuple[str, str]  # (suite, kind)
Key = tuple[str, str]  # (environment, kind)
Schedule = tuple[tuple[str, float, float], ...]  # (kind, interval, interval while quarantined)


class Staleness:
    """Fed with what moved: :meth:`update`, then :meth:`families`."""

    def __init__(self) -> None:
        self._catalogue: Catalogue | None = None
        self._catalogues = 0  # how many catalogues were read: part of the basis below
        # environment -> its schedule, of what is scheduled; one tuple per distinct schedule,
        # shared by the environments that have it (a fleet has few)
        self._kinds: dict[str, Schedule] = {}
        self._basis: tuple[int, int, bool] | None = None  # what the groups were built on
        self._heaps: dict[Group, list[tuple[float, str, str]]] = {}
        self._entries = 0
        self._newest_pass: dict[Group, float] = {}
        self._intervals: dict[Group, Counter[float]] = {}
        self._slowed: set[str] = set()  # counted at their quarantined interval

    def follow(self, catalogue: Catalogue) -> None:
        """Read the schedule of ``catalogue`` if it is not the one read last."""
        if catalogue is self._catalogue:
            return
        kinds: dict[str, Schedule] = {}
        shared: dict[Schedule, Schedule] = {}
        for env in catalogue.environments:
            entries = []
            for kind in env.declared_kinds():
                plain = env.schedules.interval(kind, False)
                slowed = env.schedules.interval(kind, True)
                if plain is not None and slowed is not None:
                    entries.append((str(kind), plain, slowed))
            if entries:
                schedule = tuple(entries)
                kinds[env.id] = shared.setdefault(schedule, schedule)
        self._catalogue, self._kinds = catalogue, kinds
        self._catalogues += 1

    def update(self, scheduled: bool, last_seen: dict[Key, float], last_pass: dict[Key, float],
               touched: set[Key], suite_of: dict[str, str], suites_version: int,
               quarantined: set[str], flipped: set[str]) -> None:
        """Take in what moved: ``touched`` keys of ``last_seen``/``last_pass``, environments
        ``flipped`` in or out of quarantine. ``scheduled`` False: there is no scheduler,
        every stored result counts and there are no intervals."""
        basis = (self._catalogues, suites_version, scheduled)
        if basis != self._basis or self._entries > 3 * len(last_seen) + 1_000:
            self._rebuild(scheduled, last_seen, last_pass, suite_of, quarantined)
            self._basis = basis
            return
        for key in touched:
            self._touch(key, scheduled, last_seen, last_pass, suite_of)
        for env_id in flipped if scheduled else ():
            if (env_id in quarantined) != (env_id in self._slowed):
                self._count_intervals(env_id, suite_of, -1)
                self._slowed ^= {env_id}
                self._count_intervals(env_id, suite_of, 1)

    def _scheduled(self, key: Key, scheduled: bool) -> bool:
        env_id, kind = key
        return not scheduled or any(k == kind for k, _, _ in self._kinds.get(env_id, ()))

    def _rebuild(self, scheduled: bool, last_seen: dict[Key, float],
                 last_pass: dict[Key, float], suite_of: dict[str, str],
                 quarantined: set[str]) -> None:
        heaps: dict[Group, list[tuple[float, str, str]]] = defaultdict(list)
        for (env_id, kind), at in last_seen.items():
            if self._scheduled((env_id, kind), scheduled):
                heaps[(suite_of.get(env_id, ""), kind)].append((at, env_id, kind))
        for heap in heaps.values():
            heapq.heapify(heap)
        self._heaps, self._entries = dict(heaps), len(last_seen)
        self._newest_pass = {}
        for (env_id, kind), at in last_pass.items():
            group = (suite_of.get(env_id, ""), kind)
            if at > self._newest_pass.get(group, 0.0):
                self._newest_pass[group] = at
        self._intervals, self._slowed = {}, set(quarantined) if scheduled else set()
        for env_id in self._kinds if scheduled else ():
            self._count_intervals(env_id, suite_of, 1)

    def _touch(self, key: Key, scheduled: bool, last_seen: dict[Key, float],
               last_pass: dict[Key, float], suite_of: dict[str, str]) -> None:
        group = (suite_of.get(key[0], ""), key[1])
        if key in last_seen and self._scheduled(key, scheduled):
            heapq.heappush(self._heaps.setdefault(group, []), (last_seen[key], *key))
            self._entries += 1
        at = last_pass.get(key)
        if at is not None and at > self._newest_pass.get(group, 0.0):
            self._newest_pass[group] = at

    def _count_intervals(self, env_id: str, suite_of: dict[str, str], sign: int) -> None:
        slowed = env_id in self._slowed
        for kind, plain, quarantined in self._kinds.get(env_id, ()):
            counts = self._intervals.setdefault((suite_of.get(env_id, ""), kind), Counter())
            value = quarantined if slowed else plain
            counts[value] += sign
            if not counts[value]:
                del counts[value]

    # --- families --------------------------------------------------------------------------

    def _oldest(self, last_seen: dict[Key, float]) -> dict[Group, float]:
        """Per group, the oldest newest-result time; stale heap entries are dropped."""
        oldest: dict[Group, float] = {}
        for group, heap in self._heaps.items():
            while heap and last_seen.get((heap[0][1], heap[0][2])) != heap[0][0]:
                heapq.heappop(heap)
                self._entries -= 1
            if heap:
                oldest[group] = heap[0][0]
        return oldest

    def families(self, scheduled: bool, last_seen: dict[Key, float], now: float
                 ) -> Iterable[Metric]:
        age = GaugeMetricFamily("envcheck_oldest_result_age_seconds",
                                "Age of the newest result of the suite's stalest scheduled "
                                "environment, per probe kind", labels=["suite", "kind"])
        for group, at in sorted(self._oldest(last_seen).items()):
            age.add_metric(list(group), now - at)
        yield age
        if scheduled:
            interval = GaugeMetricFamily(
                "envcheck_probe_interval_seconds",
                "Longest probe interval in force in the suite for this kind (quarantined "
                "environments are probed more slowly)", labels=["suite", "kind"])
            for group, counts in sorted(self._intervals.items()):
                if counts:
                    interval.add_metric(list(group), max(counts))
            yield interval
        last = GaugeMetricFamily("envcheck_last_success_timestamp_seconds",
                                 "When a probe of this suite and kind last passed",
                                 labels=["suite", "kind"])
        for group, at in sorted(self._newest_pass.items()):
            last.add_metric(list(group), at)
        yield last
