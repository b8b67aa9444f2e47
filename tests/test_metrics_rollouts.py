"""/metrics of the training run's rollouts over a real store (SQLite and PostgreSQL), scraped over
HTTP from the daemon's own app on 127.0.0.1: rollouts counted per suite and outcome from when
the metrics start, counters that never drop when old hours are pruned and start again at a
restart, a late batch counted while its hour is open, the failure ratio over the last hour,
the environments rollouts flag (written without a transition), the unknown environments'
rollouts, and the per-suite mode.

Rollouts are written through ``Store.record_rollouts`` and rollout evidence through
``Store.apply``, as the ingest route and the health model write them; the expectations come
from the store's own reads (``rollout_rows``, ``unknown_rollouts``), not from the metrics.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest

from envcheck.core.rollouts import Outcome, Rollout
from envcheck.metrics.rollouts import LATE_S, OUTCOMES
from envcheck.store import Store
from envcheck.store.retention import Retention
from tests.test_api import T0
from tests.test_metrics import Samples, Served, store  # noqa: F401  (the seeded store)

HOUR = T0 + timedelta(hours=3)  # an hour of the store's seeded day
SUITES = ("eval", "train")
_seq = itertools.count()


class Clock:
    """The metrics' clock, moved by the test."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at.timestamp()


@pytest.fixture
def clock() -> Clock:
    return Clock(HOUR + timedelta(minutes=30))


@pytest.fixture
def serve(store: Store, clock: Clock) -> Iterator[Callable[..., Served]]:  # noqa: F811
    with contextlib.ExitStack() as stack:
        yield lambda **kwargs: Served(store, stack, now=clock, **kwargs)


def report(into: Store, env_id: str, at: datetime, outcomes: Mapping[Outcome, int],
           producer: str = "run-1", reward: float | None = None) -> list[Rollout]:
    """Rollouts of ``env_id`` at ``at``, counted by the store as the ingest route does."""
    batch = [Rollout(env_id, at, producer, next(_seq), outcome, reward=reward)
             for outcome, n in outcomes.items() for _ in range(n)]
    into.record_rollouts(batch)
    return batch


def stored(held: Store) -> Counter[tuple[str, str]]:
    """(suite, outcome) -> rollouts the store holds."""
    suite_of = {e.id: e.suite for e in held.environments()}
    out: Counter[tuple[str, str]] = Counter()
    for row in held.rollout_rows():
        out[(suite_of[row.env_id], row.outcome)] += row.count
    return out


def counted(samples: Samples) -> Counter[tuple[str, str]]:
    """(suite, outcome) -> envcheck_rollouts_total, zeros left out."""
    return Counter({(dict(k)["suite"], dict(k)["outcome"]): v
                    for k, v in samples["envcheck_rollouts_total"].items() if v})


def per_suite(samples: Samples, name: str) -> dict[str, float]:
    return {dict(k)["suite"]: v for k, v in samples.get(name, {}).items()}


def evidence(flagged: bool, **extra: Any) -> dict[str, Any]:
    """env_state.rollouts as the health model writes it."""
    return {"state": "degraded" if flagged else "healthy", "flagged": flagged,
            "reason": "rollout_failures" if flagged else "ok", "detail": "", "image_digest": None,
            "rollouts": 400, "env_failures": 40 if flagged else 1,
            "failure_rate": 0.1 if flagged else 0.0025, "fleet_rate": 0.003, "llr": 3.1,
            "flagged_at": None, "first_failure_at": None, "window_start": None, "notes": [],
            "confirmed": None, "by_outcome": {"ok": 360, "sandbox_lost": 40}, "reward": None,
            **extra}


