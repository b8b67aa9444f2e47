"""The budget of sandbox-seconds: its bookkeeping and what a probe is worth (pure), the work
queue's deferral, the scheduler spending a suite's budget and saying what it could not afford
(a fake check, the real store and metrics), and the daemon's options for it."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue, Environment
from envcheck.core.results import ProbeKind
from envcheck.executors.local import LocalExecutor
from envcheck.feed.assess import StoreAssessment
from envcheck.metrics import StoreMetrics
from envcheck.schedule.budget import (
    NEW,
    NORMAL,
    QUARANTINED,
    STALE,
    SUSPECT,
    WINDOW_S,
    Budget,
    BudgetLimits,
    worth,
)
from envcheck.schedule.scheduler import ProbeScheduler
from envcheck.schedule.workqueue import WorkQueue
from envcheck.store import Store, open_store
from tests.conftest import envcheck_cmd
from tests.polling import wait_for
from tests.test_scheduler import FakeChecks, NoRuntime, fake, fast_schedules  # noqa: F401

T = ProbeKind.TERMINAL

# --- the budget (pure) ---------------------------------------------------------------------


def test_spend_over_the_last_hour_within_every_budget_that_applies() -> None:
    budget = Budget(BudgetLimits(fleet=100.0, suites={"small": 10.0}))
    assert budget.affordable("small", 500.0, 0.0), "nothing spent: any work runs, alone"
    budget.charge("big", 60.0, 0.0)
    assert budget.affordable("big", 40.0, 1.0) and not budget.affordable("big", 41.0, 1.0)
    budget.charge("small", 8.0, 10.0)
    assert not budget.affordable("small", 3.0, 11.0), "the suite's own budget"
    assert budget.affordable("small", 2.0, 11.0)
    assert (budget.spent(11.0), budget.spent(11.0, "small")) == (68.0, 8.0)
    # the hour slides: what was spent an hour ago no longer counts
    assert budget.spent(WINDOW_S + 0.5) == 8.0
    assert budget.affordable("big", 90.0, WINDOW_S + 0.5)
    assert budget.total_s == 68.0


def test_running_work_counts_with_its_estimate() -> None:
    budget = Budget(BudgetLimits(fleet=100.0))
    budget.start("s", 70.0)
    assert not budget.affordable("s", 40.0, 0.0)
    budget.end("s", 70.0)
    budget.charge("s", 65.0, 0.0)
    assert budget.affordable("s", 35.0, 0.0) and not budget.affordable("s", 36.0, 0.0)
    [fleet] = budget.lines(0.0, {"s": 2})
    assert (fleet.suite, fleet.limit_s, fleet.spent_s, fleet.backlog) == (None, 100.0, 65.0, 2)


def test_no_budget_affords_everything_and_bad_budgets_are_refused() -> None:
    budget = Budget(BudgetLimits())
    budget.charge("s", 1e9, 0.0)
    assert budget.affordable("s", 1e9, 1.0) and not budget.limits.limited
    with pytest.raises(ValueError, match="above 0"):
        BudgetLimits(fleet=0.0)
    with pytest.raises(ValueError, match="budget of train"):
        BudgetLimits(suites={"train": -5.0})


def test_worth_new_then_stale_then_suspect_then_the_rest_quarantined_last() -> None:
    def w(**flags: bool) -> int:
        return worth(**{"new": False, "stale": False, "suspect": False, "quarantined": False,
                        **flags})
    assert w(new=True) == NEW < w(stale=True) == STALE < w(suspect=True) == SUSPECT < w() \
        == NORMAL < w(quarantined=True, new=True) == QUARANTINED


# --- the work queue defers --------------------------------------------------------------------


def env(env_id: str, suite: str = "s") -> Environment:
    return Environment(id=env_id, image=f"img-{env_id}", suite=suite)


def test_the_queue_defers_what_cannot_be_afforded_and_ranks_it_anew() -> None:
    queue = WorkQueue(per_image=4)
    envs = {e.id: e for e in (env("a", "poor"), env("b", "poor"), env("c"))}
    for i, env_id in enumerate(("a", "b", "c")):
        assert queue.put(NORMAL, float(i), env_id, T)
    poor = {"poor"}

    def afford(work: object, e: Environment) -> bool:
        return e.suite not in poor

    taken = queue.take(envs.get, afford)
    assert taken is not None and taken[0].env_id == "c"
    assert queue.take(envs.get, afford) is None
    assert sorted(w.env_id for w in queue.deferred) == ["a", "b"]
    assert (queue.queued, queue.deferred_total) == (2, 2)
    assert not queue.put(NORMAL, 9.0, "a", T), "deferred is still queued: its next due waits"
    # refused again after a release: counted once
    assert queue.release_deferred(lambda w: NORMAL) == 2
    assert queue.take(envs.get, afford) is None and queue.deferred_total == 2
    # the budget has room again; ranked anew, b now comes first
    poor.clear()
    queue.release_deferred(lambda w: STALE if w.env_id == "b" else NORMAL)
    order = [queue.take(envs.get, afford) for _ in range(2)]
    assert [t[0].env_id for t in order if t is not None] == ["b", "a"]
    assert queue.deferred_count == 0


def test_clear_drops_deferred_work_too() -> None:
    queue = WorkQueue(per_image=1)
    assert queue.put(NORMAL, 0.0, "a", T)
    assert queue.take({"a": env("a")}.get, lambda w, e: False) is None
    assert queue.clear() == 1 and queue.deferred == []
    assert ("a", T) not in queue


# --- the scheduler spends a suite's budget ------------------------------------------------------


def two_suites(path: Path) -> Catalogue:
    path.write_text("""version: 1
