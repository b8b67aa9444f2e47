"""Retention: pruning folds old results into rollups and deletes them, and changes no state, no
allowlist, no transition's evidence and no count a history view or a metric shows. Every store
test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import random
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine, func, insert, select, text

from envcheck.catalogue.models import Environment, Suite
from envcheck.catalogue.probe_specs import DependencySpec
from envcheck.core.results import ProbeKind, Reason, Status
from envcheck.feed.allowlist import allowlist
from envcheck.feed.assess import evaluate, set_quarantine_by_id
from envcheck.metrics import StoreMetrics
from envcheck.store import Store, open_store
from envcheck.store.copy import copy_store
from envcheck.store.core_tables import RESULTS, ROLLUPS, RUNS
from envcheck.store.database import alembic_config, normalise_url
from envcheck.store.feed import OBSERVATION_WINDOW
from envcheck.store.prune import FREE_RESERVE
from envcheck.store.retention import Retention, day_start
from envcheck.store.rollups import Histogram, duration_bucket, hourly_from
from envcheck.store.store import new_run
from envcheck.store.tables.rollups import DURATION_BOUNDS
from tests.conftest import envcheck_cmd

NOW = datetime(2025, 6, 21, 12, 0, tzinfo=UTC)
START = NOW - timedelta(days=20)
CYCLE = timedelta(minutes=30)  # the terminal probe's interval
SUITE = "ret"


def env(env_id: str, deps: bool = False) -> Environment:
    return Environment(id=env_id, image=f"demo/{env_id}:1", suite=SUITE, tools=["git"],
                       dependencies=DependencySpec(python={"requests": ""}) if deps else None)


ENVS = [env("r-healthy"), env("r-recovered"), env("r-flaky-now"), env("r-rebuilt"),
        env("r-errors"), env("r-deps", deps=True), env("r-manual")]
IDS = [e.id for e in ENVS]


def outcome(env_id: str, kind: ProbeKind, at: datetime, incident: bool) -> tuple[Status, str]:
    """What each environment's story says a probe at ``at`` gave."""
    age = NOW - at
    if incident and kind is ProbeKind.TERMINAL:
        return Status.FAIL, Reason.TIMEOUT
    if env_id == "r-recovered" and kind is ProbeKind.TERMINAL and \
            timedelta(days=18, hours=23) <= age <= timedelta(days=19):
        return Status.FAIL, Reason.TOOL_MISSING  # broken then: 19 days ago, quarantined
    if env_id == "r-flaky-now" and age < timedelta(hours=12) and int(age / CYCLE) % 2:
        return Status.FAIL, Reason.TOOL_MISSING
    if env_id == "r-errors" and int(age / CYCLE) % 10 == 0:
        return Status.ERROR, Reason.ENGINE_UNREACHABLE
    if env_id == "r-deps" and kind is ProbeKind.DEPENDENCIES and \
            timedelta(days=14) <= age <= timedelta(days=15):
        return Status.FAIL, Reason.PACKAGE_MISSING  # three times: broken, then 15 passes
    if env_id == "r-healthy" and int(age / CYCLE) % 7 == 3:
        return Status.PASS, Reason.RECOVERED_AFTER_RETRY  # a degraded pass, kept longer
    return Status.PASS, Reason.OK


