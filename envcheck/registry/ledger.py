"""The cache ledger: which images envcheck pulled on one engine, how big, when last used.

The engine records no last-used time for an image, and cannot tell envcheck's pulls from
anyone else's, so the cache keeps this record itself. The registry stage sits below the
store, so it states what it needs (:class:`CacheLedger`) and keeps it in a file of its own
(:class:`SqliteLedger`: stdlib sqlite3 in WAL mode, one file per engine in the data
directory, ``image-cache/<engine id>.db``; on Ray each node keeps its own beside its engine).

A pull is written twice: ``begin`` before the engine is asked (an intent, not an entry), then
``record`` once the engine holds the image under the expected digest and envcheck's tag is
on it. A process killed in between leaves an intent and never an entry: the half pull is not
in the ledger. ``cache.reconcile`` settles intents and entries against the engine at start.
Each write is one transaction, committed before the call returns (``synchronous=FULL``).

Several processes may share one engine's ledger (a Ray node's worker processes). An intent
names its process and holds the room its pull reserved until the pull ends (``reserved``:
what every process counts beside the engine's usage), so two processes never share one room;
``decisions()`` is the lock (:mod:`envcheck.registry.locking`) they take around each budget
decision. An intent of a process that is gone, or past its deadline, reserves nothing, and is
the next start's to settle (``pending``); one of a live process is that process's own.

Pins (``keep: true``) are catalogue data and handed in by the caller, never stored here.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from envcheck.core.errors import ConfigError
from envcheck.registry.locking import DecisionLock, alive, this_process

__all__ = ["GIVEN_UP", "CacheLedger", "LedgerEntry", "SqliteLedger", "ledger_path"]


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One image envcheck pulled: ``repository@digest``, the engine's image id, its size on
    the engine when pulled, when pulled and when last used (UTC)."""

    repository: str
    digest: str
    image_id: str
    size_bytes: int
    pulled_at: datetime
    last_used_at: datetime
    # pulled ahead of the probe that will use it: kept from eviction until then, by every
    # process sharing the ledger (cleared when used); GIVEN_UP: a probe's pull due now took
    # its room, so it may go at once, however recently pulled
    held_until: datetime | None = None

    @property
    def reference(self) -> str:
        return f"{self.repository}@{self.digest}"


class CacheLedger(Protocol):
    """What the image cache needs remembered across restarts, one engine's worth."""

    def begin(self, repository: str, digest: str, at: datetime, *, reserved_bytes: int = 0,
              expires_at: datetime | None = None) -> None:
        """A pull of ``repository@digest`` is about to be asked of the engine by this process,
        holding ``reserved_bytes`` of the budget until it ends or ``expires_at``."""

    def abandon(self, repository: str, digest: str) -> None:
        """That pull failed: its intent is dropped."""

    def pending(self) -> list[tuple[str, str]]:
        """Intents never settled that no other running process will settle (its process died
        mid-pull, or its deadline passed; or this process's own): (repository, digest)."""

    def reserved(self, at: datetime) -> int:
        """The room the pulls under way reserve, of every live process, at ``at``."""

    def decisions(self) -> AbstractContextManager[None]:
        """Held around each budget decision, across the processes sharing this ledger."""

    def record(self, entry: LedgerEntry) -> None:
        """The pull is complete (its intent is settled in the same write)."""

    def touch(self, repository: str, digest: str, at: datetime) -> None:
        """The image was used at ``at`` (a hold on it ends: its probe came)."""

    def hold(self, repository: str, digest: str, until: datetime | None) -> None:
        """Kept from eviction until ``until`` (None: no longer): pulled ahead of its probe."""

    def unhold_latest(self, at: datetime) -> bool:
        """The hold that ends last (the image pulled ahead for the latest probe) given up
        (``GIVEN_UP``), for a probe's pull due now; False when none holds at ``at``."""

    def forget(self, repository: str, digest: str) -> None:
        """The image is gone from the engine (evicted, or removed by someone else)."""

    def get(self, repository: str, digest: str) -> LedgerEntry | None: ...

    def entries(self) -> list[LedgerEntry]:
        """Every entry, least recently used first."""


GIVEN_UP = datetime.fromtimestamp(0, UTC)


def ledger_path(data_dir: Path, engine_id: str) -> Path:
    """Where the ledger of the engine ``engine_id`` (``docker info``'s ``ID``) lives."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "-", engine_id).strip("-.") or "engine"
    return data_dir / "image-cache" / f"{safe[:80]}.db"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pulls (
    repository TEXT NOT NULL,
    digest TEXT NOT NULL,
    image_id TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    pulled_at REAL NOT NULL,
    last_used_at REAL NOT NULL,
    held_until REAL,
    PRIMARY KEY (repository, digest)
);
CREATE INDEX IF NOT EXISTS pulls_by_use ON pulls (last_used_at);
CREATE TABLE IF NOT EXISTS pending (
    repository TEXT NOT NULL,
    digest TEXT NOT NULL,
    started_at REAL NOT NULL,
    reserved_bytes INTEGER NOT NULL DEFAULT 0,
    owner TEXT NOT NULL DEFAULT '',
    expires_at REAL,
    PRIMARY KEY (repository, digest)
);
"""
# columns a ledger written before them lacks: added in place
_ADDED = (("pulls", "held_until", "REAL"),
          ("pending", "reserved_bytes", "INTEGER NOT NULL DEFAULT 0"),
          ("pending", "owner", "TEXT NOT NULL DEFAULT ''"), ("pending", "expires_at", "REAL"))


