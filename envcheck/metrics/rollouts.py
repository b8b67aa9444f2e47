"""The training run's rollouts in the metrics: counted per suite and outcome, the environment's
failure ratio over the last hour, the environments their evidence flags, and the rollouts
that named no environment of the catalogue.

**A running total, not a sum of the table.** The store keeps rollouts as counters per
environment, hour, image digest and outcome, added to in place, and retention deletes old
hours: a sum over the table would drop whenever an hour is pruned, and would cost a read of
the whole table per scrape. So a scrape reads only the *open* hours, grouped in the database
(by the hour index): the current one, and the one before for :data:`LATE_S` after it ended
(a batch reported a little late lands there). What each (hour, key) grew by since the last
read is added to a running total held here. An hour older than that is closed: a rollout
counted into it later counts in the store and the health model, not in these counters.
Counting starts when the metrics are made (what the open hours held then is the baseline),
as the probe counters do: a restart is a counter reset, which ``rate()`` and ``increase()``
handle, and a total never goes down, whatever is pruned. (A gauge over a fixed trailing
window, the rollouts of the last 24 hours, would survive a restart but is no counter that
``rate()`` reads, and would sum a day of rows every scrape.)

**The failure ratio over the last hour** comes from the same hourly counts, as the store
holds them (right at once after a restart): the current hour's, plus the previous hour's
weighted by the share of it that lies within the last 60 minutes (its rollouts taken as
spread evenly over it). The environment's failures over the rollouts that judge it
(:func:`~envcheck.core.rollouts.judged`).

**Flagged environments** are what the health model wrote in ``env_state.rollouts.flagged``,
with or without a transition (an environment already degraded does not move), so they are
read at every scrape: a scan of the state rows that returns only the flagged ones.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Generic, Protocol, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from envcheck.core.rollouts import Outcome, judged
from envcheck.metrics.text import FamilyText, sample_line
from envcheck.store.views.metrics import HourCount

__all__ = ["LATE_S", "OUTCOMES", "RolloutSeries", "RolloutSource"]

LATE_S = 600.0  # an hour is read for this long after it ended
HOUR = timedelta(hours=1)
OUTCOMES = tuple(str(o) for o in Outcome)  # every series exists from the start, at 0

K = TypeVar("K", bound=Hashable)


class RolloutSource(Protocol):
    """The store's reads this module needs."""

    def rollout_hour_counts(self, since: datetime, per_environment: bool
                            ) -> list[HourCount]: ...
    def unknown_rollout_hours(self, since: datetime) -> list[tuple[datetime, int]]: ...
    def rollout_flagged(self) -> list[tuple[str, str]]: ...


