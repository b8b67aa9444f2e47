"""envcheck's metrics: read from the store at scrape time (DESIGN.md lesson 6), at a cost
that follows what changed since the last scrape, not the size of the fleet.

:class:`StoreMetrics` holds what the series show between scrapes: each scrape reads the
results and transitions stored since the last one, and the state rows those transitions
name (``fleet``, ``probes``), and the training run's rollouts of the hours still open
(``rollouts``). It is a prometheus-client collector for the families of a few
series each (per suite, kind, status, data source); the families with one series per
environment are kept as text, a line per environment rendered when it changes
(:mod:`~envcheck.metrics.text`), and :meth:`StoreMetrics.render` appends them to the
registry's exposition. They can be turned off (``per_environment=False``, ``envcheck daemon
--metrics-series suite``) for per-suite counts alone, which every alert has a variant for.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from envcheck.core.memory import give_back
from envcheck.core.numbers import percentile
from envcheck.metrics.fleet import FleetSeries
from envcheck.metrics.probes import ProbeSeries
from envcheck.metrics.rollouts import RolloutSeries
from envcheck.metrics.staleness import Staleness
from envcheck.metrics.text import FamilyText, sample_line
from envcheck.store.tables.catalogue import SuiteRow

if TYPE_CHECKING:
    from envcheck.catalogue.models import Catalogue
    from envcheck.store import Store

__all__ = ["INCIDENT_KINDS", "LiveSchedule", "StoreMetrics"]

INCIDENT_KINDS = ("engine_unreachable", "failure_storm")  # exported at 0 before the first


class _BudgetLine(Protocol):
    @property
    def suite(self) -> str | None: ...
    @property
    def limit_s(self) -> float | None: ...
    @property
    def spent_s(self) -> float: ...
    @property
    def backlog(self) -> int: ...


class _Counters(Protocol):
    @property
    def queued(self) -> int: ...
    @property
    def running(self) -> int: ...
    @property
    def lags(self) -> Iterable[float]: ...
    @property
    def deferred_total(self) -> int: ...
    @property
    def budget(self) -> Sequence[_BudgetLine]: ...
    @property
    def stretches(self) -> Iterable[float]: ...
    @property
    def backlog(self) -> int: ...
    @property
    def oldest_wait_s(self) -> float: ...


class _Held(Protocol):
    @property
    def held(self) -> int: ...
    @property
    def dropped(self) -> int: ...


class LiveSchedule(Protocol):
    """What the daemon hands the metrics of its scheduler (the scheduler itself fits): read
    at scrape time, so the metrics never import or drive the scheduler."""

    @property
    def catalogue(self) -> Catalogue: ...
    @property
    def stats(self) -> _Counters: ...
    @property
    def writes(self) -> _Held: ...
    def job_count(self) -> int: ...


class StoreMetrics(Collector):
    """The metrics of one store (and the daemon's scheduler, if given). Counting of results
    starts when this object is made; everything else shows the store as it is."""

    def __init__(self, store: Store, scheduler: LiveSchedule | None = None, *,
                 per_environment: bool = True, now: Callable[[], float] = time.time,
                 registry: CollectorRegistry | None = None) -> None:
        self._store, self._scheduler, self._now = store, scheduler, now
        self._lock = threading.RLock()  # one scrape at a time: they share what is held
        self._fleet = FleetSeries(per_environment, now)
        self._probes = ProbeSeries(store)
        self._rollouts = RolloutSeries(store, per_environment, now)
        self._staleness = Staleness()
        self._tricks = FamilyText("envcheck_reward_hackable_tricks", "gauge",
                                  "1 for each trick that earned the reward in the newest "
                                  "tests result of an environment", _trick_lines)
        self._tricks_at = -1  # the probes' detail version the tricks were rendered at
        self.registry = registry or CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    @property
    def per_environment(self) -> bool:
        return self._fleet.per_environment

    def render(self) -> bytes:
        """One scrape: the exposition in the text format."""
        return b"".join(self.render_parts())

    def render_parts(self) -> list[bytes]:
        """One scrape in pieces, to be sent one after the other: the per-environment
        families' chunks as they are held, not copied into one text (17 MB at 100,000
        environments, per scrape)."""
        with self._lock:
            read = self._fleet.suites_version
            head = generate_latest(self.registry)  # collect() below refreshes
            parts = [head, *self._fleet.environment_parts(), *self._trick_parts(),
                     *self._rollouts.environment_parts()]
            if self._fleet.suites_version != read:  # everything was read again: at the
                give_back()  # first scrape, after a catalogue sync
            return parts

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            self._fleet.refresh(self._store)
            self._probes.refresh(self._store, self._fleet.suite_of)
            self._rollouts.refresh(self._store, self._fleet.suite_of)
            suites = self._store.suites()
            suite_ids = [s.id for s in suites]
            families = [*self._probe_families(), *self._fleet_families(suites),
                        *self._datasource_families(), *self._hack_families(suite_ids),
                        *self._rollouts.families(suite_ids), *self._feed_families(),
                        *self._scheduler_families()]
        yield from families
        up = GaugeMetricFamily("envcheck_up", "1 while envcheck answers scrapes")
        up.add_metric([], 1.0)
        yield up

    # --- families --------------------------------------------------------------------------

    def _probe_families(self) -> Iterable[Metric]:
        yield from self._probes.counter_families()
        scheduled, probes, fleet = self._scheduler is not None, self._probes, self._fleet
        if self._scheduler is not None:
            self._staleness.follow(self._scheduler.catalogue)
        self._staleness.update(scheduled, probes.last_seen, probes.last_pass,
                               probes.drain_touched(), fleet.suite_of, fleet.suites_version,
                               fleet.quarantined, fleet.drain_flipped())
        yield from self._staleness.families(scheduled, probes.last_seen, self._now())

    def _fleet_families(self, suites: Sequence[SuiteRow]) -> Iterable[Metric]:
        yield from self._fleet.suite_families(suites)
        mode = GaugeMetricFamily("envcheck_metrics_per_environment",
                                 "1 while per-environment series are exported; 0 with "
                                 "per-suite series alone (envcheck daemon --metrics-series)")
        mode.add_metric([], 1.0 if self.per_environment else 0.0)
        yield mode

    def _datasource_families(self) -> Iterable[Metric]:
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
        for source_id, info in sorted(self._probes.sources().items()):
            up.add_metric([source_id], 1.0 if info.get("status") == "pass" else 0.0)
            if info.get("availability") is not None:
                avail.add_metric([source_id], float(info["availability"]))
            for key in ("p50", "p95", "max"):
                value = (info.get("latency_ms") or {}).get(key)
                if value is not None:
                    latency.add_metric([source_id, key], float(value) / 1000)
            drift.add_metric([source_id], 1.0 if info.get("reason") == "schema_drift" else 0.0)
        return up, avail, latency, drift

    def _hack_families(self, suites: list[str]) -> Iterable[Metric]:
        """The adversarial controls: how many environments a known trick cheats."""
        hackable = self._probes.hackable()
        fleet = GaugeMetricFamily("envcheck_reward_hackable_environments",
                                  "Environments whose newest tests result is reward_hackable")
        fleet.add_metric([], len(hackable))
        per_suite = GaugeMetricFamily(
            "envcheck_suite_reward_hackable_environments",
            "Environments of the suite whose newest tests result is reward_hackable",
            labels=["suite"])
        counts = Counter(self._fleet.suite_of.get(env_id, "") for env_id in hackable)
        for suite in sorted({*suites, *counts}):
            per_suite.add_metric([suite], counts[suite])
        return fleet, per_suite

    def _trick_parts(self) -> list[bytes]:
        """Which tricks cheat which environment: one series per environment and trick."""
        if not self.per_environment:
            return []
        if self._tricks_at != self._probes.detail_version:
            hackable = self._probes.hackable()
            self._tricks.drop([e for e in self._tricks.held() if e not in hackable])
            for env_id, tricks in hackable.items():
                self._tricks.set(env_id, tuple(tricks))
            self._tricks_at = self._probes.detail_version
        return self._tricks.parts()

    def _feed_families(self) -> Iterable[Metric]:
        incidents = CounterMetricFamily("envcheck_incidents",
                                        "Check cycles judged infrastructure incidents",
                                        labels=["kind"])
        counts: dict[str, int] = dict.fromkeys(INCIDENT_KINDS, 0)
        counts.update(self._store.incident_counts())
        for kind, n in sorted(counts.items()):
            incidents.add_metric([kind], n)
        generation = GaugeMetricFamily("envcheck_feed_generation",
                                       "Newest transition id of the quarantine feed")
        generation.add_metric([], self._store.generation())
        return incidents, generation

    def _scheduler_families(self) -> Iterable[Metric]:
        if self._scheduler is None:
            return ()
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
            _spread(lag, lags)
        jobs = GaugeMetricFamily("envcheck_scheduled_jobs", "Scheduled (environment, kind) jobs")
        jobs.add_metric([], self._scheduler.job_count())
        writes = self._scheduler.writes
        held = GaugeMetricFamily("envcheck_store_held_results",
                                 "Results the store refused, held to be written when it "
                                 "takes writes again")
        held.add_metric([], writes.held)
        lost = CounterMetricFamily("envcheck_store_dropped_results",
                                   "Held results dropped: over the bound, or refused for "
                                   "their data")
        lost.add_metric([], writes.dropped)
        return (depth, running, lag, jobs, held, lost, *_overload_families(stats),
                *_budget_families(stats))


def _trick_lines(env_id: str, tricks: tuple[str, ...]) -> str:
    return "".join(sample_line("envcheck_reward_hackable_tricks",
                               {"env": env_id, "trick": trick}, 1.0) for trick in tricks)


def _spread(family: GaugeMetricFamily, values: list[float]) -> None:
    """p50, p95 and max of ``values`` as the family's ``stat`` samples."""
    for stat, q in (("p50", 0.5), ("p95", 0.95)):
        family.add_metric([stat], percentile(values, q))
    family.add_metric(["max"], max(values))