def test_rollouts_are_counted_per_suite_and_outcome_from_the_start(
        store: Store, serve: Callable[..., Served], clock: Clock) -> None:  # noqa: F811
    report(store, "train-ok-1", clock.at, {Outcome.OK: 5})  # before: not counted
    before = stored(store)
    served = serve()
    first = served.scrape()
    # every suite and outcome from the start, at 0: rate() and increase() see the first ones
    assert set(first["envcheck_rollouts_total"]) == {
        (("outcome", o), ("suite", s)) for o in OUTCOMES for s in SUITES}
    assert counted(first) == Counter()
    assert first["envcheck_rollouts_unknown_environment_total"] == {(): 0.0}
    assert "envcheck_environment_rollouts_total" not in first

    batch = report(store, "train-ok-1", clock.at, {Outcome.OK: 6, Outcome.SANDBOX_LOST: 2})
    report(store, "train-ok-2", clock.at, {Outcome.AGENT_TIMEOUT: 1})
    report(store, "eval-ok", clock.at, {Outcome.VERIFIER_ERROR: 3})
    report(store, "no-such-env", clock.at, {Outcome.OK: 4})
    second = served.scrape()
    assert counted(second) == stored(store) - before == Counter({
        ("train", "ok"): 6, ("train", "sandbox_lost"): 2, ("train", "agent_timeout"): 1,
        ("eval", "verifier_error"): 3})
    assert second["envcheck_rollouts_unknown_environment_total"] == {
        (): float(store.unknown_rollouts()[0])} == {(): 4.0}
    assert second["envcheck_environment_rollouts_total"] == {
        (("env", "train-ok-1"), ("outcome", "ok"), ("suite", "train")): 6.0,
        (("env", "train-ok-1"), ("outcome", "sandbox_lost"), ("suite", "train")): 2.0,
        (("env", "train-ok-2"), ("outcome", "agent_timeout"), ("suite", "train")): 1.0,
        (("env", "eval-ok"), ("outcome", "verifier_error"), ("suite", "eval")): 3.0}
    # over the last hour (all of it in this one): the trainer's timeout is left out
    assert per_suite(second, "envcheck_suite_rollout_failure_ratio") == {
        "train": pytest.approx(2 / 13), "eval": 1.0}
    assert per_suite(second, "envcheck_suite_rollouts_last_hour") == {"train": 13.0,
                                                                      "eval": 3.0}
    # a batch sent again is counted once, by the store and so here
    store.record_rollouts(batch)
    assert served.scrape()["envcheck_rollouts_total"] == second["envcheck_rollouts_total"]


def test_counters_never_drop_when_old_hours_are_pruned(
        store: Store, serve: Callable[..., Served], clock: Clock) -> None:  # noqa: F811
    served = serve()
    report(store, "train-ok-1", clock.at, {Outcome.OK: 10})
    assert counted(served.scrape()) == Counter({("train", "ok"): 10})
    clock.at += timedelta(days=2)  # that hour is long closed
    report(store, "train-ok-1", clock.at, {Outcome.OK: 3})
    # its hour row folded into a day row, and that deleted: kept a day each
    pruned = store.prune(Retention(passes_days=1, others_days=1, hourly_days=1, daily_days=1),
                         now=clock.at)
    assert (pruned.rollout_hours_folded, pruned.rollout_days_deleted) == (1, 1)
    assert stored(store) == Counter({("train", "ok"): 3})
    after = served.scrape()
    assert counted(after) == Counter({("train", "ok"): 13})
    assert after["envcheck_environment_rollouts_total"] == {
        (("env", "train-ok-1"), ("outcome", "ok"), ("suite", "train")): 13.0}
    # a restart starts the counters again (a reset, as for the probe counters); the gauges
    # read the store, and show the same
    restarted = serve().scrape()
    assert counted(restarted) == Counter()
    for name in ("envcheck_suite_rollout_failure_ratio", "envcheck_suite_rollouts_last_hour"):
        assert restarted[name] == after[name]


def test_a_late_batch_counts_while_its_hour_is_open(
        store: Store, serve: Callable[..., Served], clock: Clock) -> None:  # noqa: F811
    clock.at = HOUR + timedelta(minutes=55)
    served = serve()
    report(store, "eval-ok", clock.at, {Outcome.OK: 4})
    clock.at = HOUR + timedelta(hours=1, minutes=5)  # the next hour, within LATE_S
    assert (clock.at - HOUR - timedelta(hours=1)).total_seconds() < LATE_S
    report(store, "eval-ok", HOUR + timedelta(minutes=58), {Outcome.OK: 2})  # late
    report(store, "eval-ok", clock.at, {Outcome.SANDBOX_LOST: 1})
    report(store, "train-ok-1", clock.at + timedelta(hours=2), {Outcome.OK: 3})  # clock ahead
    assert counted(served.scrape()) == Counter({("eval", "ok"): 6, ("eval", "sandbox_lost"): 1,
                                                ("train", "ok"): 3})
    # once its hour is closed a late batch counts in the store (and the health model) only
    clock.at = HOUR + timedelta(hours=1, minutes=20)
    report(store, "eval-ok", HOUR + timedelta(minutes=59), {Outcome.OK: 5})
    assert stored(store)[("eval", "ok")] == 11
    assert counted(served.scrape()) == Counter({("eval", "ok"): 6, ("eval", "sandbox_lost"): 1,
                                                ("train", "ok"): 3})