class SqliteLedger:
    """The ledger as a SQLite file of the registry stage's own (WAL: a reader never waits for
    a writer; another process on the same file waits up to ``busy_timeout``), its decision
    lock the file beside it (``<ledger>.lock``)."""

    def __init__(self, path: Path, engine_id: str) -> None:
        self.path = path
        self._owner = this_process()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=10.0, check_same_thread=False,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            self._upgrade()
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open the image cache ledger {path}: {exc} (set "
                              "ENVCHECK_DATA_DIR to a writable directory)") from None
        self._lock = threading.Lock()
        self._decisions = DecisionLock(path.with_name(path.name + ".lock"))
        self._claim(engine_id)

    def _upgrade(self) -> None:
        for table, column, kind in _ADDED:
            have = {str(row[1]) for row in self._db.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                try:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                except sqlite3.OperationalError as exc:  # another process added it meanwhile
                    if "duplicate column" not in str(exc):
                        raise

    def decisions(self) -> AbstractContextManager[None]:
        return self._decisions.held()

    def _claim(self, engine_id: str) -> None:
        """A ledger speaks for one engine: another engine's file is refused, not mixed."""
        with self._write() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'engine_id'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta (key, value) VALUES ('engine_id', ?)", (engine_id,))
            elif row[0] != engine_id:
                raise ConfigError(f"{self.path} is the image cache ledger of the engine "
                                  f"{row[0]}, not of {engine_id}: each engine keeps its own")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def begin(self, repository: str, digest: str, at: datetime, *, reserved_bytes: int = 0,
              expires_at: datetime | None = None) -> None:
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO pending (repository, digest, started_at, "
                       "reserved_bytes, owner, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
                       (repository, digest, at.timestamp(), max(reserved_bytes, 0),
                        self._owner, expires_at.timestamp() if expires_at else None))

    def abandon(self, repository: str, digest: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM pending WHERE repository = ? AND digest = ?",
                       (repository, digest))

    def pending(self) -> list[tuple[str, str]]:
        now = datetime.now(UTC).timestamp()
        return [(repository, digest) for repository, digest, _, owner, expires
                in self._intents()
                if owner == self._owner or not self._under_way(owner, expires, now)]

    def reserved(self, at: datetime) -> int:
        now = at.timestamp()
        return sum(size for _, _, size, owner, expires in self._intents()
                   if self._under_way(owner, expires, now))

    def _intents(self) -> list[tuple[str, str, int, str, float | None]]:
        with self._lock:
            rows = self._db.execute("SELECT repository, digest, reserved_bytes, owner, "
                                    "expires_at FROM pending ORDER BY started_at").fetchall()
        return [(str(r), str(d), int(size or 0), str(owner or ""),
                 float(expires) if expires is not None else None)
                for r, d, size, owner, expires in rows]

    def _under_way(self, owner: str, expires: float | None, now: float) -> bool:
        """An intent whose process runs still, within its deadline (one written before
        intents named their process names none: under way for nobody)."""
        if not owner or (expires is not None and expires < now):
            return False
        return owner == self._owner or alive(owner)

    def record(self, entry: LedgerEntry) -> None:
        with self._write() as db:
            db.execute("DELETE FROM pending WHERE repository = ? AND digest = ?",
                       (entry.repository, entry.digest))
            db.execute("INSERT OR REPLACE INTO pulls (repository, digest, image_id, size_bytes,"
                       " pulled_at, last_used_at) VALUES (?, ?, ?, ?, ?, ?)",
                       (entry.repository, entry.digest, entry.image_id, entry.size_bytes,
                        entry.pulled_at.timestamp(), entry.last_used_at.timestamp()))

    def touch(self, repository: str, digest: str, at: datetime) -> None:
        with self._write() as db:
            db.execute("UPDATE pulls SET last_used_at = max(last_used_at, ?), "
                       "held_until = NULL WHERE repository = ? AND digest = ?",
                       (at.timestamp(), repository, digest))

    def hold(self, repository: str, digest: str, until: datetime | None) -> None:
        with self._write() as db:
            db.execute("UPDATE pulls SET held_until = ? WHERE repository = ? AND digest = ?",
                       (until.timestamp() if until else None, repository, digest))

    def unhold_latest(self, at: datetime) -> bool:
        with self._write() as db:
            row = db.execute("SELECT repository, digest FROM pulls WHERE held_until > ? "
                             "ORDER BY held_until DESC LIMIT 1", (at.timestamp(),)).fetchone()
            if row is not None:
                db.execute("UPDATE pulls SET held_until = ? WHERE repository = ? AND "
                           "digest = ?", (GIVEN_UP.timestamp(), row[0], row[1]))
        return row is not None

    def forget(self, repository: str, digest: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM pulls WHERE repository = ? AND digest = ?",
                       (repository, digest))

    def get(self, repository: str, digest: str) -> LedgerEntry | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_COLUMNS} FROM pulls WHERE repository = ? AND "
                                   "digest = ?", (repository, digest)).fetchone()
        return _entry(row) if row is not None else None

    def entries(self) -> list[LedgerEntry]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM pulls "
                                    "ORDER BY last_used_at, pulled_at").fetchall()
        return [_entry(row) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


_COLUMNS = "repository, digest, image_id, size_bytes, pulled_at, last_used_at, held_until"


def _entry(row: tuple[object, ...]) -> LedgerEntry:
    repository, digest, image_id, size, pulled, used, held = row
    return LedgerEntry(str(repository), str(digest), str(image_id), int(str(size)),
                       datetime.fromtimestamp(float(str(pulled)), UTC),
                       datetime.fromtimestamp(float(str(used)), UTC),
                       datetime.fromtimestamp(float(str(held)), UTC) if held is not None
                       else None)