def _overload_families(stats: _Counters) -> Iterable[Metric]:
    """An overload (schedule/overload.py): how much the probing intervals stretch, and the
    work that waits past its interval."""
    stretch = GaugeMetricFamily(
        "envcheck_scheduler_stretch_ratio",
        "Effective probing interval over the configured one, over the recent probes (p50, "
        "p95, max): time since the previous result over the interval in force; 1 before any",
        labels=["stat"])
    _spread(stretch, list(stats.stretches) or [1.0])
    backlog = GaugeMetricFamily("envcheck_scheduler_backlog",
                                "Queued probes that have waited longer than their interval "
                                "(each missed a due time: the schedule stretches)")
    backlog.add_metric([], stats.backlog)
    oldest = GaugeMetricFamily("envcheck_scheduler_oldest_wait_seconds",
                               "How long the longest-waiting queued probe has waited since it "
                               "was due")
    oldest.add_metric([], stats.oldest_wait_s)
    return stretch, backlog, oldest


def _budget_families(stats: _Counters) -> Iterable[Metric]:
    """The budget (envcheck daemon --budget, --suite-budget): what it allows per hour, what
    was spent over the last hour, and the probes waiting for it; the fleet's, then per suite
    for the suites with a budget of their own."""
    lines = list(stats.budget)
    fleet, suites = (lines[0], lines[1:]) if lines else (None, [])

    def pair(name: str, help_text: str, value: Callable[[_BudgetLine], float | None]
             ) -> Iterable[Metric]:
        whole = GaugeMetricFamily(f"envcheck_{name}", f"The fleet's {help_text}")
        each = GaugeMetricFamily(f"envcheck_suite_{name}", f"A suite's {help_text}",
                                 labels=["suite"])
        if fleet is not None and (got := value(fleet)) is not None:
            whole.add_metric([], got)
        for line in suites:
            if (got := value(line)) is not None:
                each.add_metric([line.suite or ""], got)
        return whole, each

    yield from pair("budget_sandbox_seconds", "budget: sandbox-seconds per hour (absent: none)",
                    lambda line: line.limit_s)
    yield from pair("budget_spent_sandbox_seconds",
                    "sandbox-seconds probes took over the last hour", lambda line: line.spent_s)
    yield from pair("budget_backlog", "probes waiting for the budget now",
                    lambda line: float(line.backlog))
    deferred = CounterMetricFamily("envcheck_budget_deferred",
                                   "Probes the budget deferred at least once, since envcheck "
                                   "started")
    deferred.add_metric([], stats.deferred_total)
    yield deferred

