"""Contract tests of the result store: the same suite runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text, update
from sqlmodel import SQLModel, col

from envcheck.catalogue.models import Environment
from envcheck.core.errors import StoreError
from envcheck.core.results import CommandEvidence, ProbeKind, ProbeResult, Reason, Status
from envcheck.store import CheckRun, RunState, Store, default_database_url, open_store
from envcheck.store.database import (
    SCHEMA_HEAD,
    alembic_config,
    create_store_engine,
    schema_revision,
)
from envcheck.store.tables.catalogue import EnvironmentRow

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with open_store(store_url) as opened:
        yield opened


def result(
    env_id: str = "env-a",
    kind: ProbeKind = ProbeKind.TERMINAL,
    *,
    started_at: datetime = T0,
    status: Status = Status.PASS,
) -> ProbeResult:
    reason = Reason.OK if status is Status.PASS else Reason.TOOL_MISSING
    return ProbeResult(
        env_id=env_id,
        kind=kind,
        status=status,
        reason=reason,
        summary=f"{env_id} {kind} {status}",
        duration_s=0.25,
        spec_hash="abc123",
        started_at=started_at,
    )


def environment(env_id: str, image: str = "demo/ok:1") -> Environment:
    return Environment(id=env_id, image=image, suite="demo", tools=["git"])


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_migrates_an_empty_database_to_head(store_url: str) -> None:
    with open_store(store_url) as store:
        tables = set(inspect(store.engine).get_table_names())
        with store.engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
    assert tables == {"alembic_version", *SQLModel.metadata.tables}
    assert {"environment", "check_run", "probe_result"} <= tables
    assert current == ScriptDirectory.from_config(alembic_config()).get_current_head()
    with open_store(store_url) as again:  # reopening an up-to-date database is a no-op
        assert again.runs() == []


def test_a_newer_schema_is_refused(store_url: str) -> None:
    with open_store(store_url) as store, store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(StoreError, match="newer envcheck"):
        open_store(store_url)


def test_schema_head_names_the_newest_migration() -> None:
    """Opening a store at SCHEMA_HEAD skips Alembic: it must be the migrations' real head."""
    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == SCHEMA_HEAD


def test_an_older_schema_is_upgraded_to_head(store_url: str) -> None:
    head = ScriptDirectory.from_config(alembic_config()).get_revision(SCHEMA_HEAD)
    assert isinstance(head.down_revision, str)
    engine = create_store_engine(store_url)
    try:
        with engine.connect() as conn:
            assert schema_revision(conn) is None  # a new database: no alembic_version yet
            command.upgrade(alembic_config(conn), head.down_revision)
            conn.commit()
        with engine.connect() as conn:
            assert schema_revision(conn) == [head.down_revision]
    finally:
        engine.dispose()
    with open_store(store_url) as store, store.engine.connect() as conn:
        assert schema_revision(conn) == [SCHEMA_HEAD]
        assert set(inspect(conn).get_table_names()) == {"alembic_version",
                                                        *SQLModel.metadata.tables}


def test_unsupported_backend_is_refused() -> None:
    with pytest.raises(StoreError, match="unsupported database 'mysql'"):
        open_store("mysql://u:pw@127.0.0.1/db")


def test_migrated_schema_matches_the_models(store: Store) -> None:
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
    assert diff == []


OPEN_AT = """
import sys, time
from envcheck.store import open_store
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
open_store(sys.argv[1]).close()
"""


def test_concurrent_first_opens_from_processes_migrate_once(store_url: str) -> None:
    # The CLI and the daemon may open a fresh database at the same moment.
    start_at = str(time.time() + 2)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AT, store_url, start_at], stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    errors = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    with open_store(store_url) as store:
        assert store.runs() == []