def test_failure_ratio_over_the_last_hour(store: Store, serve: Callable[..., Served],  # noqa: F811
                                          clock: Clock) -> None:
    previous = HOUR - timedelta(minutes=30)
    report(store, "train-ok-1", previous, {Outcome.SANDBOX_START_FAILED: 30, Outcome.OK: 70})
    report(store, "train-ok-2", clock.at, {Outcome.REWARD_MISSING: 5, Outcome.OK: 45,
                                           Outcome.AGENT_TIMEOUT: 50})
    served = serve()
    # at :30, half of the previous hour lies within the last 60 minutes
    half = served.scrape()
    assert per_suite(half, "envcheck_suite_rollout_failure_ratio") == {
        "train": pytest.approx((5 + 15) / (50 + 50))}
    assert per_suite(half, "envcheck_suite_rollouts_last_hour") == {"train": 100.0, "eval": 0.0}
    clock.at = HOUR + timedelta(minutes=45)
    quarter = served.scrape()
    assert per_suite(quarter, "envcheck_suite_rollout_failure_ratio") == {
        "train": pytest.approx((5 + 7.5) / (50 + 25))}
    assert serve().scrape()["envcheck_suite_rollout_failure_ratio"] == \
        quarter["envcheck_suite_rollout_failure_ratio"]  # read from the store: a restart agrees
    clock.at = HOUR + timedelta(hours=2)  # nothing within the last hour
    quiet = served.scrape()
    assert "envcheck_suite_rollout_failure_ratio" not in quiet
    assert per_suite(quiet, "envcheck_suite_rollouts_last_hour") == {"train": 0.0, "eval": 0.0}


def test_flagged_environments_follow_the_state_rows(store: Store,  # noqa: F811
                                                    serve: Callable[..., Served]) -> None:
    full, suites_only = serve(), serve(per_environment=False)
    assert per_suite(full.scrape(), "envcheck_suite_rollout_flagged_environments") == {
        "train": 0.0, "eval": 0.0}
    generation = store.generation()
    # the health model writes rollout evidence without a transition: no state moved
    for env_id, suite, flagged in (("train-ok-1", "train", True), ("train-ok-2", "train", True),
                                   ("eval-ok", "eval", True), ("train-deps-ok", "train", False)):
        store.apply(env_id, suite, {"rollouts": evidence(flagged)}, None)
    assert store.generation() == generation
    flagged = full.scrape()
    assert per_suite(flagged, "envcheck_suite_rollout_flagged_environments") == {
        "train": 2.0, "eval": 1.0}
    assert flagged["envcheck_environment_rollout_flagged"] == {
        (("env", "train-ok-1"), ("suite", "train")): 1.0,
        (("env", "train-ok-2"), ("suite", "train")): 1.0,
        (("env", "eval-ok"), ("suite", "eval")): 1.0}
    store.apply("train-ok-1", "train", {"rollouts": evidence(False)}, None)
    store.apply("train-ok-2", "train", {"rollouts": None}, None)
    cleared = full.scrape()
    assert per_suite(cleared, "envcheck_suite_rollout_flagged_environments") == {
        "train": 0.0, "eval": 1.0}
    assert cleared["envcheck_environment_rollout_flagged"] == {
        (("env", "eval-ok"), ("suite", "eval")): 1.0}
    alone = suites_only.scrape()
    assert per_suite(alone, "envcheck_suite_rollout_flagged_environments") == \
        per_suite(cleared, "envcheck_suite_rollout_flagged_environments")


def test_per_suite_mode_counts_the_same_without_environment_series(
        store: Store, serve: Callable[..., Served], clock: Clock) -> None:  # noqa: F811
    full, suites_only = serve(), serve(per_environment=False)
    report(store, "train-ok-1", clock.at, {Outcome.OK: 7, Outcome.VERIFIER_TIMEOUT: 1})
    report(store, "eval-ok", clock.at, {Outcome.OK: 2, Outcome.REWARD_MALFORMED: 2})
    store.apply("eval-ok", "eval", {"rollouts": evidence(True)}, None)
    a, b = full.scrape(), suites_only.scrape()
    assert not [name for name, series in b.items() for labels in series
                if "env" in dict(labels)]
    names = [n for n in a if "rollout" in n]
    assert sorted(n for n in names if n.startswith("envcheck_environment_")) == [
        "envcheck_environment_rollout_flagged", "envcheck_environment_rollouts_total"]
    for name in names:
        if not name.startswith("envcheck_environment_"):
            assert a[name] == b[name], name
    assert counted(b) == Counter({("train", "ok"): 7, ("train", "verifier_timeout"): 1,
                                  ("eval", "ok"): 2, ("eval", "reward_malformed"): 2})