def seed_history(store: Store) -> None:
    """Twenty days of results, every 30 min (dependencies every 12 h), assessed every 6 h
    as the daemon would: transitions with evidence, quarantines, an incident, a new digest."""
    store.sync_suites([Suite(id=SUITE, description="retention", allow_degraded=False,
                             environment_ids=tuple(IDS), file="ret.yaml")])
    store.sync_environments(ENVS)
    rng = random.Random(15)
    at, rows = START, []
    incident_at = START + timedelta(days=1, hours=3)  # 19 days before NOW: its rows go
    while at <= NOW:
        run = new_run("test", [])
        run.started_at, run.finished_at, run.state = at, at + timedelta(minutes=5), "finished"
        store.add_run(run)
        incident = at == incident_at
        if incident:
            store.record_incident(run.id, "failure_storm", len(IDS), len(IDS), "test storm")
        for e in ENVS:
            kinds = [ProbeKind.TERMINAL]
            if e.dependencies is not None and (at - START) % timedelta(hours=12) == timedelta():
                kinds.append(ProbeKind.DEPENDENCIES)
            for kind in kinds:
                status, reason = outcome(e.id, kind, at, incident)
                digest = "sha256:b" if e.id == "r-rebuilt" and at > NOW - timedelta(days=5) \
                    else "sha256:a"
                rows.append({"run_id": run.id, "env_id": e.id, "kind": kind.value,
                             "status": status.value, "reason": reason.value,
                             "summary": f"{status} {reason}",
                             "duration_s": round(rng.lognormvariate(0.0, 1.2), 4),
                             "image_digest": None if e.id == "r-errors" else digest,
                             "spec_hash": "spec1", "started_at": at,
                             "evidence": [{"command": "bash -lc true", "exit_code": 0,
                                           "duration_s": 0.1, "output_head": "x" * 200,
                                           "output_tail": "y" * 400, "output_bytes": 600}],
                             "details": {}})
        at += CYCLE
        if (at - START) % timedelta(hours=6) == timedelta() or at > NOW:
            with store.engine.begin() as conn:
                conn.execute(insert(RESULTS), rows)
            rows = []
            evaluate(store, ENVS, now=at)
        if at == START + timedelta(days=10):
            set_quarantine_by_id(store, "r-manual", add=True, actor="ops", reason="by hand",
                                 now=at)


@dataclass(frozen=True)
class Seen:
    """Everything a prune must leave as it was."""

    states: dict[str, dict[str, Any]]
    allowed: tuple[list[str], dict[str, str]]
    transitions: list[dict[str, Any]]
    evidence: dict[int, Any]
    buckets: list[Any]
    day_buckets: list[Any]
    digests: dict[str, Any]


def seen(store: Store) -> Seen:
    states = {r.env_id: r.model_dump(exclude={"updated_at"}) for r in store.env_states()}
    listing = allowlist(store, SUITE)
    transitions = [t.model_dump() for t in store.transitions(limit=100_000)]
    cited = {i for t in transitions for i in t["evidence"]}
    cited |= {i for s in states.values() for i in s["q_evidence"]}
    since = START - timedelta(days=1)
    until = NOW + timedelta(hours=1)
    return Seen(states, (listing.allowed, listing.excluded), transitions,
                {r.id: r for r in store.stored_results(sorted(cited))},
                sorted(store.time_buckets(IDS, since, until, 3600), key=repr),
                sorted(store.time_buckets(IDS, since, until, 86400), key=repr),
                {e: store.digest_history(e) for e in IDS})


def scrape(store: Store) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A fresh collector's probe series (what a restarted daemon would export)."""
    wanted = ("envcheck_probe_results", "envcheck_sandbox_seconds",
              "envcheck_probe_duration_seconds", "envcheck_last_success_timestamp_seconds")
    return {(s.name, tuple(sorted(s.labels.items()))): round(s.value, 6)
            for family in StoreMetrics(store, now=NOW.timestamp).collect()
            if family.name in wanted for s in family.samples}