suites:
  poor:
    defaults:
      schedules: {terminal: null, dependencies: null, tests: null, datasource: null}
    environments:
      - {id: p1, image: img-p1}
      - {id: p2, image: img-p2}
  rich:
    defaults:
      schedules: {terminal: null, dependencies: null, tests: null, datasource: null}
    environments:
      - {id: r1, image: img-r1}
""", encoding="utf-8")
    return load_catalogue([path])


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setenv("ENVCHECK_EXPORT_DIR", str(tmp_path / "exports"))
    with open_store(f"sqlite:///{tmp_path / 'envcheck.db'}") as s:
        yield s


def test_a_spent_suite_waits_the_others_run_and_the_daemon_says_so(
        tmp_path: Path, store: Store, fake: FakeChecks,  # noqa: F811
        caplog: pytest.LogCaptureFixture) -> None:
    catalogue = two_suites(tmp_path / "c.yaml")
    # a fake probe takes 0.01 s: p1's spends the poor suite's budget; p2, never probed, is
    # expected to cost a minute, more than is left
    scheduler = ProbeScheduler(catalogue, LocalExecutor(NoRuntime()), store,
                               concurrency=1, window_s=3600.0,
                               assessment=StoreAssessment(store),
                               budget=BudgetLimits(suites={"poor": 0.015}))
    try:
        scheduler.start()
        assert scheduler.enqueue_now("p1", T)
        wait_for(lambda: fake.finished == ["p1"], timeout_s=15.0, what="p1", interval_s=0.01)
        assert scheduler.enqueue_now("p2", T) and scheduler.enqueue_now("r1", T)
        wait_for(lambda: "r1" in fake.finished, timeout_s=15.0, what="r1", interval_s=0.01)
        wait_for(lambda: scheduler.stats.budget[0].backlog == 1, timeout_s=15.0,
                 what="p2 deferred", interval_s=0.01)
        assert fake.order() == ["p1", "r1"], "the rich suite ran; p2 waits"
        assert not scheduler.enqueue_now("p2", T), "deferred work is still queued"
        fleet, poor = scheduler.stats.budget
        assert (poor.suite, poor.limit_s, poor.backlog) == ("poor", 0.015, 1)
        assert poor.spent_s == pytest.approx(0.01) and fleet.limit_s is None
        assert scheduler.stats.deferred_total == 1
        with caplog.at_level(logging.WARNING, logger="envcheck.schedule.scheduler"):
            scheduler.close_window()
        [said] = [r for r in caplog.records
                  if r.getMessage() == "budget exhausted: probes deferred"]
        assert said.__dict__["deferred"] == 1
        assert said.__dict__["suites"] == {"poor": {"deferred": 1, "spent_s": 0.0,
                                                    "budget_s": 0.015}}
        exposition = StoreMetrics(store, scheduler).render().decode()
        got = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(exposition) for s in f.samples}
        assert got[("envcheck_suite_budget_backlog", (("suite", "poor"),))] == 1
        assert got[("envcheck_suite_budget_sandbox_seconds", (("suite", "poor"),))] == 0.015
        assert got[("envcheck_budget_backlog", ())] == 1
        assert got[("envcheck_budget_deferred_total", ())] == 1
        assert ("envcheck_budget_sandbox_seconds", ()) not in got, "no fleet budget"
        assert got[("envcheck_budget_spent_sandbox_seconds", ())] == pytest.approx(0.02)
    finally:
        fake.release_all()
        scheduler.stop(10)


# --- the daemon's options ----------------------------------------------------------------------


@pytest.mark.parametrize(("args", "words"), [
    (["--suite-budget", "nope=100"], "--suite-budget 'nope=100': the catalogue has no suite"),
    (["--suite-budget", "poor"], "--suite-budget 'poor': write SUITE=SECONDS"),
    (["--suite-budget", "poor=-3"], "--suite-budget 'poor=-3': write SUITE=SECONDS"),
    (["--budget", "0"], "Invalid value for '--budget'"),
])
def test_bad_budgets_stop_the_daemon_before_it_starts(tmp_path: Path, args: list[str],
                                                      words: str) -> None:
    two_suites(tmp_path / "c.yaml")
    run = subprocess.run([*envcheck_cmd(), "daemon", str(tmp_path / "c.yaml"), *args],
                         capture_output=True, text=True, timeout=60, check=False,
                         env={**os.environ, "ENVCHECK_DATA_DIR": str(tmp_path),
                              "COLUMNS": "200"})
    assert run.returncode == 2, run.stdout + run.stderr
    assert words in run.stderr, run.stderr
