"""The cache ledger as a SQLite file of its own, and the budget as a person writes it."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from envcheck.core.errors import ConfigError
from envcheck.registry.cache import Budget, parse_budget
from envcheck.registry.ledger import LedgerEntry, SqliteLedger, ledger_path

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
D1, D2, D3 = ("sha256:" + c * 64 for c in "123")


def entry(digest: str, used: datetime, repository: str = "r.example/a") -> LedgerEntry:
    return LedgerEntry(repository, digest, "sha256:id" + digest[-4:], 1000, T0, used)


def test_entries_least_recently_used_first_and_touch(tmp_path: Path) -> None:
    ledger = SqliteLedger(tmp_path / "l.db", "engine-a")
    ledger.record(entry(D1, T0 + timedelta(minutes=3)))
    ledger.record(entry(D2, T0 + timedelta(minutes=1)))
    ledger.record(entry(D3, T0 + timedelta(minutes=2)))
    assert [e.digest for e in ledger.entries()] == [D2, D3, D1]
    ledger.touch("r.example/a", D2, T0 + timedelta(minutes=9))
    ledger.touch("r.example/a", D3, T0)  # an older use never moves it back
    assert [e.digest for e in ledger.entries()] == [D3, D1, D2]
    ledger.forget("r.example/a", D1)
    assert ledger.get("r.example/a", D1) is None
    assert [e.digest for e in ledger.entries()] == [D3, D2]


def test_an_intent_is_not_an_entry_and_record_settles_it(tmp_path: Path) -> None:
    ledger = SqliteLedger(tmp_path / "l.db", "engine-a")
    ledger.begin("r.example/a", D1, T0)
    ledger.begin("r.example/b", D2, T0)
    assert ledger.entries() == []
    assert ledger.pending() == [("r.example/a", D1), ("r.example/b", D2)]
    ledger.record(entry(D1, T0))
    ledger.abandon("r.example/b", D2)
    assert ledger.pending() == []
    assert [e.reference for e in ledger.entries()] == [f"r.example/a@{D1}"]


def test_survives_reopening_and_refuses_another_engine(tmp_path: Path) -> None:
    path = ledger_path(tmp_path, "ABCD:EFGH:IJKL")
    assert path == tmp_path / "image-cache" / "ABCD-EFGH-IJKL.db"
    ledger = SqliteLedger(path, "ABCD:EFGH:IJKL")
    ledger.record(entry(D1, T0))
    ledger.begin("r.example/a", D2, T0)
    # no close: as after a kill, every write was committed when its call returned
    again = SqliteLedger(path, "ABCD:EFGH:IJKL")
    assert [e.digest for e in again.entries()] == [D1]
    assert again.pending() == [("r.example/a", D2)]
    assert again.get("r.example/a", D1) == entry(D1, T0)
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with pytest.raises(ConfigError, match="ledger of the engine ABCD:EFGH:IJKL, not of other"):
        SqliteLedger(path, "other")


def test_unwritable_place_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot open the image cache ledger"):
        SqliteLedger(blocker / "l.db", "engine")


@pytest.mark.parametrize(("text", "expected"), [
    ("20GiB", Budget(bytes=20 * 2**30)), ("500MB", Budget(bytes=500 * 10**6)),
    ("1073741824", Budget(bytes=2**30)), ("1.5g", Budget(bytes=1_500_000_000)),
    ("30%", Budget(share=0.3)), (" 100 % ", Budget(share=1.0)), ("64 KiB", Budget(bytes=65536)),
])
def test_budget_parsed(text: str, expected: Budget) -> None:
    assert parse_budget(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "20 parsecs", "0", "0%", "150%", "-5GB", "5 GB x"])
def test_bad_budget_is_one_clear_line(text: str) -> None:
    with pytest.raises(ConfigError) as bad:
        parse_budget(text)
    message = str(bad.value)
    assert message.startswith("--image-cache / ENVCHECK_IMAGE_CACHE: ")
    assert "\n" not in message


def test_share_resolved_against_the_disk() -> None:
    assert Budget(share=0.25).resolve(lambda: 4000) == 1000
    assert Budget(bytes=7).resolve(lambda: pytest.fail("no disk asked")) == 7  # type: ignore[arg-type,return-value]
