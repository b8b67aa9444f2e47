"""/metrics over a real store (SQLite and PostgreSQL), scraped over HTTP from the daemon's own
app on 127.0.0.1: what changed shows at the next scrape and nothing else moves, the series
follow catalogue syncs, added and deleted rows, survive a restart and the pruning of old
results, and the per-suite mode exports no environment label and the same counts.

The expectations come from the store's other readers (state rows, the allowlist, the fleet
overview), not from the metrics themselves.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from sqlalchemy import delete, func, insert, select

from envcheck.api.app import serve_in_thread
from envcheck.catalogue.models import Catalogue, Environment, Suite
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.daemon import build_app
from envcheck.feed.allowlist import allowlist
from envcheck.feed.assess import StoreAssessment, evaluate, set_quarantine_by_id
from envcheck.metrics import StoreMetrics
from envcheck.metrics.cursor import IdCursor
from envcheck.metrics.fleet import FULL_CHECK_S
from envcheck.metrics.text import sample_line
from envcheck.schedule import workers as workers_mod
from envcheck.schedule.scheduler import ProbeScheduler
from envcheck.store import Store, open_store
from envcheck.store.core_tables import RESULTS, STATES
from tests.test_api import QUARANTINED, T0, environments, seed

NOW = (T0 + timedelta(hours=3)).timestamp()
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]
COUNTERS = ("envcheck_probe_results_total", "envcheck_probe_runs_total",
            "envcheck_sandbox_seconds_total",
            "envcheck_probe_duration_seconds_bucket", "envcheck_probe_duration_seconds_sum",
            "envcheck_probe_duration_seconds_count")


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def gauges(samples: Samples) -> Samples:
    return {name: series for name, series in samples.items() if name not in COUNTERS}


def by_env(samples: Samples, name: str) -> dict[str, dict[str, Any]]:
    """env -> (labels but env, value) of a per-environment family."""
    out: dict[str, dict[str, Any]] = {}
    for labels, value in samples.get(name, {}).items():
        d = dict(labels)
        out[d.pop("env")] = {**d, "value": value}
    return out


class Fixed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


class Served:
    """The daemon's app over ``metrics``, on a free port of 127.0.0.1."""

    def __init__(self, store: Store, stack: contextlib.ExitStack, **kwargs: Any) -> None:
        self.store = store
        kwargs.setdefault("now", lambda: NOW)
        self.metrics = StoreMetrics(store, **kwargs)
        app = build_app(store, None, None, self.metrics, None)  # type: ignore[arg-type]
        self.url = stack.enter_context(serve_in_thread(app))
        self.http = stack.enter_context(requests.Session())
        self.http.trust_env = False

    def scrape(self) -> Samples:
        response = self.http.get(f"{self.url}/metrics", timeout=(2, 30))
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        return parse(response.text)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with open_store(store_url) as opened:
        seed(opened)
        yield opened


@pytest.fixture
def serve(store: Store) -> Iterator[Callable[..., Served]]:
    with contextlib.ExitStack() as stack:
        yield lambda **kwargs: Served(store, stack, **kwargs)


def expected_states(store: Store) -> dict[str, dict[str, Any]]:
    """What the per-environment series must show: the state rows, labelled with the suite
    the catalogue gave the environment."""
    suite_of = {e.id: e.suite for e in store.environments()}
    return {r.env_id: {"suite": suite_of.get(r.env_id, r.suite), "state": r.state,
                       "quarantined": r.quarantined, "source": r.q_source or ""}
            for r in store.env_states()}


def shown_states(samples: Samples) -> dict[str, dict[str, Any]]:
    states = by_env(samples, "envcheck_environment_state")
    quarantined = by_env(samples, "envcheck_environment_quarantined")
    assert states.keys() == quarantined.keys()
    assert all(s["value"] == 1.0 for s in states.values())
    return {env_id: {"suite": s["suite"], "state": s["state"],
                     "quarantined": quarantined[env_id]["value"] == 1.0,
                     "source": quarantined[env_id]["source"]}
            for env_id, s in states.items()}


