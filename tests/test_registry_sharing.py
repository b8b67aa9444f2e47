"""One engine's ledger shared by several processes (a Ray node's worker processes): the room
a pull under way reserves counts for every process while its process lives, the budget's
decisions take turns under a lock beside the ledger, an intent of a live process is its own
to settle, and a pull held for its probe stays held whichever process asks. Real processes
on the real file; the pulls themselves are tests/test_registry_lock.py's."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from envcheck.core.errors import RegistryFailed
from envcheck.core.results import Reason
from envcheck.registry.ledger import GIVEN_UP, LedgerEntry, SqliteLedger
from envcheck.registry.locking import DecisionLock, alive, this_process
from tests.conftest import ROOT

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
D1, D2, D3 = ("sha256:" + c * 64 for c in "123")

# another process: an intent with its room, then the decision lock held until told
_CHILD = textwrap.dedent("""\
    import sys
    from datetime import UTC, datetime, timedelta
    from pathlib import Path
    from envcheck.registry.ledger import SqliteLedger
    ledger = SqliteLedger(Path(sys.argv[1]), "engine-a")
    now = datetime.now(UTC)
    ledger.begin("r.example/a", sys.argv[2], now, reserved_bytes=int(sys.argv[3]),
                 expires_at=now + timedelta(hours=1))
    with ledger.decisions():
        print("holding", flush=True)
        sys.stdin.readline()
    """)


@pytest.fixture
def other(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path / "l.db"), D1, "5000"],
                             cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "holding"
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=30)


def test_another_live_process_reserves_room_and_holds_the_decisions(
        tmp_path: Path, other: subprocess.Popen[str]) -> None:
    ledger = SqliteLedger(tmp_path / "l.db", "engine-a")
    now = datetime.now(UTC)
    assert ledger.reserved(now) == 5000  # its pull under way counts here too
    assert ledger.pending() == []  # and is its own to settle, not this start's
    # its own intents a process counts and settles itself
    ledger.begin("r.example/b", D2, now, reserved_bytes=700, expires_at=now + timedelta(hours=1))
    assert ledger.reserved(now) == 5700
    assert ledger.pending() == [("r.example/b", D2)]
    # past its deadline an intent reserves nothing, whoever wrote it
    assert ledger.reserved(now + timedelta(hours=2)) == 0
    # the other process holds the decisions: one here waits, and past its timeout says why
    lock = DecisionLock(ledger.path.with_name(ledger.path.name + ".lock"), timeout_s=0.3)
    with pytest.raises(RegistryFailed) as refused, lock.held():
        pass
    assert refused.value.reason is Reason.IMAGE_CACHE_FULL
    assert "held by another process" in str(refused.value)
    assert other.stdin is not None
    other.stdin.write("\n")
    other.stdin.flush()
    assert other.wait(timeout=30) == 0
    with lock.held(), lock.held():  # free once it ended; re-entrant in a process
        pass
    # it ended without settling its intent (as a process killed mid-pull): no room held,
    # and the next start settles it
    assert ledger.reserved(now) == 700
    assert sorted(ledger.pending()) == [("r.example/a", D1), ("r.example/b", D2)]


def test_an_owner_is_this_process_while_it_runs() -> None:
    me = this_process()
    assert alive(me)
    host, pid, start = me.split(":")
    assert not alive(f"{host}:{pid}:{int(start) + 1}")  # the pid, reused by another process
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True, timeout=30)
    assert not alive(f"{host}:{done.stdout.strip()}:")
    assert alive(f"another-host.example:{pid}:")  # not to be asked from here: its deadline ends it


def test_a_hold_keeps_a_pull_for_its_probe_until_used_or_given_up(tmp_path: Path) -> None:
    ledger = SqliteLedger(tmp_path / "l.db", "engine-a")
    for digest in (D1, D2, D3):
        ledger.record(LedgerEntry("r.example/a", digest, "sha256:id" + digest[-4:], 1000, T0,
                                  T0))
    ledger.hold("r.example/a", D1, T0 + timedelta(minutes=10))
    ledger.hold("r.example/a", D2, T0 + timedelta(minutes=20))
    again = SqliteLedger(tmp_path / "l.db", "engine-a")  # as another process reads it
    assert {e.digest: e.held_until for e in again.entries()} == {
        D1: T0 + timedelta(minutes=10), D2: T0 + timedelta(minutes=20), D3: None}
    # a probe due now takes the room of the prefetch due last
    assert again.unhold_latest(T0)
    assert again.get("r.example/a", D2).held_until == GIVEN_UP  # type: ignore[union-attr]
    assert again.unhold_latest(T0)
    assert not again.unhold_latest(T0)  # none held any more
    ledger.hold("r.example/a", D3, T0 + timedelta(minutes=5))
    ledger.touch("r.example/a", D3, T0 + timedelta(minutes=1))  # its probe came
    assert ledger.get("r.example/a", D3).held_until is None  # type: ignore[union-attr]


def test_a_ledger_written_before_reservations_and_holds_opens(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as raw:
        raw.executescript("""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            INSERT INTO meta VALUES ('engine_id', 'engine-a');
            CREATE TABLE pulls (repository TEXT NOT NULL, digest TEXT NOT NULL,
                image_id TEXT NOT NULL, size_bytes INTEGER NOT NULL, pulled_at REAL NOT NULL,
                last_used_at REAL NOT NULL, PRIMARY KEY (repository, digest));
            CREATE TABLE pending (repository TEXT NOT NULL, digest TEXT NOT NULL,
                started_at REAL NOT NULL, PRIMARY KEY (repository, digest));
            """)
        raw.execute("INSERT INTO pulls VALUES ('r.example/a', ?, 'sha256:id', 1000, ?, ?)",
                    (D1, T0.timestamp(), T0.timestamp()))
        raw.execute("INSERT INTO pending VALUES ('r.example/a', ?, ?)", (D2, T0.timestamp()))
    ledger = SqliteLedger(path, "engine-a")
    assert ledger.entries() == [LedgerEntry("r.example/a", D1, "sha256:id", 1000, T0, T0)]
    # an intent that names no process is nobody's pull under way: the start's to settle
    assert ledger.reserved(datetime.now(UTC)) == 0
    assert ledger.pending() == [("r.example/a", D2)]
    SqliteLedger(path, "engine-a")  # opened again, by a second process: nothing to add