@pytest.fixture(scope="module")
def history_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seeded history, built once (SQLite), copied per test and per backend."""
    path = tmp_path_factory.mktemp("history") / "history.db"
    with open_store(f"sqlite:///{path}") as store:
        seed_history(store)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


@pytest.fixture
def store(store_url: str, history_db: Path) -> Iterator[Store]:
    """A store holding the seeded history: the SQLite file copied, or its rows loaded into
    PostgreSQL as they are (ids included)."""
    if store_url.startswith("sqlite"):
        Path(store_url.removeprefix("sqlite:///")).write_bytes(history_db.read_bytes())
        with open_store(store_url) as opened:
            yield opened
        return
    with open_store(store_url) as opened, open_store(f"sqlite:///{history_db}") as source:
        assert copy_store(source, opened).verified
        yield opened


def raw_count(store: Store, **where: str) -> int:
    with store.engine.connect() as conn:
        query = select(func.count()).select_from(RESULTS)
        for name, value in where.items():
            query = query.where(RESULTS.c[name] == value)
        return int(conn.execute(query).scalar_one())


def folded_count(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.coalesce(func.sum(ROLLUPS.c.count), 0))
                                .where(ROLLUPS.c.period == "total")).scalar_one())


# --- the promise: nothing the health model, the feed or a reader sees changes -------------

# Hour rollups kept longer than the history here (twenty days), for tests that compare the
# fleet heatmap hour by hour over all of it (the default keeps a week of hours).
HOURS_KEPT = Retention(hourly_days=30)


def test_pruning_changes_no_state_allowlist_evidence_or_count(store: Store) -> None:
    before, metrics = seen(store), scrape(store)
    total = raw_count(store)
    assert before.transitions and before.evidence, "the history has transitions with evidence"
    assert any(s["quarantined"] for s in before.states.values())

    report = store.prune(Retention(), now=NOW)

    assert report.results_deleted > total / 3, report  # most of twenty days went
    assert report.kept_as_evidence > 0  # r-recovered's failures, 19 days old, are cited
    assert raw_count(store) + folded_count(store) == total  # each counted once
    assert evaluate(store, ENVS, now=NOW) == []  # the model sees the same: no transition
    after = seen(store)
    assert after.states == before.states
    assert after.allowed == before.allowed
    assert after.transitions == before.transitions
    assert after.evidence == before.evidence  # every cited result, in full
    # the fleet heatmap: hour by hour for the week hour rollups are kept, day by day before
    with store.engine.connect() as conn:
        mark = hourly_from(conn)
    assert mark == day_start(NOW - timedelta(days=7))
    assert [b for b in after.buckets if b.bucket >= mark] == \
        [b for b in before.buckets if b.bucket >= mark]
    assert after.day_buckets == before.day_buckets
    assert after.digests == before.digests
    assert scrape(store) == pytest.approx(metrics)  # a restarted daemon's counters
    # what the model reads is all there: the window of each environment and kind
    kept = store.history("r-healthy", ProbeKind.TERMINAL, limit=10_000)
    assert len(kept) > OBSERVATION_WINDOW
    # beyond the window: only degraded passes, kept 14 days like failures
    assert {(r.reason, r.started_at >= NOW - timedelta(days=14))
            for r in kept[OBSERVATION_WINDOW:]} == {(Reason.RECOVERED_AFTER_RETRY, True)}
    assert raw_count(store, env_id="r-deps", kind="dependencies") == 41  # twenty days, kept

    again = store.prune(Retention(), now=NOW)
    assert (again.results_deleted, again.kept_as_evidence) == (0, report.kept_as_evidence)
    assert seen(store) == after


def test_the_dependency_window_is_what_keeps_its_state(store: Store) -> None:
    """Without the window, r-deps' release would be undone: its failures (14 days old) are
    kept as evidence, but the passes that released it are older than three days."""
    [released] = [t for t in store.transitions("r-deps", limit=10) if t.was_quarantined
                  and not t.quarantined]
    assert released.at < NOW - timedelta(days=3)
    store.prune(Retention(), now=NOW)
    state = store.env_state("r-deps")
    assert state is not None and state.state == "healthy" and not state.quarantined
    deps = state.kinds["dependencies"]
    assert (deps["passes"], deps["failures"]) == (38, 3)


def test_a_prune_stopped_midway_and_run_again_counts_each_result_once(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    import envcheck.store.prune as prune_module

    before, metrics = seen(store), scrape(store)
    total = raw_count(store)
    real = prune_module.add_rollups
    calls = {"n": 0}

    def crash_on_third(conn: Any, values: list[dict[str, Any]]) -> None:
        calls["n"] += 1
        real(conn, values)
        if calls["n"] == 3:  # the rows are deleted and folded, the commit never comes
            raise KeyboardInterrupt

    monkeypatch.setattr(prune_module, "add_rollups", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        store.prune(Retention(hourly_days=HOURS_KEPT.hourly_days, batch=500), now=NOW)
    assert 0 < folded_count(store) < total
    assert raw_count(store) + folded_count(store) == total  # the third batch rolled back
    monkeypatch.setattr(prune_module, "add_rollups", real)
    store.prune(Retention(hourly_days=HOURS_KEPT.hourly_days, batch=500), now=NOW)
    assert raw_count(store) + folded_count(store) == total
    after = seen(store)
    assert (after.buckets, after.digests, after.states) == (
        before.buckets, before.digests, before.states)
    assert scrape(store) == pytest.approx(metrics)


PRUNE = """
import sys
from datetime import datetime
from envcheck.store import open_store
from envcheck.store.retention import Retention
with open_store(sys.argv[1]) as store:
    store.prune(Retention(hourly_days=30, batch=300), now=datetime.fromisoformat(sys.argv[2]))
