"""What the metrics keep of probe results, folded in as they arrive: each scrape reads only the
results stored since the last one (:class:`~envcheck.metrics.cursor.IdCursor`).

Counters (results by outcome, sandbox-seconds, the duration histogram) count the results
stored since these metrics started, as Prometheus counters do from a process' start: they
never rest on old results still being stored (the store may prune them), and a restart is
a counter reset, which ``rate()`` and ``increase()`` handle. What reads the newest result of
an environment and kind (staleness, last success, reward hacks, data sources) starts from one
read of the store's newest results, then follows the fold; it shows what the store still
holds.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from envcheck.core.depth import Depth, RunCount
from envcheck.core.results import ProbeKind, Reason, Status
from envcheck.metrics.cursor import IdCursor
from envcheck.store.views.metrics import NewestResult, ResultTick, Touched

__all__ = ["BUCKETS", "Newest", "ProbeSeries", "ResultSource"]

BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, float("inf"))
# Kinds whose newest result's details the metrics show (reward hacks, data sources).
DETAILED = (str(ProbeKind.TESTS), str(ProbeKind.DATASOURCE))
_PAGE = 50_000


class ResultSource(Protocol):
    """The store's reads this module needs."""

    def newest_result_id(self) -> int: ...
    def result_ticks(self, after_id: int, limit: int, also: Sequence[int] = ()
                     ) -> list[ResultTick]: ...
    def result_details(self, ids: Sequence[int]) -> dict[int, dict[str, Any]]: ...
    def touched(self) -> list[Touched]: ...
    def newest_results(self, kinds: Sequence[str]) -> list[NewestResult]: ...


@dataclass(frozen=True, slots=True)
class Newest:
    """An environment's newest result of a detailed kind."""

    order: tuple[float, int]  # (start, id): the newest wins
    reason: str
    details: dict[str, Any]


