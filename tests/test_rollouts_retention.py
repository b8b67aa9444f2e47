"""Rollout counters kept and pruned like the result rollups, by the same prune, on SQLite and
PostgreSQL: hour rows folded into day rows past the hour retention (every rollout still
counted once), day rows deleted past the day retention, unknown hours and silent producers
deleted with the hour rows; a dry run counts it all and changes nothing."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from envcheck.core.rollouts import Outcome, Rollout
from envcheck.store import Store, open_store
from envcheck.store.core_tables import PRODUCERS
from envcheck.store.retention import Retention
from tests.conftest import envcheck_cmd
from tests.rollouts_seed import ENV_IDS, fleet, tables, totals

NOW = datetime(2026, 6, 20, 12, 0, tzinfo=UTC)
KEEP = Retention(hourly_days=2, daily_days=5)  # hour rows from 06-18 00:00, days from 06-15


def ten_days(store: Store) -> None:
    """Ten days of rollouts, every two hours, of each environment (one unknown too)."""
    at, seq, rows = NOW - timedelta(days=10), 0, []
    while at < NOW:
        for i, env_id in enumerate((*ENV_IDS, "not-in-the-catalogue")):
            outcome = Outcome.SANDBOX_LOST if (seq + i) % 5 == 0 else Outcome.OK
            rows.append(Rollout(env_id, at + timedelta(minutes=i), "run-old" if at < NOW -
                                timedelta(days=3) else "run-new", seq, outcome,
                                "sha256:a", float(seq % 2), agent_s=1.0))
            seq += 1
        at += timedelta(hours=2)
    store.record_rollouts(rows)
    # the old producer was last heard from then (the store stamps the time of the write)
    with store.engine.begin() as conn:
        conn.execute(update(PRODUCERS).where(PRODUCERS.c.producer == "run-old")
                     .values(updated_at=NOW - timedelta(days=3)))


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with open_store(store_url) as opened:
        fleet(opened)
        ten_days(opened)
        yield opened


def test_hour_rows_fold_into_days_and_every_rollout_stays_counted(store: Store) -> None:
    before = totals(store)
    day_cut = datetime(2026, 6, 15, tzinfo=UTC)
    expected: dict[tuple[str, str], int] = {}
    for r in store.rollout_rows(since=day_cut):  # all hour rows yet
        expected[(r.env_id, r.outcome)] = expected.get((r.env_id, r.outcome), 0) + r.count
    report = store.prune(KEEP, now=NOW)
    cut = datetime(2026, 6, 18, tzinfo=UTC)
    rows = store.rollout_rows()
    hours = [r for r in rows if r.period == "hour"]
    days = [r for r in rows if r.period == "day"]
    assert hours and min(r.hour for r in hours) >= cut
    # day rows from the day retention's cut (06-15) to the hour rows' (06-18), one per day,
    # environment, digest and outcome; the days before went
    assert sorted({r.hour for r in days}) == [day_cut + timedelta(days=d) for d in (0, 1, 2)]
    assert all(r.hour == r.hour.replace(hour=0) for r in days)
    assert report.rollout_hours_folded > 0 and report.rollout_days_deleted > 0
    # what is left is every rollout since the day cut, each once
    assert totals(store) == expected
    assert sum(expected.values()) < sum(before.values())
    day = next(r for r in days if r.hour == cut - timedelta(days=1) and r.outcome == "ok")
    assert day.first_at >= day.hour and day.last_at < cut
    assert day.reward_n == day.count and day.agent_s_n == day.count
    # a reader since a time inside the kept hours reads hour rows only
    assert {r.period for r in store.rollout_rows(since=cut)} == {"hour"}


def test_a_prune_folds_each_hour_once_and_a_late_rollout_joins_its_day(store: Store) -> None:
    store.prune(KEEP, now=NOW)
    once = tables(store)["rollup"]
    again = store.prune(KEEP, now=NOW)
    assert again.rollout_hours_folded == 0 and again.rollout_days_deleted == 0
    assert tables(store)["rollup"] == once
    # a rollout reported late, into an hour already folded: an hour row, then its day's
    late = datetime(2026, 6, 16, 7, 30, tzinfo=UTC)
    day_before = {(r.env_id, r.outcome): r.count for r in store.rollout_rows()
                  if r.period == "day" and r.hour == datetime(2026, 6, 16, tzinfo=UTC)}
    store.record_rollouts([Rollout("roll-a", late, "run-late", 0, Outcome.OK, "sha256:a")])
    assert any(r.period == "hour" and r.hour == late.replace(minute=0)
               for r in store.rollout_rows())
    assert store.prune(KEEP, now=NOW).rollout_hours_folded == 1
    day_after = {(r.env_id, r.outcome): r.count for r in store.rollout_rows()
                 if r.period == "day" and r.hour == datetime(2026, 6, 16, tzinfo=UTC)}
    assert day_after[("roll-a", "ok")] == day_before[("roll-a", "ok")] + 1


def test_unknown_hours_and_silent_producers_go_with_the_hour_rows(store: Store) -> None:
    n_before, _ = store.unknown_rollouts()
    report = store.prune(KEEP, now=NOW)
    n_after, ids = store.unknown_rollouts()
    assert 0 < n_after < n_before and ids == ["not-in-the-catalogue"]
    assert report.rollout_unknown_deleted > 0
    assert [p for p, _, _ in tables(store)["producer"]] == ["run-new"]
    assert report.rollout_producers_deleted == 1


def test_a_dry_run_counts_what_the_prune_does_and_changes_nothing(store: Store) -> None:
    before = tables(store)
    dry = store.prune(KEEP, now=NOW, dry_run=True)
    assert tables(store) == before
    done = store.prune(KEEP, now=NOW)
    for name in ("rollout_hours_folded", "rollout_unknown_deleted",
                 "rollout_producers_deleted"):
        assert getattr(dry, name) == getattr(done, name) > 0, name
    # the dry run counted the day rows there were; the prune also deletes those it folded
    assert 0 <= dry.rollout_days_deleted <= done.rollout_days_deleted


def test_the_prune_command_says_what_went(store: Store, store_url: str,
                                          cli_env: dict[str, str]) -> None:
    proc = subprocess.run([*envcheck_cmd(), "store", "prune", "--database", store_url,
                           "--keep-hourly", "1", "--keep-daily", "3", "--json"], env=cli_env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    # the command prunes as of now: the ten days are months old, so every row goes
    assert report["rollout_hours_folded"] > 0 and report["rollout_days_deleted"] > 0
    assert store.rollout_rows() == [] and store.unknown_rollouts() == (0, [])
    table = subprocess.run([*envcheck_cmd(), "store", "prune", "--database", store_url],
                           env=cli_env, capture_output=True, text=True, timeout=120,
                           check=False)
    assert "rollout_rollup" in table.stdout and "folded into days" in table.stdout