"""


def test_two_prunes_at_once_fold_each_result_once(store: Store, store_url: str) -> None:
    """The daemon's job and a prune by hand may meet: two processes, one store."""
    import sys

    before, metrics = seen(store), scrape(store)
    total = raw_count(store)
    procs = [subprocess.Popen([sys.executable, "-c", PRUNE, store_url, NOW.isoformat()],
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    assert raw_count(store) + folded_count(store) == total
    after = seen(store)
    assert (after.buckets, after.day_buckets, after.digests) == (
        before.buckets, before.day_buckets, before.digests)
    assert scrape(store) == pytest.approx(metrics)


def test_readers_during_a_prune_see_the_same_counts(store: Store, store_url: str) -> None:
    """The heatmap and the digest history read in one snapshot: a prune committing batch
    after batch meanwhile never shows a result twice or not at all."""
    import threading

    since, until = START - timedelta(days=1), NOW + timedelta(hours=1)

    def read(reader: Store) -> tuple[list[Any], Any]:
        return (sorted(reader.time_buckets(IDS, since, until, 3600), key=repr),
                reader.digest_history("r-healthy"))

    before = read(store)
    reads: list[tuple[list[Any], Any]] = []
    done = threading.Event()
    with open_store(store_url) as reader:  # another connection pool, as another process
        def keep_reading() -> None:
            while not done.is_set():  # reads for as long as the prune runs, not a retry
                reads.append(read(reader))

        thread = threading.Thread(target=keep_reading)
        thread.start()
        try:
            report = store.prune(Retention(hourly_days=HOURS_KEPT.hourly_days, batch=100), now=NOW)
        finally:
            done.set()
            thread.join(timeout=60)
    assert report.results_deleted > 30 * 100 and len(reads) > 3
    assert all(r == before for r in reads)
    assert read(store) == before


def test_a_dry_run_counts_what_a_prune_does_and_changes_nothing(store: Store) -> None:
    total = raw_count(store)
    dry = store.prune(Retention(), now=NOW, dry_run=True)
    assert raw_count(store) == total and folded_count(store) == 0
    done = store.prune(Retention(), now=NOW)
    assert (dry.passes_deleted, dry.others_deleted, dry.kept_as_evidence, dry.runs_deleted) \
        == (done.passes_deleted, done.others_deleted, done.kept_as_evidence, done.runs_deleted)
    assert dry.rollups_written == done.rollups_written and dry.dry_run and not done.dry_run


def test_rollups_age_out_hours_first_and_days_stay_readable(store: Store) -> None:
    before = seen(store)
    store.prune(HOURS_KEPT, now=NOW)
    # eight days on, with hour rollups kept 5 days: the first days read from day rows
    later = NOW + timedelta(days=8)
    report = store.prune(Retention(passes_days=3, others_days=14, hourly_days=5,
                                   daily_days=40), now=later)
    assert report.hourly_deleted > 0
    with store.engine.connect() as conn:
        mark = hourly_from(conn)
        early = conn.execute(select(func.count()).select_from(ROLLUPS).where(
            ROLLUPS.c.period == "hour", ROLLUPS.c.start < mark)).scalar_one()
    assert (mark, early) == (day_start(later - timedelta(days=5)), 0)
    # per day, nothing changed: days before the hour horizon come from the day rows
    assert seen(store).day_buckets == before.day_buckets
    # the day rows too go in the end, the totals stay
    gone = store.prune(Retention(hourly_days=1, daily_days=1), now=NOW + timedelta(days=60))
    assert gone.daily_deleted > 0
    assert seen(store).digests == before.digests


def test_old_runs_without_results_go_and_runs_with_incidents_stay(store: Store) -> None:
    with store.engine.connect() as conn:
        runs = int(conn.execute(select(func.count()).select_from(RUNS)).scalar_one())
    report = store.prune(Retention(), now=NOW)
    incident_run = store.incidents(1)[0].run_id
    assert report.runs_deleted > 0
    assert store.run(incident_run) is not None
    with store.engine.connect() as conn:
        left = int(conn.execute(select(func.count()).select_from(RUNS)).scalar_one())
        orphans = conn.execute(select(func.count()).select_from(RESULTS).where(
            ~RESULTS.c.run_id.in_(select(RUNS.c.id)))).scalar_one()
    assert left == runs - report.runs_deleted and orphans == 0


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_pruned_store_copies_to_postgresql_with_its_rollups(history_db: Path, tmp_path: Path,
                                                              store_url: str) -> None:
    path = tmp_path / "pruned.db"
    path.write_bytes(history_db.read_bytes())
    with open_store(f"sqlite:///{path}") as source, open_store(store_url) as target:
        source.prune(Retention(hourly_days=5), now=NOW)
        report = copy_store(source, target)
        assert report.verified, report.problems()
        assert folded_count(target) == folded_count(source) > 0
        assert seen(target) == seen(source)


# --- SQLite gives the pages back ------------------------------------------------------

def pragma(path: Path, name: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"PRAGMA {name}").fetchone()[0])


def test_sqlite_file_shrinks_after_a_prune(history_db: Path, tmp_path: Path) -> None:
    path = tmp_path / "envcheck.db"
    path.write_bytes(history_db.read_bytes())
    assert pragma(path, "auto_vacuum") == 2  # a new store is made with incremental vacuum
    pages = pragma(path, "page_count")
    with open_store(f"sqlite:///{path}") as store:
        report = store.prune(Retention(), now=NOW)
    assert report.incremental_vacuum is True and report.pages_freed > 0
    # the reserve stays free for the next inserts: no more than its share of the pages in use
    free, left = pragma(path, "freelist_count"), pragma(path, "page_count")
    assert free == report.pages_kept_free <= FREE_RESERVE * (left - free) + 1
    assert left <= pages - report.pages_freed + 50  # rollups take some
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert path.stat().st_size < history_db.stat().st_size * 0.75


def test_sqlite_reuses_its_free_pages_and_gives_all_back_when_asked(
        history_db: Path, tmp_path: Path) -> None:
    """A prune that frees less than the reserve gives nothing back: the next inserts take
    those pages and the file does not grow; ``give_back_all`` leaves no page free."""
    path = tmp_path / "envcheck.db"
    path.write_bytes(history_db.read_bytes())
    url = f"sqlite:///{path}"
    with open_store(url) as store:
        store.prune(Retention(), now=NOW - timedelta(days=1), give_back_all=True)
        report = store.prune(Retention(), now=NOW)  # one more day: its pages stay free
        assert report.results_deleted > 0 and report.pages_freed == 0
        assert report.pages_kept_free == pragma(path, "freelist_count") > 0
        pages = pragma(path, "page_count")
        with store.engine.begin() as conn:  # as many new results as went, in the free pages
            rows = conn.execute(select(RESULTS).order_by(RESULTS.c.id.desc())
                                .limit(report.results_deleted)).mappings().all()
            conn.execute(insert(RESULTS), [{**r, "id": None} for r in rows])
        assert pragma(path, "page_count") == pages
        assert pragma(path, "freelist_count") < report.pages_kept_free
        everything = store.prune(Retention(), now=NOW, give_back_all=True)
    assert everything.pages_freed > 0 and pragma(path, "freelist_count") == 0
    assert everything.pages_kept_free == 0


def old_sqlite_store(path: Path) -> str:
    """A store made by an envcheck before retention: schema 0004, no incremental vacuum."""
    url = f"sqlite:///{path}"
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            command.upgrade(alembic_config(conn), "0004")
            conn.commit()
    finally:
        engine.dispose()
    return url


def test_an_older_sqlite_file_is_told_and_turned_to_incremental_vacuum(
        tmp_path: Path, data_dir: Path) -> None:
    url = old_sqlite_store(data_dir.parent / "old.db")
    with open_store(url) as store:
        assert store.prune(Retention(), now=NOW).incremental_vacuum is False
    cli = [*envcheck_cmd(), "store", "prune", "--database", url]
    told = subprocess.run(cli, capture_output=True, text=True, timeout=120, check=False)
    assert told.returncode == 0, told.stderr
    assert "envcheck store prune --vacuum" in told.stderr
    done = subprocess.run([*cli, "--vacuum"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "--vacuum" not in done.stderr
    assert pragma(data_dir.parent / "old.db", "auto_vacuum") == 2


# --- migration ------------------------------------------------------------------------

def test_a_populated_0004_store_upgrades_and_keeps_its_data(store_url: str) -> None:
    engine = create_engine(normalise_url(store_url))
    at = NOW - timedelta(days=30)

    def ts(when: datetime) -> Any:  # as each backend's column holds it
        return when.strftime("%Y-%m-%d %H:%M:%S.%f") if store_url.startswith("sqlite") \
            else when

    try:
        with engine.connect() as conn:
            command.upgrade(alembic_config(conn), "0004")
            conn.commit()
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO check_run (id, started_at, finished_at, state, trigger, host, pid,"
                " catalogue_files) VALUES ('r1', :at, :at, 'finished', 'cli', 'h', 1, '[]')"),
                {"at": ts(at)})
            for i in range(1, 501):
                conn.execute(text(
                    "INSERT INTO probe_result (id, run_id, env_id, kind, status, reason, summary,"
                    " duration_s, image_digest, spec_hash, started_at, evidence, details) VALUES"
                    " (:id, 'r1', 'e1', 'terminal', 'pass', 'ok', 's', 1.5, NULL, 'h',"
                    " :at, '[]', '{}')"), {"id": i, "at": ts(at + timedelta(minutes=i))})
            conn.execute(text(
                "INSERT INTO transition (id, env_id, at, old_state, new_state, was_quarantined,"
                " quarantined, actor, reason, evidence) VALUES (1, 'e1', :at, 'unknown',"
                " 'broken', false, true, 'envcheck', 'x', '[3, 4]')"), {"at": ts(at)})
        if engine.dialect.name == "postgresql":
            with engine.begin() as conn:
                conn.execute(text("SELECT setval('probe_result_id_seq', 501, false)"))
    finally:
        engine.dispose()
    with open_store(store_url) as store:
        assert raw_count(store) == 500
        assert [t.evidence for t in store.transitions()] == [[3, 4]]
        if store.engine.dialect.name == "postgresql":  # autovacuum keeps up with pruning
            with store.engine.connect() as conn:
                options = conn.execute(text("SELECT reloptions FROM pg_class "
                                            "WHERE relname = 'probe_result'")).scalar_one()
            assert "autovacuum_vacuum_scale_factor=0.01" in options
        report = store.prune(Retention(), now=NOW)
        # the oldest 100 are outside the window; 3 and 4 are a transition's evidence
        assert (report.results_deleted, report.kept_as_evidence) == (98, 2)
        assert {r.id for r in store.stored_results([3, 4])} == {3, 4}
        assert raw_count(store) + folded_count(store) == 500


# --- pure arithmetic ------------------------------------------------------------------

def test_histogram_percentiles_are_within_their_bucket() -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(0.5, 1.5) for _ in range(5000)]
    halves = Histogram(), Histogram()
    for i, v in enumerate(values):
        halves[i % 2].add(v)
    merged = Histogram()
    for h in halves:  # folding in two batches gives one pass' histogram
        merged.merge(h.count, h.total_s, h.max_s, h.buckets)
    whole = Histogram()
    for v in values:
        whole.add(v)
    assert merged.buckets == whole.buckets and merged.max_s == whole.max_s
    ordered = sorted(values)
    for q in (0.5, 0.95):
        exact = ordered[int(q * len(ordered))]
        estimate = merged.quantile(q)
        assert estimate is not None
        i = duration_bucket(exact)
        low = DURATION_BOUNDS[i - 1] if i else 0.0
        high = DURATION_BOUNDS[i] if i < len(DURATION_BOUNDS) else max(values)
        assert low <= estimate <= high, (q, exact, estimate)
    assert merged.quantile(1.0) == pytest.approx(max(values))
    assert Histogram().quantile(0.5) is None


def test_retention_refuses_windows_that_make_no_sense() -> None:
    with pytest.raises(ValueError, match="failures kept 2 days, less than passes"):
        Retention(passes_days=3, others_days=2)
    with pytest.raises(ValueError, match="more than 0 days"):
        Retention(passes_days=0)
    with pytest.raises(ValueError, match="day rollups"):
        Retention(hourly_days=60, daily_days=30)


def test_metric_buckets_are_sums_of_rollup_buckets() -> None:
    from envcheck.metrics.probes import BUCKETS

    assert set(BUCKETS) - {float("inf")} <= set(DURATION_BOUNDS)




# --- the command --------------------------------------------------------------------------

def envcheck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*envcheck_cmd(), *args], capture_output=True, text=True,
                          timeout=300, check=False)


