"""Prometheus metrics, read from the store at scrape time (DESIGN.md lesson 6).

Probe counters and the duration histogram are folded in incrementally: each scrape reads only
results newer than the last one it saw, so a scrape stays cheap on a store of millions; the
results pruned before the collector started count from the store's rollups.
Cardinality is bounded by the fleet: per-environment series carry (env, suite) and nothing
that grows with time; everything else is per suite, kind, status or data source.

The names are the contract of ``alerts.yaml`` (top level); ``tests/test_alerts.py`` lints a
scrape with ``promtool check metrics`` and checks every name the rules use is exported.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sized
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import Connection, func
from sqlalchemy import select as sa_select

from envcheck.core.numbers import percentile
from envcheck.core.results import ProbeKind, Reason
from envcheck.store.rollups import rollup_totals
from envcheck.store.tables import DURATION_BOUNDS, EnvStateRow, IncidentRow, ProbeResultRow

if TYPE_CHECKING:
    from envcheck.catalogue.models import Catalogue
    from envcheck.store import Store

__all__ = ["BUCKETS", "LiveSchedule", "StoreCollector", "build_registry"]

INCIDENT_KINDS = ("engine_unreachable", "failure_storm")  # exported at 0 before the first
BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, float("inf"))
STATES = ("unknown", "healthy", "degraded", "flaky", "broken")
_SCAN_BATCH = 50_000
# PostgreSQL may commit a lower id after a higher one; re-reading a margin and skipping ids
# already counted keeps the counters exact.
_OVERLAP = 2_000


class _Folded:
    """Running totals of every result seen so far."""

    def __init__(self) -> None:
        self.watermark = 0
        self.seeded = False  # the rollups of pruned results added
        self.recent: set[int] = set()
        self.runs: dict[tuple[str, str, str], int] = defaultdict(int)
        self.seconds: dict[tuple[str, str], float] = defaultdict(float)
        self.buckets: dict[str, list[int]] = defaultdict(lambda: [0] * len(BUCKETS))
        self.dur_sum: dict[str, float] = defaultdict(float)
        self.last_seen: dict[tuple[str, str], datetime] = {}
        self.last_pass: dict[tuple[str, str], datetime] = {}


class _Counters(Protocol):
    @property
    def queued(self) -> int: ...
    @property
    def running(self) -> int: ...
    @property
    def lags(self) -> Iterable[float]: ...


class _Held(Protocol):
    @property
    def held(self) -> int: ...
    @property
    def dropped(self) -> int: ...


class LiveSchedule(Protocol):
    """What the daemon hands the collector of its scheduler (the scheduler itself fits): read
    at scrape time, so the metrics module never imports or drives the scheduler."""

    @property
    def catalogue(self) -> Catalogue: ...
    @property
    def stats(self) -> _Counters: ...
    @property
    def writes(self) -> _Held: ...
    def jobs(self) -> Sized: ...


class StoreCollector(Collector):
    def __init__(self, store: Store, scheduler: LiveSchedule | None = None,
                 now: Any = time.time) -> None:
        self._store = store
        self._scheduler = scheduler
        self._now = now
        self._lock = threading.Lock()
        self._folded = _Folded()

    # --- incremental scan of results -------------------------------------------------------

    def _fold(self, suite_of: dict[str, str]) -> None:
        table: Any = ProbeResultRow.__table__  # type: ignore[attr-defined]
        f = self._folded
        start = max(f.watermark - _OVERLAP, 0)
        # One view of the store for the pass: a prune moves results into the rollups in one
        # transaction, so the first pass counts each pruned result once, from the rollups.
        with self._store.snapshot() as conn:
            if not f.seeded:
                self._seed(conn, suite_of)
            self._scan(conn, table, start, suite_of)
        f.recent = {i for i in f.recent if i > f.watermark - _OVERLAP}

    def _seed(self, conn: Connection, suite_of: dict[str, str]) -> None:
        """Start from the results pruned before this collector started (their rollups)."""
        f = self._folded
        f.seeded = True
        bounds = (*DURATION_BOUNDS, float("inf"))
        for t in rollup_totals(conn):
            suite = suite_of.get(t.env_id, "")
            f.runs[(suite, t.kind, t.status)] += t.count
            f.seconds[(suite, t.kind)] += t.duration_sum
            f.dur_sum[t.kind] += t.duration_sum
            counts = f.buckets[t.kind]
            for i, bound in enumerate(BUCKETS):  # each of them is one of DURATION_BOUNDS
                counts[i] += sum(n for b, n in zip(bounds, t.buckets, strict=True) if b <= bound)
            key = (t.env_id, t.kind)
            f.last_seen[key] = max(f.last_seen.get(key, t.last_at), t.last_at)
            if t.status == "pass":
                f.last_pass[key] = max(f.last_pass.get(key, t.last_at), t.last_at)

    def _scan(self, conn: Connection, table: Any, start: int, suite_of: dict[str, str]) -> None:
        f = self._folded
        while True:  # pages through new rows, not a retry
            query = (sa_select(table.c.id, table.c.env_id, table.c.kind, table.c.status,
                               table.c.duration_s, table.c.started_at)
                     .where(table.c.id > start).order_by(table.c.id).limit(_SCAN_BATCH))
            rows = conn.execute(query).all()
            for rid, env_id, kind, status, duration, started_raw in rows:
                if rid <= f.watermark and rid in f.recent:
                    continue
                f.recent.add(rid)
                suite = suite_of.get(env_id, "")
                f.runs[(suite, kind, status)] += 1
                f.seconds[(suite, kind)] += duration
                f.dur_sum[kind] += duration
                counts = f.buckets[kind]
                for i, bound in enumerate(BUCKETS):
                    if duration <= bound:
                        counts[i] += 1
                started = started_raw if started_raw.tzinfo else started_raw.replace(tzinfo=UTC)
                key = (env_id, kind)
                if key not in f.last_seen or started > f.last_seen[key]:
                    f.last_seen[key] = started
                if status == "pass" and (key not in f.last_pass or started > f.last_pass[key]):
                    f.last_pass[key] = started
                f.watermark = max(f.watermark, rid)
            if len(rows) < _SCAN_BATCH:
                break
            start = rows[-1][0]

    # --- collect ------------------------------------------------------------------------

    def collect(self) -> Iterable[Metric]:
        states = self._store.env_states()
        with self._lock:
            envs = self._store.environments()
            suite_of = {e.id: e.suite for e in envs}
            self._fold(suite_of)
            yield from self._probe_metrics(suite_of, {r.env_id for r in states if r.quarantined})
        yield from self._state_metrics(states)
        yield from self._datasource_metrics()
        yield from self._hack_metrics()
        yield from self._feed_metrics()
        yield from self._scheduler_metrics()
        up = GaugeMetricFamily("envcheck_up", "1 while envcheck answers scrapes")
        up.add_metric([], 1.0)
        yield up

    def _scheduled(self, quarantined: set[str]) -> dict[tuple[str, str], float] | None:
        """(env, kind) -> interval in force now, for what the daemon schedules; None when
        this collector has no scheduler (then every stored result counts)."""
        if self._scheduler is None:
            return None
        scheduled: dict[tuple[str, str], float] = {}
        for env in self._scheduler.catalogue.environments:
            for kind in env.declared_kinds():
                interval = env.schedules.interval(kind, env.id in quarantined)
                if interval is not None:
                    scheduled[(env.id, str(kind))] = interval
        return scheduled

    def _probe_metrics(self, suite_of: dict[str, str], quarantined: set[str]
                       ) -> Iterable[Metric]:
        f = self._folded
        runs = CounterMetricFamily("envcheck_probe_results", "Probe results by outcome",
                                   labels=["suite", "kind", "status"])
        for (suite, kind, status), n in sorted(f.runs.items()):
            runs.add_metric([suite, kind, status], n)
        yield runs
        cost = CounterMetricFamily("envcheck_sandbox_seconds",
                                   "Seconds spent probing (the cost of checking)",
                                   labels=["suite", "kind"])
        for (suite, kind), seconds in sorted(f.seconds.items()):
            cost.add_metric([suite, kind], seconds)
        yield cost
        hist = HistogramMetricFamily("envcheck_probe_duration_seconds",
                                     "Duration of one probe", labels=["kind"])
        for kind, counts in sorted(f.buckets.items()):
            bounds = [("+Inf" if b == float("inf") else str(b), c)
                      for b, c in zip(BUCKETS, counts, strict=True)]
            hist.add_metric([kind], bounds, f.dur_sum[kind])
        yield hist
        now = self._now()
        # The stalest environment of a suite and kind, against the longest interval in force
        # there: what the StaleResults alert compares. Only what is scheduled now counts: an
        # environment removed from the catalogue, or a kind turned off, does not age forever.
        scheduled = self._scheduled(quarantined)
        oldest: dict[tuple[str, str], float] = {}
        newest_pass: dict[tuple[str, str], float] = {}
        for (env_id, kind), at in f.last_seen.items():
            if scheduled is not None and (env_id, kind) not in scheduled:
                continue
            key = (suite_of.get(env_id, ""), kind)
            age = now - at.timestamp()
            oldest[key] = max(oldest.get(key, 0.0), age)
        for (env_id, kind), at in f.last_pass.items():
            key = (suite_of.get(env_id, ""), kind)
            newest_pass[key] = max(newest_pass.get(key, 0.0), at.timestamp())
        age = GaugeMetricFamily("envcheck_oldest_result_age_seconds",
                                "Age of the newest result of the suite's stalest scheduled "
                                "environment, per probe kind", labels=["suite", "kind"])
        for key, value in sorted(oldest.items()):
            age.add_metric(list(key), value)
        yield age
        if scheduled is not None:
            longest: dict[tuple[str, str], float] = {}
            for (env_id, kind), interval in scheduled.items():
                key = (suite_of.get(env_id, ""), kind)
                longest[key] = max(longest.get(key, 0.0), interval)
            interval_metric = GaugeMetricFamily(
                "envcheck_probe_interval_seconds",
                "Longest probe interval in force in the suite for this kind (quarantined "
                "environments are probed more slowly)", labels=["suite", "kind"])
            for key, value in sorted(longest.items()):
                interval_metric.add_metric(list(key), value)
            yield interval_metric
        last = GaugeMetricFamily("envcheck_last_success_timestamp_seconds",
                                 "When a probe of this suite and kind last passed",
                                 labels=["suite", "kind"])
        for key, value in sorted(newest_pass.items()):
            last.add_metric(list(key), value)
        yield last

    def _state_metrics(self, rows: list[EnvStateRow]) -> Iterable[Metric]:
        state = GaugeMetricFamily("envcheck_environment_state",
                                  "1 for the environment's current state",
                                  labels=["env", "suite", "state"])
        quarantined = GaugeMetricFamily("envcheck_environment_quarantined",
                                        "1 while the environment is quarantined",
                                        labels=["env", "suite", "source"])
        per_suite: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(STATES, 0))
        q_suite: dict[str, int] = defaultdict(int)
        for r in rows:
            state.add_metric([r.env_id, r.suite, r.state], 1.0)
            quarantined.add_metric([r.env_id, r.suite, r.q_source or ""],
                                   1.0 if r.quarantined else 0.0)
            per_suite[r.suite][r.state] = per_suite[r.suite].get(r.state, 0) + 1
            q_suite[r.suite] += int(r.quarantined)
        yield state
        yield quarantined
        counts = GaugeMetricFamily("envcheck_suite_environments", "Environments by state",
                                   labels=["suite", "state"])
        for suite, by_state in sorted(per_suite.items()):
            for name, n in sorted(by_state.items()):
                counts.add_metric([suite, name], n)
        yield counts
        q = GaugeMetricFamily("envcheck_suite_quarantined", "Quarantined environments",
                              labels=["suite"])
        for suite, n in sorted(q_suite.items()):
            q.add_metric([suite], n)
        yield q
        yield self._healthy_fraction()

    def _healthy_fraction(self) -> Metric:
        from envcheck.feed.allowlist import allowlist

        fraction = GaugeMetricFamily("envcheck_suite_healthy_fraction",
                                     "Share of the suite schedulers may use now",
                                     labels=["suite"])
        generation = self._store.generation()
        for suite in self._store.suites():
            fraction.add_metric([suite.id],
                                allowlist(self._store, suite.id, generation).healthy_fraction)
        return fraction

    def _datasource_metrics(self) -> Iterable[Metric]:
        latest: dict[str, tuple[datetime, dict[str, Any]]] = {}
        for result in self._store.latest_results(kinds=[ProbeKind.DATASOURCE]):
            for source_id, info in (result.details.get("sources") or {}).items():
                if source_id not in latest or result.started_at > latest[source_id][0]:
                    latest[source_id] = (result.started_at, info)
        up = GaugeMetricFamily("envcheck_datasource_up", "1 when the last probe passed",
                               labels=["source"])
        avail = GaugeMetricFamily("envcheck_datasource_availability_ratio",
                                  "Share of good samples in the last probe", labels=["source"])
        # `stat`, not `quantile`: that label belongs to summaries (promtool check metrics),
        # and these are one probe's statistics, not a running summary.
        latency = GaugeMetricFamily("envcheck_datasource_latency_seconds",
                                    "Latency of the last probe's good samples (p50, p95, max)",
                                    labels=["source", "stat"])
        drift = GaugeMetricFamily("envcheck_datasource_schema_drift",
                                  "1 while the response shape differs from the accepted one",
                                  labels=["source"])
        for source_id, (_, info) in sorted(latest.items()):
            up.add_metric([source_id], 1.0 if info.get("status") == "pass" else 0.0)
            if info.get("availability") is not None:
                avail.add_metric([source_id], float(info["availability"]))
            for key in ("p50", "p95", "max"):
                value = (info.get("latency_ms") or {}).get(key)
                if value is not None:
                    latency.add_metric([source_id, key], float(value) / 1000)
            drift.add_metric([source_id], 1.0 if info.get("reason") == "schema_drift" else 0.0)
        yield from (up, avail, latency, drift)

    def _hack_metrics(self) -> Iterable[Metric]:
        """The adversarial controls: which environments a known trick cheats, and with what."""
        tricks = GaugeMetricFamily("envcheck_reward_hackable_tricks",
                                   "1 for each trick that earned the reward in the newest tests "
                                   "result of an environment", labels=["env", "trick"])
        hackable = 0
        for result in self._store.latest_results(kinds=[ProbeKind.TESTS]):
            if result.reason is Reason.REWARD_HACKABLE:
                hackable += 1
                for trick in (result.details.get("adversarial") or {}).get("rewarded", []):
                    tricks.add_metric([result.env_id, str(trick)], 1.0)
        fleet = GaugeMetricFamily("envcheck_reward_hackable_environments",
                                  "Environments whose newest tests result is reward_hackable")
        fleet.add_metric([], hackable)
        yield from (tricks, fleet)

    def _feed_metrics(self) -> Iterable[Metric]:
        incidents = CounterMetricFamily("envcheck_incidents",
                                        "Check cycles judged infrastructure incidents",
                                        labels=["kind"])
        table: Any = IncidentRow.__table__  # type: ignore[attr-defined]
        with self._store.engine.connect() as conn:
            counts: dict[str, int] = dict.fromkeys(INCIDENT_KINDS, 0)
            rows = conn.execute(sa_select(table.c.kind, func.count()).group_by(table.c.kind))
            counts.update({str(kind): int(n) for kind, n in rows})
        for kind, n in sorted(counts.items()):
            incidents.add_metric([kind], n)
        yield incidents
        generation = GaugeMetricFamily("envcheck_feed_generation",
                                       "Newest transition id of the quarantine feed")
        generation.add_metric([], self._store.generation())
        yield generation

    def _scheduler_metrics(self) -> Iterable[Metric]:
        if self._scheduler is None:
            return
        stats = self._scheduler.stats
        depth = GaugeMetricFamily("envcheck_scheduler_queue_depth", "Probes waiting to run")
        depth.add_metric([], stats.queued)
        running = GaugeMetricFamily("envcheck_scheduler_running", "Probes running now")
        running.add_metric([], stats.running)
        lags = list(stats.lags)
        lag = GaugeMetricFamily("envcheck_scheduler_lag_seconds",
                                "Delay from due to started over the recent probes (p50, p95, max)",
                                labels=["stat"])
        if lags:
            for stat, q in (("p50", 0.5), ("p95", 0.95)):
                lag.add_metric([stat], percentile(lags, q))
            lag.add_metric(["max"], max(lags))
        jobs = GaugeMetricFamily("envcheck_scheduled_jobs", "Scheduled (environment, kind) jobs")
        jobs.add_metric([], len(self._scheduler.jobs()))
        writes = self._scheduler.writes
        held = GaugeMetricFamily("envcheck_store_held_results",
                                 "Results the store refused, held to be written when it "
                                 "takes writes again")
        held.add_metric([], writes.held)
        lost = CounterMetricFamily("envcheck_store_dropped_results",
                                   "Held results dropped: over the bound, or refused for "
                                   "their data")
        lost.add_metric([], writes.dropped)
        yield from (depth, running, lag, jobs, held, lost)


def build_registry(store: Store, scheduler: LiveSchedule | None = None) -> CollectorRegistry:
    """A fresh registry (never the global one) holding envcheck's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, scheduler))
    return registry