def test_result_round_trips_with_evidence_and_details(store: Store) -> None:
    run_id = store.start_run("cli", ["probes/demo.yaml"])
    original = ProbeResult(
        env_id="env-a",
        kind=ProbeKind.TESTS,
        status=Status.FLAKY,
        reason=Reason.NONDETERMINISTIC,
        summary="reruns disagree",
        duration_s=12.5,
        image_digest="sha256:" + "ab" * 32,
        spec_hash="0123456789abcdef",
        started_at=datetime(2025, 3, 1, 14, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2))),
        evidence=(
            CommandEvidence("pytest -x", 1, 3.5, "head ✓", "tail", 70000, True, False),
            CommandEvidence("sleep 999", None, 60.0, timed_out=True),
        ),
        details={"flaky_tests": ["t::a", "t::b"], "reruns": 3, "nested": {"ok": None}},
    )
    result_id = store.record(run_id, original)

    [loaded] = store.results_for_run(run_id)
    assert isinstance(result_id, int)
    assert loaded == original
    assert loaded.started_at.tzinfo is UTC
    assert loaded.evidence[1].exit_code is None


def test_naive_datetimes_are_refused(store: Store) -> None:
    run_id = store.start_run("cli", [])
    with pytest.raises(StoreError, match="naive datetime"):
        store.record(run_id, result(started_at=datetime(2025, 3, 1, 12, 0)))


def test_record_needs_an_existing_run(store: Store) -> None:
    with pytest.raises(StoreError):
        store.record("no-such-run", result())


def test_latest_result_per_environment_and_kind(store: Store) -> None:
    rng = random.Random(7)
    envs = [f"env-{i}" for i in range(5)]
    recorded: list[tuple[datetime, int, ProbeResult]] = []
    for _ in range(3):
        run_id = store.start_run("daemon", [])
        for _ in range(60):
            # Coarse times make ties, which the id must break; order of insertion is shuffled
            # in time, so "latest" must follow started_at, not insertion order.
            res = result(
                rng.choice(envs),
                rng.choice(list(ProbeKind)),
                started_at=T0 + timedelta(minutes=rng.randrange(30)),
                status=rng.choice([Status.PASS, Status.FAIL]),
            )
            recorded.append((res.started_at, store.record(run_id, res), res))
        store.finish_run(run_id)

    def expected(env_ids: set[str], kinds: set[ProbeKind]) -> list[ProbeResult]:
        best: dict[tuple[str, str], tuple[datetime, int, ProbeResult]] = {}
        for entry in recorded:
            key = (entry[2].env_id, entry[2].kind.value)
            if entry[2].env_id in env_ids and entry[2].kind in kinds:
                best[key] = max(best.get(key, entry), entry, key=lambda e: (e[0], e[1]))
        return [best[key][2] for key in sorted(best)]

    assert store.latest_results() == expected(set(envs), set(ProbeKind))
    some = expected({"env-1", "env-3"}, {ProbeKind.TESTS, ProbeKind.TERMINAL})
    assert store.latest_results(["env-1", "env-3"], [ProbeKind.TESTS, ProbeKind.TERMINAL]) == some
    assert store.latest_results(env_ids=[]) == []


def test_history_is_newest_first_and_limited(store: Store) -> None:
    run_id = store.start_run("cli", [])
    times = [T0 + timedelta(seconds=s) for s in (5, 1, 9, 3, 7)]
    for at in times:
        store.record(run_id, result(started_at=at))
        store.record(run_id, result(kind=ProbeKind.DEPENDENCIES, started_at=at))
    store.record(run_id, result("env-b", started_at=T0))

    history = store.history("env-a", ProbeKind.TERMINAL)
    assert [r.started_at for r in history] == sorted(times, reverse=True)
    assert len(store.history("env-a")) == 10
    assert [r.started_at for r in store.history("env-a", limit=3)] == [times[2]] * 2 + [times[4]]
    assert store.history("env-unknown") == []


def test_concurrent_records_from_eight_threads_lose_nothing(store: Store) -> None:
    run_id = store.start_run("cli", [])
    ids: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def worker(n: int) -> None:
        barrier.wait()
        for i in range(40):
            new_id = store.record(run_id, result(f"env-{n}", started_at=T0 + timedelta(i)))
            with lock:
                ids.append(new_id)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 320
    assert len(store.results_for_run(run_id)) == 320
    assert len(store.latest_results()) == 8