def test_store_prune_dry_run_then_prune(history_db: Path, tmp_path: Path,
                                        data_dir: Path) -> None:
    import json

    path = tmp_path / "copy.db"
    path.write_bytes(history_db.read_bytes())
    url = f"sqlite:///{path}"
    with open_store(url) as store:
        total = raw_count(store)
    dry = envcheck("store", "prune", "--dry-run", "--json", "--database", url)
    assert dry.returncode == 0, dry.stderr
    would = json.loads(dry.stdout)
    assert would["dry_run"] is True and would["results_deleted"] > 0
    with open_store(url) as store:
        assert (raw_count(store), folded_count(store)) == (total, 0)
    done = envcheck("store", "prune", "--keep-failures", "3650", "--database", url)
    assert done.returncode == 0, done.stderr
    assert "envcheck store prune (done)" in done.stdout
    assert "pages given back to the file system" in done.stdout
    assert "free pages kept for the next inserts" in done.stdout
    with open_store(url) as store:
        # failures kept ten years, not 14 days: fewer went than the dry run's defaults said
        assert total - would["results_deleted"] < raw_count(store) < total
        assert raw_count(store) + folded_count(store) == total
    assert pragma(path, "freelist_count") > 0  # the reserve
    again = envcheck("store", "prune", "--give-back-all", "--database", url)
    assert again.returncode == 0, again.stderr
    assert pragma(path, "freelist_count") == 0