def assert_suite_counts(samples: Samples, store: Store) -> None:
    """Per-suite counts agree with the fleet overview and the allowlist."""
    for overview in store.suite_overview():
        suite = overview.suite
        counts = {dict(k)["state"]: v for k, v in samples["envcheck_suite_environments"].items()
                  if dict(k)["suite"] == suite and v}
        assert counts == {s: n for s, n in overview.by_state.items() if n}, suite
        assert samples["envcheck_suite_quarantined"][(("suite", suite),)] == overview.quarantined
        manual = samples["envcheck_suite_quarantined_by_source"][
            (("source", "manual"), ("suite", suite))]
        assert manual == overview.quarantined_manual, suite
        assert samples["envcheck_suite_healthy_fraction"][(("suite", suite),)] == \
            pytest.approx(allowlist(store, suite).healthy_fraction)


def store_suites(store: Store) -> list[Suite]:
    """The stored suites, as a catalogue gives them (to sync them again)."""
    return [Suite(id=s.id, description=s.description, allow_degraded=s.allow_degraded,
                  environment_ids=tuple(store.suite_members(s.id)), file=s.file)
            for s in store.suites()]


def record(store: Store, env_id: str, status: Status, reason: Reason, at_min: float,
           kind: ProbeKind = ProbeKind.TERMINAL, details: dict[str, Any] | None = None) -> int:
    run_id = store.start_run("test", [])
    rid = store.record(run_id, ProbeResult(
        env_id=env_id, kind=kind, status=status, reason=reason, summary=str(reason),
        duration_s=0.4, image_digest=f"sha256:{env_id}", spec_hash=f"spec-{kind}",
        started_at=T0 + timedelta(minutes=at_min), details=details or {}))
    store.finish_run(run_id)
    return rid


# --- what a scrape shows, and what the next one shows -----------------------------------------


def test_a_change_shows_at_the_next_scrape_and_nothing_else_moves(
        serve: Callable[..., Served], store: Store) -> None:
    served = serve()
    first = served.scrape()
    assert shown_states(first) == expected_states(store)
    assert {e for e, s in shown_states(first).items() if s["quarantined"]} == set(QUARANTINED)
    assert_suite_counts(first, store)

    # a person quarantines one; the health model moves another (two more failures)
    set_quarantine_by_id(store, "train-ok-1", add=True, actor="alice", reason="suspect",
                         now=T0 + timedelta(hours=2))
    for minute in (30, 31):
        record(store, "eval-ok", Status.FAIL, Reason.TOOL_MISSING, minute)
    evaluate(store, [e for e in environments() if e.id == "eval-ok"],
             now=T0 + timedelta(hours=2))
    second = served.scrape()
    now_shown, before = shown_states(second), shown_states(first)
    assert now_shown == expected_states(store)
    assert now_shown["train-ok-1"] == {**before["train-ok-1"], "quarantined": True,
                                       "source": "manual"}
    assert now_shown["eval-ok"]["state"] in ("flaky", "broken") != before["eval-ok"]["state"]
    changed = {e for e in now_shown if now_shown[e] != before[e]}
    assert changed == {"train-ok-1", "eval-ok"}
    assert_suite_counts(second, store)
    # the counters count what was stored since the metrics started: the two failures
    assert second["envcheck_probe_results_total"] == {
        (("kind", "terminal"), ("status", "fail"), ("suite", "eval")): 2.0}
    assert "envcheck_probe_results_total" not in first
    assert second["envcheck_feed_generation"][()] == store.generation()


def test_restart_shows_the_same_series(serve: Callable[..., Served], store: Store) -> None:
    running = serve()
    running.scrape()
    set_quarantine_by_id(store, "eval-ok", add=True, actor="bob", reason="look",
                         now=T0 + timedelta(hours=2))
    record(store, "train-ok-2", Status.PASS, Reason.OK, 40)
    before = running.scrape()
    restarted = serve().scrape()
    assert gauges(restarted) == gauges(before)
    # counters start again with the process: a reset, which rate() and increase() expect
    assert sum(before["envcheck_probe_results_total"].values()) == 1
    assert "envcheck_probe_results_total" not in restarted


