"""``envcheck store copy``: an embedded store with two days of history copied into the real
PostgreSQL (and into another SQLite file), interrupted and resumed, verified, and read back with
the same answers."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select, update

from envcheck.core.errors import StoreError
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.core.rollouts import Outcome, Rollout
from envcheck.feed.allowlist import allowlist
from envcheck.store import Store, open_store
from envcheck.store.copy import APPEND_ONLY, copy_store, state_checksum
from envcheck.store.core_tables import ROLLOUTS
from envcheck.store.retention import Retention
from envcheck.store.tables.results import ProbeResultRow
from envcheck.store.tables.rollouts import ROLLOUT_COUNTERS
from envcheck.store.tables.states import EnvStateRow
from tests.conftest import envcheck_cmd
from tests.dashboard_seed import Seeded, copy_sqlite, sqlite_template


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Seeded]:
    path = tmp_path_factory.mktemp("copy") / "template.db"
    return path, sqlite_template(path)


@pytest.fixture
def source_url(template: tuple[Path, Seeded], tmp_path: Path) -> str:
    return copy_sqlite(template[0], tmp_path / "source.db")


def feed(store: Store) -> dict[str, object]:
    """Each suite's allowlist (allowed, excluded and why, generation) and the quarantine:
    what schedulers see."""
    answers: dict[str, object] = {}
    for suite in store.suites():
        listing = allowlist(store, suite.id)
        answers[suite.id] = (sorted(listing.allowed), listing.excluded, listing.generation)
    answers["quarantine"] = store.quarantined()
    return answers


ROLLOUT_EVIDENCE = {"state": "degraded", "flagged": True, "reason": "rollout_failures",
                    "rollouts": 400, "env_failures": 40, "by_outcome": {"ok": 360,
                                                                        "sandbox_lost": 40}}


def with_rollouts(store: Store) -> None:
    """Rollout counters of two digests over three hours (folded days too), an unknown id, two
    producers, and one environment's rollout evidence."""
    env_id = "swe-manual"  # an environment of the seeded fleet
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(days=9)
    rows = [Rollout(env_id, start + timedelta(hours=h * 80, minutes=i), f"run-{h % 2}", h * 100 + i,
                    Outcome.OK if i % 10 else Outcome.SANDBOX_LOST, f"sha256:{h % 2}",
                    float(i % 2), agent_s=2.0) for h in range(3) for i in range(40)]
    store.record_rollouts([*rows, rows[-1]._replace(env_id="gone-away", seq=999)])
    store.prune(Retention(hourly_days=3))  # the oldest hours folded into day rows
    with store.engine.begin() as conn:
        conn.execute(update(EnvStateRow).where(EnvStateRow.env_id == env_id)  # type: ignore[arg-type]
                     .values(rollouts=ROLLOUT_EVIDENCE))


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres", "sqlite"], indirect=True)
def test_a_copy_holds_every_row_and_gives_the_same_answers(source_url: str,
                                                           store_url: str) -> None:
    with open_store(source_url) as source, open_store(store_url) as target:
        with_rollouts(source)
        report = copy_store(source, target, batch_rows=97)
        assert report.verified, report.problems()
        by_name = {t.name: t for t in report.tables}
        assert by_name["probe_result"].source_rows > 300  # two days of a small fleet
        assert by_name["transition"].target_rows > 0 and by_name["incident"].target_rows == 1
        assert all(t.copied == t.source_rows for t in report.tables)
        assert feed(target) == feed(source)
        assert target.transitions(limit=10_000) == source.transitions(limit=10_000)
        # the rollout counters of both periods, the unknown ids, the producers' numbers
        assert target.rollout_rows() == source.rollout_rows()
        assert {r.period for r in target.rollout_rows()} == {"hour", "day"}
        assert target.unknown_rollouts() == source.unknown_rollouts() == (1, ["gone-away"])
        # the seeded fleet's own training run, and the two producers above
        producers = by_name["rollout_producer"]
        assert producers.target_rows == producers.source_rows >= 3
        assert report.target_counts["rollout_rollup.count"] == sum(
            r.count for r in source.rollout_rows()) >= 120
        states = {s.env_id: s.rollouts for s in target.env_states()}
        assert ROLLOUT_EVIDENCE in states.values()
        # counted again (the same numbers) in the target: nothing twice
        first = source.rollout_rows()[0]
        again = target.record_rollouts([Rollout(first.env_id, first.first_at, "run-0", 200,
                                                Outcome.OK)])
        assert again.duplicates == 1
        # the target's next result takes an id after the copied ones (sequences moved on)
        run = target.start_run("check", [])
        new_id = target.record(run, ProbeResult(
            "swe-manual", ProbeKind.TERMINAL, Status.PASS, Reason.OK, "after the copy", 0.1,
            None, "h", datetime.now(UTC)))
        with source.engine.connect() as conn:
            assert new_id > conn.execute(select(func.max(ProbeResultRow.id))).scalar_one()


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_an_interrupted_copy_continues_where_it_stopped(source_url: str,
                                                        store_url: str) -> None:
    with open_store(source_url) as source, open_store(store_url) as target:
        first = copy_store(source, target, batch_rows=50, max_rows=400)
        assert not first.complete and not first.verified
        assert "run the copy again" in first.problems()[-1]
        second = copy_store(source, target, batch_rows=50)
        assert second.verified, second.problems()
        results = {t.name: t for t in second.tables}["probe_result"]
        # append-only rows already there are skipped, never written twice
        assert results.skipped + results.copied == results.source_rows
        assert any(t.skipped for t in second.tables if t.name in APPEND_ONLY)
        # a re-run over a finished copy writes no append-only row and changes nothing
        third = copy_store(source, target)
        assert third.verified
        assert all(t.copied == 0 for t in third.tables if t.name in APPEND_ONLY)
        assert state_checksum(target.engine) == state_checksum(source.engine)


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_state_changed_since_the_copy_is_carried_by_the_next_run(source_url: str,
                                                                   store_url: str) -> None:
    with open_store(source_url) as source, open_store(store_url) as target:
        assert copy_store(source, target).verified
        with source.engine.begin() as conn:
            conn.execute(update(EnvStateRow).where(EnvStateRow.env_id == "swe-manual")  # type: ignore[arg-type]
                         .values(q_reason="released later"))
        assert state_checksum(source.engine) != state_checksum(target.engine)
        assert copy_store(source, target).verified
        # the rollout evidence is part of a state, and counters that differ are told
        with source.engine.begin() as conn:
            conn.execute(update(EnvStateRow).where(EnvStateRow.env_id == "swe-manual")  # type: ignore[arg-type]
                         .values(rollouts=ROLLOUT_EVIDENCE))
        assert state_checksum(source.engine) != state_checksum(target.engine)
        assert copy_store(source, target).verified
        with_rollouts(source)
        with target.engine.begin() as conn:  # the target counted something of its own
            conn.execute(insert(ROLLOUTS).values(
                env_id="swe-manual", hour=datetime(2026, 1, 1, tzinfo=UTC), image_digest="",
                outcome="ok", period="hour", first_at=datetime(2026, 1, 1, tzinfo=UTC),
                last_at=datetime(2026, 1, 1, tzinfo=UTC),
                **{name: 1 for name in ROLLOUT_COUNTERS}))
        stale = copy_store(source, target)
        assert not stale.verified
        assert any(p.startswith("rollout_rollup.count: ") for p in stale.problems())