@pytest.mark.parametrize(("args", "says"), [
    (["--keep-passes", "5", "--keep-failures", "2"],
     "retention: failures kept 2 days, less than passes (5)"),
    (["--keep-hourly", "0"], "retention: hourly must be kept more than 0 days"),
    (["--dry-run", "--vacuum"], "--vacuum rewrites the store: not with --dry-run"),
])
def test_store_prune_bad_options_are_one_line_and_exit_2(args: list[str], says: str,
                                                         data_dir: Path) -> None:
    done = envcheck("store", "prune", *args)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error {says}")


def test_store_prune_without_a_store_is_one_line_and_exit_3(data_dir: Path) -> None:
    done = envcheck("store", "prune", "--database",
                    "postgresql://nobody:secret@127.0.0.1:1/none")
    assert done.returncode == 3
    assert len(done.stderr.strip().splitlines()) == 1 and "secret" not in done.stderr


def test_the_daemon_refuses_a_bad_retention_before_it_starts(data_dir: Path) -> None:
    from tests.conftest import DEMO

    done = envcheck("daemon", str(DEMO), "--keep-passes", "7", "--keep-failures", "3")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error retention: failures kept 3 days, less than passes (7)")


# --- the index walk finds what ranking every result finds ---------------------------------

def edge_case_rows() -> list[dict[str, Any]]:
    """Pairs with fewer, exactly and more results than the window; ties of ``started_at``
    across the window's edge; failures and degraded passes among old passes; hourly, so
    twenty days span every cutoff."""
    rows = []
    for env_id, kind, count in [("e-a", "terminal", 401), ("e-a", "dependencies", 400),
                                ("e-b", "terminal", 399), ("e-b", "tests", 450),
                                ("e-c", "datasource", 420), ("e-d", "terminal", 480),
                                ("e-e", "terminal", 405)]:
        for i in range(count):
            at = NOW - timedelta(hours=i)
            if 396 <= i <= 404:  # nine results at one instant, across the edge
                at = NOW - timedelta(hours=400)
            status, reason = Status.PASS, Reason.OK
            if i % 5 == 0:
                status, reason = Status.FAIL, Reason.TOOL_MISSING
            elif i % 7 == 0:
                reason = Reason.RECOVERED_AFTER_RETRY
            elif i % 11 == 0:
                status, reason = Status.SKIP, Reason.NOT_APPLICABLE
            rows.append({"run_id": "edges", "env_id": env_id, "kind": kind,
                         "status": status.value, "reason": reason.value, "summary": "",
                         "duration_s": 0.5, "image_digest": "sha256:a", "spec_hash": "s",
                         "started_at": at, "evidence": [], "details": {}})
    random.Random(3).shuffle(rows)  # ids in no particular order of time
    return rows