class ProbeSeries:
    """Counters since start, and the newest result per environment and kind."""

    def __init__(self, store: ResultSource) -> None:
        self._cursor = IdCursor(store.newest_result_id())  # counting starts here
        self._loaded = False
        self.runs: dict[tuple[str, str, str], int] = defaultdict(int)
        # runs the results held (suite, kind, depth): a tests probe holds several
        self.run_counts: dict[tuple[str, str, str], int] = defaultdict(int)
        self.seconds: dict[tuple[str, str], float] = defaultdict(float)
        self.buckets: dict[str, list[int]] = defaultdict(lambda: [0] * len(BUCKETS))
        self.dur_sum: dict[str, float] = defaultdict(float)
        self.last_seen: dict[tuple[str, str], float] = {}  # (env, kind) -> newest start
        self.last_pass: dict[tuple[str, str], float] = {}
        self._touched: set[tuple[str, str]] = set()  # keys of the two above that moved
        self.newest: dict[str, dict[str, Newest]] = {kind: {} for kind in DETAILED}
        self.detail_version = 0  # moves whenever ``newest`` does
        self._derived_at = -1
        self._derived_cache: tuple[dict[str, list[str]], dict[str, dict[str, Any]]] = ({}, {})

    def refresh(self, store: ResultSource, suite_of: dict[str, str]) -> None:
        """Reads first, then folds: a read that fails leaves nothing half counted."""
        if not self._loaded:
            self._load(store)
        also = self._cursor.holes
        while True:  # pages through what is new, not a retry
            rows = store.result_ticks(self._cursor.high, _PAGE, also)
            fresh = [row for row in rows if self._cursor.unread(row.id)]
            wanted = [row.id for row in fresh if row.kind in self.newest and self._newer(row)]
            details = store.result_details(wanted) if wanted else {}
            self._cursor.take(row.id for row in rows)
            self._fold(fresh, details, suite_of)
            if len(rows) < _PAGE:
                break
            also = []

    def _load(self, store: ResultSource) -> None:
        """The newest results as stored: once, at the first scrape."""
        touched, newest = store.touched(), store.newest_results(DETAILED)
        for t in touched:
            key = (t.env_id, t.kind)  # one tuple for both: 175,000 of them at 100,000
            self.last_seen[key] = t.newest_at.timestamp()
            if t.pass_at is not None:
                self.last_pass[key] = t.pass_at.timestamp()
        for n in newest:
            self._offer(n.tick, n.details)
        self._loaded = True

    def _fold(self, rows: list[ResultTick], details: dict[int, dict[str, Any]],
              suite_of: dict[str, str]) -> None:
        for row in rows:
            suite, kind, duration = suite_of.get(row.env_id, ""), row.kind, row.duration_s
            self.runs[(suite, kind, row.status)] += 1
            count = RunCount.stored(Status(row.status), row.runs, row.failed_runs, row.depth)
            depth = str(count.depth) if count.depth is not None else ""
            self.run_counts[(suite, kind, depth)] += count.runs
            if count.depth is not Depth.REUSED:  # an identity check holds no sandbox
                self.seconds[(suite, kind)] += duration
            self.dur_sum[kind] += duration
            self.buckets[kind][bisect_left(BUCKETS, duration)] += 1
            key, at = (row.env_id, kind), row.started_at.timestamp()
            if at > self.last_seen.get(key, float("-inf")):
                self.last_seen[key] = at
                self._touched.add(key)
            if row.status == "pass" and at > self.last_pass.get(key, float("-inf")):
                self.last_pass[key] = at
                self._touched.add(key)
            if row.id in details:
                self._offer(row, details[row.id])

    def drain_touched(self) -> set[tuple[str, str]]:
        """The (environment, kind) whose newest result or pass moved since the last call."""
        touched, self._touched = self._touched, set()
        return touched

    def _newer(self, row: ResultTick) -> bool:
        held = self.newest[row.kind].get(row.env_id)
        return held is None or (row.started_at.timestamp(), row.id) > held.order

    def _offer(self, row: ResultTick, details: dict[str, Any]) -> None:
        if self._newer(row):
            self.newest[row.kind][row.env_id] = Newest(
                (row.started_at.timestamp(), row.id), row.reason, details)
            self.detail_version += 1

    # --- families --------------------------------------------------------------------------

    def counter_families(self) -> Iterable[Metric]:
        runs = CounterMetricFamily("envcheck_probe_results",
                                   "Probe results by outcome, stored since envcheck started",
                                   labels=["suite", "kind", "status"])
        for (suite, kind, status), n in sorted(self.runs.items()):
            runs.add_metric([suite, kind, status], n)
        held = CounterMetricFamily("envcheck_probe_runs",
                                   "Runs the probe results held, stored since envcheck "
                                   "started: a tests probe holds its negative control, reruns "
                                   "and confirmation (a light check 2), other kinds one; by "
                                   "depth (full, light, fixed; empty: not a tests probe)",
                                   labels=["suite", "kind", "depth"])
        for (suite, kind, depth), n in sorted(self.run_counts.items()):
            held.add_metric([suite, kind, depth], n)
        cost = CounterMetricFamily("envcheck_sandbox_seconds",
                                   "Seconds spent probing (the cost of checking), since "
                                   "envcheck started", labels=["suite", "kind"])
        for (suite, kind), seconds in sorted(self.seconds.items()):
            cost.add_metric([suite, kind], seconds)
        hist = HistogramMetricFamily("envcheck_probe_duration_seconds",
                                     "Duration of one probe", labels=["kind"])
        for kind, counts in sorted(self.buckets.items()):
            cumulative, bounds = 0, []
            for bound, n in zip(BUCKETS, counts, strict=True):
                cumulative += n
                bounds.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
            hist.add_metric([kind], bounds, self.dur_sum[kind])
        return runs, held, cost, hist

    def hackable(self) -> dict[str, list[str]]:
        """Environments whose newest tests result is reward_hackable, with the tricks."""
        return self._derived()[0]

    def sources(self) -> dict[str, dict[str, Any]]:
        """Each data source as the newest datasource result that probed it saw it."""
        return self._derived()[1]

    def _derived(self) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]]]:
        """:meth:`hackable` and :meth:`sources`, read again only when a newest result moved."""
        if self._derived_at != self.detail_version:
            hackable = {env_id: [str(t) for t in
                                 (n.details.get("adversarial") or {}).get("rewarded", [])]
                        for env_id, n in self.newest[str(ProbeKind.TESTS)].items()
                        if n.reason == Reason.REWARD_HACKABLE}
            latest: dict[str, tuple[tuple[float, int], dict[str, Any]]] = {}
            for n in self.newest[str(ProbeKind.DATASOURCE)].values():
                for source_id, info in (n.details.get("sources") or {}).items():
                    if source_id not in latest or n.order > latest[source_id][0]:
                        latest[source_id] = (n.order, info)
            self._derived_cache = (hackable, {k: info for k, (_, info) in latest.items()})
            self._derived_at = self.detail_version
        return self._derived_cache
