"""The training run's rollouts in the metrics: counted per suite and outcome, the environment's
failure ratio over the last hour, the environments their evidence flags, and the rollouts
that named no environment of the catalogue.

**A running total, not a sum of the table.** The store keeps rollouts as counters per
environment, hour, image digest and outcome, added to in place, and retention deletes old
hours: a sum over the table would drop whenever an hour is pruned, and would cost a read of
the whole table per scrape. So a scrape reads only the *open* hours, one statement each by
the hour index (grouped per suite in the database, or row by row per environment): the
current one, and the one before for :data:`LATE_S` after it ended (a batch reported a little
late lands there). What each (hour, key) grew by since the last read is added to a running
total held here. An hour older than that is closed: a rollout counted into it later counts
in the store and the health model, not in these counters.
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

The cost on SQLite, with every environment reporting rollouts in the open hour (two outcomes
each): 0.02 CPU-s a scrape at 10,000 environments per suite, 0.06-0.08 with
per-environment series; 0.22-0.26 and 0.55 at 100,000. Without rollouts it is the scan for
flagged environments: 0.002 CPU-s at 10,000, 0.02 at 100,000 (a third of them with rollout
evidence).
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
from envcheck.store.rollout_counts import hour_of

__all__ = ["LATE_S", "OUTCOMES", "RolloutSeries", "RolloutSource"]

LATE_S = 600.0  # an hour is read for this long after it ended
HOUR = timedelta(hours=1)
OUTCOMES = tuple(str(o) for o in Outcome)  # every series exists from the start, at 0

K = TypeVar("K", bound=Hashable)


class RolloutSource(Protocol):
    """The store's reads this module needs."""

    def rollout_hour_counts(self, hours: Sequence[datetime], per_environment: bool
                            ) -> dict[datetime, dict[tuple[str, str], int]]: ...
    def unknown_rollout_hours(self, since: datetime) -> list[tuple[datetime, int]]: ...
    def rollout_flagged(self) -> list[tuple[str, str]]: ...


class Growth(Generic[K]):
    """What hourly counts that only grow grew by since they were last read: each key's count
    held per hour; a read lower (its rows pruned) adds nothing."""

    def __init__(self) -> None:
        self._held: dict[datetime, dict[K, int]] = {}

    def feed(self, hour: datetime, counts: Mapping[K, int], baseline: bool) -> dict[K, int]:
        """Take one read of ``hour``: what each key grew by (``baseline``: held, nothing)."""
        grown: dict[K, int] = {}
        held = self._held.setdefault(hour, {})
        for key, n in counts.items():
            before = held.get(key)
            if before is None:
                held[key] = n
                if not baseline:
                    grown[key] = n
            elif n > before:  # else the usual case: nothing new (or rows pruned)
                held[key] = n
                grown[key] = n - before
        return grown

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
        # per (suite, outcome), or per (environment, outcome) with per-environment series
        self._counts: Growth[tuple[str, str]] = Growth()
        self._unknown: Growth[str] = Growth()
        self.totals: Counter[tuple[str, str]] = Counter()  # (suite, outcome): the counter
        self.unknown_total = 0
        self._env_totals: dict[str, dict[str, int]] = {}  # environment -> outcome -> total
        # per hour, (suite, outcome) -> rollouts as last read: the failure ratio's
        self._suite_hours: dict[datetime, Mapping[tuple[str, str], int]] = {}
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
        self.refresh(store, {}, baseline=True)  # counting starts here
        self._read.clear()  # the first scrape reads the hours again, knowing the suites

    # --- refresh ---------------------------------------------------------------------------

    def refresh(self, store: RolloutSource, suite_of: Mapping[str, str],
                baseline: bool = False) -> None:
        """Reads first, then folds: a read that fails leaves nothing half counted."""
        now = datetime.fromtimestamp(self._clock(), UTC)
        current = hour_of(now)
        previous = current - HOUR
        still_open = (now - current).total_seconds() < LATE_S
        hours = [previous, current] if still_open or previous not in self._read else [current]
        counts = store.rollout_hour_counts(hours, self.per_environment)
        unknown = store.unknown_rollout_hours(hours[0])
        flagged = store.rollout_flagged()
        self._now = now
        for hour in sorted({*hours, *counts}):
            self._fold(hour, counts.get(hour, {}), suite_of, baseline)
        for hour, n in unknown:
            self.unknown_total += sum(self._unknown.feed(hour, {"": n}, baseline).values())
        self._read = {h for h in {*self._read, *hours} if h >= previous}
        for growth in (self._counts, self._unknown):
            growth.forget_before(previous)  # the previous hour is kept for the ratio
        for old in [h for h in self._suite_hours if h < previous]:
            del self._suite_hours[old]
        self._flag(flagged, suite_of)

    def _fold(self, hour: datetime, counts: Mapping[tuple[str, str], int],
              suite_of: Mapping[str, str], baseline: bool) -> None:
        grown = self._counts.feed(hour, counts, baseline)
        if not self.per_environment:
            self.totals.update(grown)
            self._suite_hours[hour] = self._counts.hour(hour)
            return
        # per environment: what each grew by counts in its suite now (a moved environment's
        # earlier rollouts stay where they were counted)
        by_suite: Counter[tuple[str, str]] = Counter()
        for (env_id, outcome), n in counts.items():
            by_suite[(suite_of.get(env_id, ""), outcome)] += n
        self._suite_hours[hour] = by_suite
        for (env_id, outcome), n in grown.items():
            self.totals[(suite_of.get(env_id, ""), outcome)] += n
            totals = self._env_totals.setdefault(env_id, {})
            totals[outcome] = totals.get(outcome, 0) + n
        for env_id in {env_id for env_id, _ in grown}:
            self._env_text.set(env_id, (suite_of.get(env_id, ""),
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
        known = sorted({*suites, *(s for s, _ in self.totals)})
        counted = CounterMetricFamily(
            "envcheck_rollouts", "Rollouts the training run reported, by the environment's "
            "suite and outcome, counted since envcheck started (an hour's rollouts reported "
            "more than 10 minutes after it ended count in the store only)",
            labels=["suite", "outcome"])
        outcomes = sorted({*OUTCOMES, *(o for _, o in self.totals)})
        for suite in known:
            for outcome in outcomes:
                counted.add_metric([suite, outcome], self.totals[(suite, outcome)])
        unknown = CounterMetricFamily(
            "envcheck_rollouts_unknown_environment",
            "Rollouts that named no environment of the catalogue, counted since envcheck "
            "started")
        unknown.add_metric([], self.unknown_total)
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
            for (suite, outcome), n in self._suite_hours.get(hour, {}).items():
                out[suite][outcome] += w * n
        return out

    def environment_parts(self) -> list[bytes]:
        """The per-environment families' text (none when they are turned off)."""
        if not self.per_environment:
            return []
        return [*self._env_text.parts(), *self._flag_text.parts()]