def test_sync_environments_upserts(store: Store) -> None:
    store.sync_environments([environment("env-a"), environment("env-b")])
    first = {row.id: row for row in store.environments()}
    store.sync_environments([environment("env-a", image="demo/ok:2")])
    second = {row.id: row for row in store.environments()}

    assert set(second) == {"env-a", "env-b"}  # environments dropped from the YAML are kept
    assert second["env-a"].image == "demo/ok:2"
    assert second["env-a"].spec["image"] == "demo/ok:2"
    assert second["env-a"].spec["tools"] == ["git"]
    assert second["env-a"].first_seen == first["env-a"].first_seen
    assert second["env-a"].last_seen > first["env-a"].last_seen
    assert second["env-b"] == first["env-b"]
    store.sync_environments([])
    store.sync_environments([environment(f"bulk-{i}") for i in range(6000)])  # > 32766 params
    assert len(store.environments()) == 6002


def test_sync_environments_refreshes_only_last_seen_of_ids_seen_unchanged(store: Store) -> None:
    bulk = [environment(f"bulk-{i}") for i in range(1200)]  # more than one batch of ids
    store.sync_environments([environment("env-a"), environment("env-b"), *bulk])
    first = {row.id: row for row in store.environments()}
    with store.engine.begin() as conn:  # not rewritten: what the caller knows stays
        conn.execute(update(EnvironmentRow).where(col(EnvironmentRow.id) == "env-a")
                     .values(spec={"synced": "before"}))
    store.sync_environments([environment("env-b", image="demo/ok:2")],
                            seen=["env-a", *(e.id for e in bulk)])
    second = {row.id: row for row in store.environments()}

    assert second["env-a"].spec == {"synced": "before"}
    assert second["env-a"].first_seen == first["env-a"].first_seen
    assert second["env-a"].last_seen > first["env-a"].last_seen
    assert second["env-b"].spec["image"] == "demo/ok:2"
    assert second["env-b"].last_seen == second["env-a"].last_seen
    assert all(second[e.id].last_seen == second["env-a"].last_seen for e in bulk)
    assert all(second[e.id].spec == first[e.id].spec for e in bulk)


def test_interrupt_stale_runs(store: Store) -> None:
    stale = store.start_run("daemon", [])
    finished = store.start_run("cli", [])
    store.finish_run(finished)
    mine = store.start_run("cli", [])
    elsewhere = store.start_run("daemon", [])
    gone = dead_pid()
    with store.engine.begin() as conn:
        conn.execute(
            update(CheckRun)
            .where(col(CheckRun.id).in_([stale, finished, elsewhere]))
            .values(pid=gone)
        )
        conn.execute(update(CheckRun).where(col(CheckRun.id) == elsewhere).values(host="other"))

    assert store.interrupt_stale_runs() == [stale]
    assert store.interrupt_stale_runs() == []
    runs = {run_id: store.run(run_id) for run_id in (stale, finished, mine, elsewhere)}
    states = {run_id: run.state for run_id, run in runs.items() if run is not None}
    assert states == {
        stale: RunState.INTERRUPTED,
        finished: RunState.FINISHED,
        mine: RunState.RUNNING,
        elsewhere: RunState.RUNNING,
    }
    stale_run, finished_run = runs[stale], runs[finished]
    assert stale_run is not None and stale_run.finished_at is None  # its end is unknown
    assert finished_run is not None and finished_run.finished_at is not None


def test_interrupt_own_run(store: Store) -> None:
    run_id = store.start_run("cli", [])
    store.record(run_id, result())
    store.interrupt_run(run_id)
    store.finish_run(run_id)  # too late: an interrupted run stays interrupted
    run = store.run(run_id)
    assert run is not None and run.state == RunState.INTERRUPTED and run.finished_at is not None
    assert len(store.results_for_run(run_id)) == 1
    assert store.interrupt_stale_runs() == []