def test_catalogue_syncs_added_and_deleted_rows(serve: Callable[..., Served],
                                                store: Store) -> None:
    served = serve()
    served.scrape()
    # the catalogue moves an environment to another suite and adds one never probed
    moved = next(e for e in environments() if e.id == "train-ok-2")
    store.sync_suites(store_suites(store))  # as the daemon and envcheck check sync
    store.sync_environments([moved.model_copy(update={"suite": "eval"}),
                             Environment(id="eval-new", image="fleet/eval-new:1", suite="eval")])
    after_sync = served.scrape()
    assert shown_states(after_sync)["train-ok-2"]["suite"] == "eval"
    assert shown_states(after_sync) == expected_states(store)
    assert_suite_counts(after_sync, store)
    # its first assessment writes a state row without a transition (unknown -> unknown)
    evaluate(store, [Environment(id="eval-new", image="fleet/eval-new:1", suite="eval")])
    assert store.env_state("eval-new") is not None
    assert store.transitions(env_id="eval-new") == []
    added = served.scrape()
    assert shown_states(added)["eval-new"] == {"suite": "eval", "state": "unknown",
                                              "quarantined": False, "source": ""}
    # a state row deleted (no transition says so) takes its series with it
    with store.engine.begin() as conn:
        conn.execute(delete(STATES).where(STATES.c.env_id == "train-broken"))
    deleted = served.scrape()
    assert "train-broken" not in shown_states(deleted)
    assert shown_states(deleted) == expected_states(store)
    assert_suite_counts(deleted, store)


def test_pruned_results_change_no_series(serve: Callable[..., Served], store: Store) -> None:
    """Gauges read the newest results and the state rows; deleting older results (what a
    retention policy does) moves nothing, now or after a restart."""
    record(store, "train-ok-1", Status.PASS, Reason.REWARD_HACKABLE, 50, ProbeKind.TESTS,
           {"adversarial": {"rewarded": ["tests_rewritten", "report_forged"]}})
    served = serve()
    before = served.scrape()
    assert before["envcheck_reward_hackable_tricks"] == {
        (("env", "train-ok-1"), ("trick", t)): 1.0 for t in ("report_forged", "tests_rewritten")}
    count = select(func.count()).select_from(RESULTS)
    newest = select(func.max(RESULTS.c.id)).group_by(RESULTS.c.env_id, RESULTS.c.kind)
    with store.engine.begin() as conn:
        stored = conn.execute(count).scalar_one()
        conn.execute(delete(RESULTS).where(RESULTS.c.id.not_in(newest)))
        assert conn.execute(count).scalar_one() < stored
    assert gauges(served.scrape()) == gauges(before)
    assert gauges(serve().scrape()) == gauges(before)


def test_newest_tests_result_decides_reward_hacks(serve: Callable[..., Served],
                                                  store: Store) -> None:
    served = serve()
    record(store, "train-ok-1", Status.PASS, Reason.REWARD_HACKABLE, 50, ProbeKind.TESTS,
           {"adversarial": {"rewarded": ["early_exit"]}})
    hackable = served.scrape()
    assert hackable["envcheck_reward_hackable_tricks"] == {
        (("env", "train-ok-1"), ("trick", "early_exit")): 1.0}
    assert hackable["envcheck_suite_reward_hackable_environments"] == {
        (("suite", "train"),): 1.0, (("suite", "eval"),): 0.0}
    # an older result stored late changes nothing; a newer clean one ends it
    record(store, "train-ok-1", Status.PASS, Reason.OK, 45, ProbeKind.TESTS)
    assert served.scrape()["envcheck_reward_hackable_environments"] == {(): 1.0}
    record(store, "train-ok-1", Status.PASS, Reason.OK, 55, ProbeKind.TESTS)
    fixed = served.scrape()
    assert "envcheck_reward_hackable_tricks" not in fixed
    assert fixed["envcheck_reward_hackable_environments"] == {(): 0.0}


def test_a_suite_change_alone_shows_within_the_full_check(store: Store,
                                                          serve: Callable[..., Served]) -> None:
    """No environment added and no suite synced: the environments table's scan, at most
    FULL_CHECK_S apart, finds the move."""
    clock = [NOW]
    served = serve(now=lambda: clock[0])
    served.scrape()
    moved = next(e for e in environments() if e.id == "eval-ok")
    store.sync_environments([moved.model_copy(update={"suite": "train"})])
    assert shown_states(served.scrape())["eval-ok"]["suite"] == "eval"  # not yet
    clock[0] += FULL_CHECK_S
    after = served.scrape()
    assert shown_states(after)["eval-ok"]["suite"] == "train"
    assert_suite_counts(after, store)