def run_copy(source_url: str, to: str,
             cli_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*envcheck_cmd(), "store", "copy", "--database", source_url,
                           "--to", to], check=False, env=cli_env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_the_command_copies_verifies_and_says_so(source_url: str, store_url: str,
                                                 cli_env: dict[str, str]) -> None:
    proc = run_copy(source_url, store_url, cli_env)
    assert proc.returncode == 0, proc.stderr
    assert "verified: row counts equal" in proc.stdout
    assert "probe_result" in proc.stdout
    # a target whose states differ from the source's, on a table upserts cannot reach
    with open_store(store_url) as target, target.engine.begin() as conn:
        conn.execute(update(EnvStateRow).values(state="broken"))
        conn.exec_driver_sql("DELETE FROM incident")
    with open_store(source_url) as source, source.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM incident")
        conn.exec_driver_sql("INSERT INTO check_run (id, started_at, state, trigger, host, pid,"
                             " catalogue_files) VALUES ('r-late', '2026-01-01 00:00:00', "
                             "'finished', 'check', 'h', 1, '[]')")
    again = run_copy(source_url, store_url, cli_env)
    assert again.returncode == 0, again.stderr  # the states were upserted back
    with open_store(store_url) as target, target.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO incident (run_id, at, kind, failing, total, detail) "
                             "VALUES ('r-late', '2026-01-02 00:00:00', 'storm', 1, 2, 'x')")
    differs = run_copy(source_url, store_url, cli_env)
    assert differs.returncode == 1
    assert "incident: 0 row(s) in the source, 1 in the target" in differs.stderr
    assert "Traceback" not in differs.stderr


def test_the_command_refuses_to_copy_a_store_onto_itself(source_url: str,
                                                        cli_env: dict[str, str]) -> None:
    proc = run_copy(source_url, source_url, cli_env)
    assert proc.returncode == 2
    assert "--to names the store being copied" in proc.stderr


def test_an_unreachable_target_is_one_line_and_exit_3(source_url: str,
                                                     cli_env: dict[str, str]) -> None:
    proc = run_copy(source_url, "postgresql://u:s3cret@127.0.0.1:1/x?connect_timeout=2",
                    cli_env)
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr and "s3cret" not in proc.stderr
    assert proc.stderr.strip().startswith("error")


def test_a_failing_target_is_a_store_error(source_url: str, tmp_path: Path) -> None:
    with open_store(source_url) as source, open_store(f"sqlite:///{tmp_path / 't.db'}") as target:
        with target.engine.begin() as conn:  # a table the copy cannot write
            conn.exec_driver_sql("DROP TABLE transition")
        with pytest.raises(StoreError, match="run the copy again to continue"):
            copy_store(source, target)