def test_runs_newest_first(store: Store) -> None:
    ids = [store.start_run("cli", [f"f{i}.yaml"]) for i in range(4)]
    assert [r.id for r in store.runs()] == ids[::-1]
    assert [r.id for r in store.runs(limit=2)] == ids[:1:-1]
    assert store.run("nope") is None
    run = store.run(ids[0])
    assert run is not None and run.catalogue_files == ["f0.yaml"] and run.trigger == "cli"
    assert run.started_at.tzinfo is UTC and run.state == RunState.RUNNING


def test_sqlite_pragmas(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'x.db'}") as store, store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 5000
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1


@pytest.mark.timeout(30)
def test_unreachable_postgres_raises_store_error_without_password() -> None:
    url = "postgresql://postgres:s3cret-pw@127.0.0.1:1/test?connect_timeout=2"
    with pytest.raises(StoreError) as caught:
        open_store(url)
    message = str(caught.value)
    assert "127.0.0.1:1" in message
    assert "s3cret-pw" not in message and "***" in message


def test_bad_url_raises_store_error_without_echoing_it() -> None:
    with pytest.raises(StoreError) as caught:
        open_store("nonsense://user:s3cret-pw@")
    assert "s3cret-pw" not in str(caught.value)


def test_default_database_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ENVCHECK_DATABASE_URL", "postgresql://u@127.0.0.1:5432/db")
    assert default_database_url() == "postgresql+psycopg://u@127.0.0.1:5432/db"
    monkeypatch.setenv("ENVCHECK_DATABASE_URL", "postgresql+psycopg://u@h/db")
    assert default_database_url() == "postgresql+psycopg://u@h/db"

    monkeypatch.delenv("ENVCHECK_DATABASE_URL")
    monkeypatch.setenv("ENVCHECK_DATA_DIR", str(tmp_path / "data"))
    assert default_database_url() == f"sqlite:///{tmp_path / 'data' / 'envcheck.db'}"
    assert (tmp_path / "data").is_dir()

    monkeypatch.delenv("ENVCHECK_DATA_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_database_url() == f"sqlite:///{tmp_path / 'state' / 'envcheck' / 'envcheck.db'}"

    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".local" / "state" / "envcheck" / "envcheck.db"
    assert default_database_url() == f"sqlite:///{expected}"


# --- data-source shapes -----------------------------------------------------------------


def test_shapes_are_upserted_and_the_first_is_accepted_once(store: Store) -> None:
    first = store.observe_shape("api", "f1", {"object": {"a": "number"}}, T0, count=3,
                                auto_accept=True)
    assert (first.seen, first.accepted_by) == (3, "envcheck (first shape seen)")
    later = T0 + timedelta(minutes=5)
    store.observe_shape("api", "f1", {"object": {"a": "number"}}, later, count=2)
    second = store.observe_shape("api", "f2", "string", later + timedelta(seconds=1),
                                 auto_accept=True)  # a source with an accepted shape keeps it
    assert second.accepted_at is None
    accepted = store.accepted_shape("api")
    assert accepted is not None
    assert (accepted.fingerprint, accepted.seen, accepted.first_seen, accepted.last_seen) == (
        "f1", 5, T0, later)
    assert [s.fingerprint for s in store.shapes("api")] == ["f2", "f1"]
    assert store.accepted_shape("other") is None and store.latest_shape("other") is None


def test_accept_shape_takes_the_latest_observed_and_keeps_history(store: Store) -> None:
    store.observe_shape("api", "f1", {"object": {}}, T0, auto_accept=True)
    store.observe_shape("api", "f2", {"array": None}, T0 + timedelta(minutes=1))
    row = store.accept_shape("api", "alice", at=T0 + timedelta(minutes=2))
    assert (row.fingerprint, row.accepted_by, row.shape) == ("f2", "alice", {"array": None})
    assert store.accepted_shape("api") == row
    back = store.accept_shape("api", "bob", "f1", at=T0 + timedelta(minutes=3))
    assert store.accepted_shape("api") == back
    assert len(store.shapes("api")) == 2
    with pytest.raises(LookupError):
        store.accept_shape("nothing-seen", "alice")
    with pytest.raises(LookupError):
        store.accept_shape("api", "alice", "no-such-fingerprint")