def test_staleness_follows_results_and_quarantines(store: Store,
                                                  serve: Callable[..., Served]) -> None:
    """Kept up to date from what moved, it reads as a fresh start over the same store would."""
    catalogue = Catalogue(suites=(), environments=tuple(environments()), data_sources=(),
                          files=())
    scheduler = ProbeScheduler(catalogue, executor=None, store=store,  # type: ignore[arg-type]
                               assessment=StoreAssessment(store))
    served = serve(scheduler=scheduler)
    first = served.scrape()

    def same_as_fresh() -> Samples:
        now = served.scrape()
        assert gauges(now) == gauges(serve(scheduler=scheduler).scrape())
        return now

    age = "envcheck_oldest_result_age_seconds"
    interval = "envcheck_probe_interval_seconds"
    passed = "envcheck_last_success_timestamp_seconds"
    eval_terminal = (("kind", "terminal"), ("suite", "eval"))
    # the stalest terminal result of eval is renewed: the age falls to the next stalest
    stalest = min((e for e in environments() if e.suite == "eval"),
                  key=lambda e: store.history(e.id, ProbeKind.TERMINAL, 1)[0].started_at)
    record(store, stalest.id, Status.PASS, Reason.OK, 170)
    renewed = same_as_fresh()
    assert renewed[age][eval_terminal] < first[age][eval_terminal]
    assert renewed[passed][eval_terminal] == (T0 + timedelta(minutes=170)).timestamp()
    # eval's one quarantined environment is released: eval's longest interval shrinks
    assert [e for e in QUARANTINED if e.startswith("eval")] == ["eval-broken"]
    set_quarantine_by_id(store, "eval-broken", add=False, actor="alice", reason="fixed",
                         now=T0 + timedelta(hours=2))
    released = same_as_fresh()
    assert released[interval][eval_terminal] < first[interval][eval_terminal]
    set_quarantine_by_id(store, "eval-broken", add=True, actor="alice", reason="again",
                         now=T0 + timedelta(hours=2))
    assert same_as_fresh()[interval][eval_terminal] == first[interval][eval_terminal]


def test_data_sources_follow_their_newest_probe(serve: Callable[..., Served],
                                                store: Store) -> None:
    served = serve()
    served.scrape()

    def probed(env_id: str, minute: float, status: str, reason: Reason) -> None:
        info = {"status": status, "reason": str(reason), "availability": 0.5,
                "latency_ms": {"p50": 20.0, "p95": 40.0, "max": 80.0}}
        record(store, env_id, Status.PASS if status == "pass" else Status.FAIL, reason, minute,
               ProbeKind.DATASOURCE, {"sources": {"weather": info}})

    probed("train-ok-1", 60, "fail", Reason.SCHEMA_DRIFT)
    drifted = served.scrape()
    assert drifted["envcheck_datasource_schema_drift"] == {(("source", "weather"),): 1.0}
    assert drifted["envcheck_datasource_latency_seconds"][
        (("source", "weather"), ("stat", "p95"))] == 0.04
    probed("eval-ok", 61, "pass", Reason.OK)  # another environment probes it later
    recovered = served.scrape()
    assert recovered["envcheck_datasource_schema_drift"] == {(("source", "weather"),): 0.0}
    assert recovered["envcheck_datasource_up"] == {(("source", "weather"),): 1.0}
    assert gauges(serve().scrape()) == gauges(recovered)


# --- per-suite series alone -------------------------------------------------------------------


def test_per_suite_mode_has_no_environment_series(serve: Callable[..., Served],
                                                  store: Store) -> None:
    record(store, "eval-ok", Status.PASS, Reason.REWARD_HACKABLE, 50, ProbeKind.TESTS,
           {"adversarial": {"rewarded": ["early_exit"]}})
    per_env, per_suite = serve(), serve(per_environment=False)
    full, suites = per_env.scrape(), per_suite.scrape()
    assert not [(name, labels) for name, series in suites.items() for labels in series
                if "env" in dict(labels)]
    assert suites["envcheck_metrics_per_environment"] == {(): 0.0}
    assert full["envcheck_metrics_per_environment"] == {(): 1.0}
    assert {name: series for name, series in full.items()
            if not any("env" in dict(labels) for labels in series)
            and name != "envcheck_metrics_per_environment"} == \
        {name: series for name, series in suites.items()
         if name != "envcheck_metrics_per_environment"}
    assert_suite_counts(suites, store)
    assert suites["envcheck_suite_reward_hackable_environments"][(("suite", "eval"),)] == 1.0
    # and it follows changes like the other
    set_quarantine_by_id(store, "eval-ok", add=True, actor="alice", reason="suspect",
                         now=T0 + timedelta(hours=2))
    assert_suite_counts(per_suite.scrape(), store)