def ranked_past_window(rows: list[Any], retention: Retention) -> set[int]:
    """The oracle: rank each pair's results newest first (ties by id), keep the window,
    and of the rest what is past its retention."""
    cut = retention.cutoffs(NOW)
    pairs: dict[tuple[str, str], list[Any]] = {}
    for r in rows:
        pairs.setdefault((r.env_id, r.kind), []).append(r)
    out = set()
    for results in pairs.values():
        results.sort(key=lambda r: (r.started_at, r.id), reverse=True)
        for r in results[OBSERVATION_WINDOW:]:
            short = r.status in ("pass", "skip") and r.reason != "recovered_after_retry"
            if r.started_at < (cut.passes if short else cut.others):
                out.add(r.id)
    return out


@pytest.mark.parametrize("pairs_per_query", [2, 200])
def test_the_index_walk_prunes_exactly_what_ranking_every_result_would(
        store_url: str, pairs_per_query: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import envcheck.store.prune as prune_module

    monkeypatch.setattr(prune_module, "PAIRS_PER_QUERY", pairs_per_query)
    with open_store(store_url) as store:
        run = new_run("test", [])
        run.id, run.started_at = "edges", NOW - timedelta(days=30)
        store.add_run(run)
        with store.engine.begin() as conn:
            conn.execute(insert(RESULTS), edge_case_rows())
            stored = conn.execute(select(RESULTS.c.id, RESULTS.c.env_id, RESULTS.c.kind,
                                         RESULTS.c.status, RESULTS.c.reason,
                                         RESULTS.c.started_at)).all()
        doomed = ranked_past_window(stored, Retention())
        assert 0 < len(doomed) < len(stored) - 7 * (OBSERVATION_WINDOW - 1)

        report = store.prune(Retention(), now=NOW)

        with store.engine.connect() as conn:
            left = set(conn.execute(select(RESULTS.c.id)).scalars())
        assert left == {r.id for r in stored} - doomed
        assert report.results_deleted == len(doomed)