def hour_of(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


class Growth(Generic[K]):
    """Running totals per key, fed with hourly counts that only grow: what a count grew by
    since it was last read is added; one read lower (its rows pruned) adds nothing."""

    def __init__(self) -> None:
        self.totals: dict[K, int] = {}
        self._held: dict[datetime, dict[K, int]] = {}  # per hour, each key's count last read

    def feed(self, counts: Iterable[tuple[datetime, K, int]], baseline: bool) -> set[K]:
        """Take one read of the open hours; ``baseline``: held, not counted. The keys whose
        total moved."""
        moved: set[K] = set()
        for hour, key, n in counts:
            held = self._held.setdefault(hour, {})
            before = held.get(key)
            if before is None:
                before = n if baseline else 0
            if n > before:
                self.totals[key] = self.totals.get(key, 0) + n - before
                moved.add(key)
            held[key] = max(before, n)
        return moved

    def hour(self, hour: datetime) -> Mapping[K, int]:
        """The counts of ``hour`` as last read (empty: none, or not read)."""
        return self._held.get(hour, {})

    def forget_before(self, hour: datetime) -> None:
        for old in [h for h in self._held if h < hour]:
            del self._held[old]


def _rollout_lines(env_id: str, shown: tuple[str, tuple[tuple[str, int], ...]]) -> str:
    suite, totals = shown
    return "".join(sample_line("envcheck_environment_rollouts_total",
                               {"env": env_id, "suite": suite, "outcome": outcome}, float(n))
                   for outcome, n in totals)


def _flagged_line(env_id: str, suite: str) -> str:
    return sample_line("envcheck_environment_rollout_flagged", {"env": env_id, "suite": suite},
                       1.0)


class RolloutSeries:
    """Per suite (and per environment, optional): rollouts by outcome, the failure ratio over
    the last hour, the environments flagged; the unknown environments' rollouts."""

    def __init__(self, store: RolloutSource, per_environment: bool = True,
                 clock: Callable[[], float] = time.time) -> None:
        self.per_environment = per_environment
        self._clock = clock
        self._suites: Growth[tuple[str, str]] = Growth()  # (suite, outcome)
        self._envs: Growth[tuple[str, str]] = Growth()  # (environment, outcome)
        self._unknown: Growth[str] = Growth()
        self._env_totals: dict[str, dict[str, int]] = {}  # environment -> outcome -> total
        self._env_suite: dict[str, str] = {}
        self._read: set[datetime] = set()  # hours read at least once
        self._now = datetime.fromtimestamp(clock(), UTC)
        self.flagged: dict[str, str] = {}  # environment -> its suite
        self._env_text: FamilyText[tuple[str, tuple[tuple[str, int], ...]]] = FamilyText(
            "envcheck_environment_rollouts_total", "counter",
            "Rollouts of the environment by outcome, counted since envcheck started",
            _rollout_lines)
        self._flag_text: FamilyText[str] = FamilyText(
            "envcheck_environment_rollout_flagged", "gauge",
            "1 while the training run's rollouts flag the environment (failing well above "
            "the fleet); only flagged environments have a series", _flagged_line)
        self.refresh(store, baseline=True)  # counting starts here

    # --- refresh ---------------------------------------------------------------------------

    def refresh(self, store: RolloutSource, suite_of: Mapping[str, str] | None = None,
                baseline: bool = False) -> None:
        """Reads first, then folds: a read that fails leaves nothing half counted."""
        now = datetime.fromtimestamp(self._clock(), UTC)
        current = hour_of(now)
        previous = current - HOUR
        still_open = (now - current).total_seconds() < LATE_S
        since = previous if still_open or previous not in self._read else current
        counts = store.rollout_hour_counts(since, self.per_environment)
        unknown = store.unknown_rollout_hours(since)
        flagged = store.rollout_flagged()
        self._now = now
        self._fold(counts, baseline)
        self._unknown.feed(((hour, "", n) for hour, n in unknown), baseline)
        hour = since
        while hour <= current:
            self._read.add(hour)
            hour += HOUR
        self._read = {h for h in self._read if h >= previous}
        for growth in (self._suites, self._envs, self._unknown):
            growth.forget_before(previous)  # the previous hour is kept for the ratio
        self._flag(flagged, suite_of or {})

    def _fold(self, counts: Sequence[HourCount], baseline: bool) -> None:
        if not self.per_environment:
            self._suites.feed(((c.hour, (c.suite, c.outcome), c.rollouts) for c in counts),
                              baseline)
            return
        by_suite: Counter[tuple[datetime, str, str]] = Counter()
        for c in counts:
            by_suite[(c.hour, c.suite, c.outcome)] += c.rollouts
            self._env_suite[c.env_id] = c.suite
        self._suites.feed(((hour, (suite, outcome), n)
                           for (hour, suite, outcome), n in by_suite.items()), baseline)
        moved = self._envs.feed(((c.hour, (c.env_id, c.outcome), c.rollouts) for c in counts),
                                baseline)
        for env_id, outcome in moved:
            self._env_totals.setdefault(env_id, {})[outcome] = self._envs.totals[(env_id,
                                                                                  outcome)]
        for env_id in {env_id for env_id, _ in moved}:
            self._env_text.set(env_id, (self._env_suite.get(env_id, ""),
                                        tuple(sorted(self._env_totals[env_id].items()))))

    def _flag(self, flagged: Sequence[tuple[str, str]], suite_of: Mapping[str, str]) -> None:
        now = {env_id: suite_of.get(env_id, suite) for env_id, suite in flagged}
        if self.per_environment:
            self._flag_text.drop([e for e in self.flagged if e not in now])
            for env_id, suite in now.items():
                self._flag_text.set(env_id, suite)
        self.flagged = now

    # --- families --------------------------------------------------------------------------

    def families(self, suites: Sequence[str]) -> Iterable[Metric]:
        known = sorted({*suites, *(s for s, _ in self._suites.totals)})
        counted = CounterMetricFamily(
            "envcheck_rollouts", "Rollouts the training run reported, by the environment's "
            "suite and outcome, counted since envcheck started (an hour's rollouts reported "
            "more than 10 minutes after it ended count in the store only)",
            labels=["suite", "outcome"])
        outcomes = sorted({*OUTCOMES, *(o for _, o in self._suites.totals)})
        for suite in known:
            for outcome in outcomes:
                counted.add_metric([suite, outcome], self._suites.totals.get((suite, outcome), 0))
        unknown = CounterMetricFamily(
            "envcheck_rollouts_unknown_environment",
            "Rollouts that named no environment of the catalogue, counted since envcheck "
            "started")
        unknown.add_metric([], self._unknown.totals.get("", 0))
        ratio = GaugeMetricFamily(
            "envcheck_suite_rollout_failure_ratio",
            "The environments' failures over the suite's rollouts that judge them (ok or the "
            "environment's failure), over the last hour; absent without any",
            labels=["suite"])
        judged_n = GaugeMetricFamily(
            "envcheck_suite_rollouts_last_hour",
            "The suite's rollouts over the last hour that judge the environment (ok or the "
            "environment's failure; the trainer's left out): the failure ratio's denominator",
            labels=["suite"])
        last_hour = self._last_hour()
        for suite in known:
            failed, n = judged(last_hour.get(suite, {}))
            judged_n.add_metric([suite], n)
            if n:
                ratio.add_metric([suite], failed / n)
        flagged = GaugeMetricFamily(
            "envcheck_suite_rollout_flagged_environments",
            "Environments of the suite the training run's rollouts flag (failing well above "
            "the fleet)", labels=["suite"])
        per_suite = Counter(self.flagged.values())
        for suite in sorted({*known, *per_suite}):
            flagged.add_metric([suite], per_suite[suite])
        return counted, unknown, ratio, judged_n, flagged

    def _last_hour(self) -> dict[str, dict[str, float]]:
        """Per suite, rollouts by outcome over the last 60 minutes: the current hour's and
        the share of the previous hour's within them."""
        current = hour_of(self._now)
        weight = 1.0 - (self._now - current).total_seconds() / 3600
        out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for hour, w in ((current, 1.0), (current - HOUR, weight)):
            for (suite, outcome), n in self._suites.hour(hour).items():
                out[suite][outcome] += w * n
        return out

    def environment_parts(self) -> list[bytes]:
        """The per-environment families' text (none when they are turned off)."""
        if not self.per_environment:
            return []
        return [*self._env_text.parts(), *self._flag_text.parts()]