# --- reading by id: every row once --------------------------------------------------------------


@pytest.mark.parametrize("store_url", [pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
def test_a_result_committed_after_a_newer_one_is_counted(serve: Callable[..., Served],
                                                         store: Store) -> None:
    """PostgreSQL hands out ids when rows are inserted, not when they commit."""
    served = serve()
    served.scrape()
    row = {"run_id": store.start_run("test", []), "kind": "terminal", "status": "pass",
           "reason": "ok", "summary": "ok", "duration_s": 0.2, "image_digest": None,
           "spec_hash": "s", "started_at": T0 + timedelta(minutes=60), "evidence": [],
           "details": {}}
    with store.engine.connect() as slow:
        transaction = slow.begin()
        early = slow.execute(insert(RESULTS).values(env_id="train-ok-1", **row)
                             .returning(RESULTS.c.id)).scalar_one()
        late = record(store, "train-ok-2", Status.PASS, Reason.OK, 61)
        assert late > early
        assert sum(served.scrape()["envcheck_probe_results_total"].values()) == 1
        transaction.commit()
    counted = served.scrape()["envcheck_probe_results_total"]
    assert counted == {(("kind", "terminal"), ("status", "pass"), ("suite", "train")): 2.0}
    assert sum(served.scrape()["envcheck_probe_results_total"].values()) == 2


def test_id_cursor_reads_each_id_once_and_forgets_old_holes() -> None:
    clock = [0.0]
    cursor = IdCursor(10, hold_s=60, clock=lambda: clock[0])
    assert cursor.take([3, 11, 14]) == [11, 14]  # at or below the start: counted before
    assert cursor.holes == [12, 13]
    assert cursor.take([12, 14, 15]) == [12, 15]
    assert cursor.holes == [13]
    clock[0] = 61.0
    assert cursor.holes == []
    assert cursor.take([13]) == []  # too late: given up on
    assert Counter(cursor.take([16, 16])) == Counter([16])


def test_a_sample_line_reads_as_the_library_writes_it() -> None:
    """Label values with a quote, a backslash or a newline (none of envcheck's ids has one)
    are escaped as prometheus-client escapes them."""
    labels = {"suite": 'a"b', "env": "c\\d\ne", "state": "healthy"}
    family = GaugeMetricFamily("envcheck_environment_state", "help", labels=list(labels))
    family.add_metric(list(labels.values()), 1.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed([family]))
    written = generate_latest(registry).decode().splitlines()[-1] + "\n"
    assert sample_line("envcheck_environment_state", labels, 1.0) == written


def test_an_overload_shows_its_backlog_and_stretch(store: Store, serve: Callable[..., Served],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Work queued past its interval is the backlog, read at each window; the stretch is 1
    before any probe ran (the workers' clock is the test's: no waiting)."""
    clock = [NOW]
    monkeypatch.setattr(workers_mod, "time", SimpleNamespace(time=lambda: clock[0],
                                                             monotonic=lambda: clock[0]))
    catalogue = Catalogue(suites=(), environments=tuple(environments()), data_sources=(),
                          files=())
    scheduler = ProbeScheduler(catalogue, executor=None, store=store,  # type: ignore[arg-type]
                               assessment=StoreAssessment(store))
    served = serve(scheduler=scheduler)
    before = served.scrape()
    assert before["envcheck_scheduler_backlog"] == {(): 0.0}
    assert before["envcheck_scheduler_stretch_ratio"] == {
        (("stat", stat),): 1.0 for stat in ("p50", "p95", "max")}
    assert scheduler.enqueue_now("train-ok-1", ProbeKind.TERMINAL)  # every 300 s
    clock[0] += 500
    assert scheduler.enqueue_now("train-ok-2", ProbeKind.TERMINAL)
    clock[0] += 200
    scheduler.close_window()  # nothing ran: the window stays open, the backlog is read
    after = served.scrape()
    assert after["envcheck_scheduler_queue_depth"] == {(): 2.0}
    assert after["envcheck_scheduler_backlog"] == {(): 1.0}, "train-ok-2 waited 200 s of 300"
    assert after["envcheck_scheduler_oldest_wait_seconds"] == {(): 700.0}
