"""One writer per store: the daemon's exclusive lease on it.

Two daemons on one store would probe the fleet twice, write two results per probe and alert
twice on every transition. A daemon holds the store's lease for as long as it runs:

- **SQLite**: an ``flock`` on ``<database file>.lock``, beside it, in which the holder
  writes who it is (host, pid, since, as JSON). The kernel drops the lock when the process
  ends, SIGKILL included.
- **PostgreSQL**: a session advisory lock on a connection of its own (:mod:`.pglease`),
  its ``application_name`` naming the holder. The server drops it when the session ends.

A second daemon is refused (:class:`~envcheck.core.errors.LeaseHeld`, naming the holder), or,
as a standby, polls every second and takes the lease once it is free. Each of its looks is
recorded (:attr:`StoreLease.looks`, a :class:`~envcheck.core.readiness.Watch`): who holds the
lease, or why the store did not answer, or for how long a look has gone unanswered; the
standby's ``/readyz`` reads that record, never the store.

The holder checks every second that the lease is still its own (the lock file is still the
file it locked; the connection answers and still holds the lock). When it is not, the store
is **fenced** at once: every write through the Store's engine fails as on a full disk (results
are held, see :mod:`.pending`), reads go on. Then the lease is taken back if nobody took it
meanwhile (a PostgreSQL restart, a connection killed): the fence lifts and what was held is
written. If another daemon holds it, the caller is told and stops; it never writes beside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import Engine, event, make_url
from sqlalchemy.exc import ArgumentError

from envcheck.core.errors import LeaseHeld, StoreError, StoreUnavailable
from envcheck.core.readiness import Watch
from envcheck.store.holder import Holder, Lock
from envcheck.store.urls import normalise_url

__all__ = ["FENCED", "POLL_S", "FileLock", "StoreLease", "lock_for"]

log = logging.getLogger(__name__)

POLL_S = 1.0  # how often a standby tries the lease, and the holder checks it is still its own
FENCED = "the store's lease is lost: this daemon writes nothing until it holds it again"
# Statements a fenced store still runs: reads (the API, the metrics, /readyz go on).
_READS = ("SELECT", "PRAGMA", "SHOW", "EXPLAIN")


class FileLock:
    """An ``flock`` on a file beside the SQLite database."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)
        self._fd: int | None = None
        self.previous: Holder | None = None  # who held it before us, as the file said

    def try_lock(self, me: Holder) -> bool:
        self.unlock()
        try:
            # not inherited by child processes (O_CLOEXEC): none of them may keep it alive
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot take the store's lease {self.path}: "
                             f"{exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        try:
            self.previous = _read_holder(fd)
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me.as_dict()).encode(), 0)
        except OSError as exc:
            os.close(fd)  # the lock goes with it
            raise StoreError(f"cannot write the store's lease {self.path}: "
                             f"{exc.strerror or exc}") from None
        self._fd = fd
        return True

    def holder(self) -> Holder | None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return _read_holder(fd)
        finally:
            os.close(fd)

    def held(self) -> bool:
        if self._fd is None:
            return False
        try:
            mine, there = os.fstat(self._fd), os.stat(self.path)
        except OSError:
            return False  # removed: a new daemon would lock a new file
        return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)

    def unlock(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # the lock goes with the last descriptor
            self._fd = None


def _read_holder(fd: int) -> Holder | None:
    try:
        return Holder.of(json.loads(os.pread(fd, 4096, 0) or b"null"))
    except (OSError, ValueError):
        return None  # empty (its holder is writing it) or not ours


class _Free:
    """An in-memory SQLite store: no other process can open it, so there is nothing to lock."""

    where = "an in-memory store"
    previous: Holder | None = None

    def try_lock(self, me: Holder) -> bool:
        return True

    def holder(self) -> Holder | None:
        return None

    def held(self) -> bool:
        return True

    def unlock(self) -> None:
        pass


def lock_for(url: str) -> Lock:
    """The lock of the store at ``url``."""
    try:
        parsed = make_url(normalise_url(url))
    except ArgumentError:
        raise StoreError("not a valid database URL (check ENVCHECK_DATABASE_URL)") from None
    if parsed.get_backend_name() == "postgresql":
        from envcheck.store.pglease import AdvisoryLock

        return AdvisoryLock(parsed)
    database = parsed.database or ""
    if parsed.query.get("uri"):  # sqlite:///file:PATH?mode=...&uri=true
        database = database.removeprefix("file:").split("?", 1)[0]
        if parsed.query.get("mode") == "memory":
            database = ""
    if database in ("", ":memory:"):
        return _Free()
    return FileLock(Path(f"{database}.lock"))


class StoreLease:
    """The daemon's lease on its store: :meth:`take`, then :meth:`guard` the Store's engine
    and :meth:`watch` the lease until :meth:`release`."""

    def __init__(self, lock: Lock) -> None:
        self._lock = lock
        self._mutex = threading.Lock()  # the watch and release() never touch the lock at once
        self._fenced = threading.Event()
        self._released = False
        self._taken_once = False
        self.previous: Holder | None = None  # the last holder before us, when known
        self.looks = Watch(interval_s=POLL_S)  # a standby's looks at the lease, as they went
        self._seen: Holder | None = None  # who held it at the last look of a standby

    @property
    def held(self) -> bool:
        """This process holds the lease (taken, neither lost nor released)."""
        return self._taken_once and not self._fenced.is_set()

    @property
    def waiting_for(self) -> Holder | None:
        """While a standby waits: who held the lease at its last look, if it said."""
        return None if self._taken_once else self._seen

    @classmethod
    def of(cls, url: str) -> StoreLease:
        return cls(lock_for(url))

    @property
    def where(self) -> str:
        return self._lock.where

    @property
    def fenced(self) -> bool:
        return self._fenced.is_set()

    def take(self, *, standby: bool, stop: threading.Event, poll_s: float = POLL_S
             ) -> float | None:
        """Take the lease; how long that took waiting for another holder (0.0: it was
        free). Held by another: :class:`LeaseHeld` naming it, or, on ``standby``, wait
        until it is free, or until ``stop`` (None). A store that does not answer at the
        first try: StoreError; later, while waiting, a warning and the wait goes on."""
        self.looks.asked(time.monotonic())
        if self._lock.try_lock(Holder.me()):
            self._taken(None, waited_s=0.0)
            return 0.0
        holder = self._lock.holder()
        self._saw(holder)
        if not standby:
            raise LeaseHeld(f"another envcheck daemon holds the store: "
                            f"{holder or 'it has not said who it is yet'} (lease: "
                            f"{self.where}); one daemon writes a store: --standby waits and "
                            f"takes over when it stops")
        started, unreachable = time.monotonic(), False
        seen: Holder | None = _UNSEEN
        last = holder
        while True:
            if holder != seen:
                log.info("waiting for the store's lease", extra={
                    "store": self.where, "holder": holder.as_dict() if holder else None})
                seen, last = holder, holder or last
            if stop.wait(poll_s):
                return None
            self.looks.asked(time.monotonic())
            try:
                if self._lock.try_lock(Holder.me()):
                    break
                holder, unreachable = self._lock.holder(), False
                self._saw(holder)
            except StoreError as exc:
                self.looks.answered(f"error: {exc}", time.monotonic())
                if not unreachable:  # once per outage: the holder may be down with it
                    log.warning("store unreachable while waiting for its lease",
                                extra={"store": self.where, "error": str(exc)})
                unreachable = True
        waited = time.monotonic() - started
        self._taken(last, waited)
        return waited

    def _saw(self, holder: Holder | None) -> None:
        """A look found the lease held: by ``holder``, or by one that has not said who."""
        self._seen = holder
        named = str(holder) if holder is not None else "a daemon that has not said who it is yet"
        self.looks.answered(f"standby: the store's lease is held by {named}", time.monotonic())

    def _taken(self, seen: Holder | None, waited_s: float) -> None:
        self._taken_once = True
        self.looks.answered("ok", time.monotonic())
        self.previous = self._lock.previous or seen
        log.info("store lease taken", extra={
            "store": self.where, "holder": Holder.me().as_dict(), "waited_s": round(waited_s, 3),
            "previous": self.previous.as_dict() if self.previous else None})

    def guard(self, engine: Engine) -> None:
        """Make ``engine`` refuse writes while the lease is not ours (StoreUnavailable, which
        the Store's writers hold and retry, as they do on a full disk)."""

        where = engine.url.render_as_string(hide_password=True)

        def refuse(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if self._fenced.is_set() and not statement.lstrip()[:8].upper().startswith(_READS):
                raise StoreUnavailable(FENCED, FENCED, where)  # it passes: the lease comes back

        event.listen(engine, "before_cursor_execute", refuse)

    def watch(self, stop: threading.Event, on_taken: Callable[[Holder | None], None],
              interval_s: float = POLL_S) -> threading.Thread:
        """Check the lease every ``interval_s`` until ``stop``: lost, fence the store and
        take it back; ``on_taken(holder)`` (once, then the watch ends) if another holds it."""
        thread = threading.Thread(target=self._watch, args=(stop, on_taken, interval_s),
                                  name="envcheck-lease", daemon=True)
        thread.start()
        return thread

    def _watch(self, stop: threading.Event, on_taken: Callable[[Holder | None], None],
               interval_s: float) -> None:
        while not stop.wait(interval_s):  # periodic check until stop, not a retry
            with self._mutex:
                if self._released:
                    return
                taken = self._check()
            if taken is not None:
                holder = taken.holder
                log.error("another daemon holds the store's lease now",
                          extra={"store": self.where,
                                 "holder": holder.as_dict() if holder else None})
                on_taken(holder)
                return

    def _check(self) -> _Taken | None:
        """One look at the lease: None while it is ours (or while that cannot be told: the
        store does not answer, so nobody else can take it either), else who took it."""
        if not self._fenced.is_set():
            if self._lock.held():
                return None
            self._fenced.set()  # first: nothing more is written
            log.error("store lease lost: writes stop until it is taken back",
                      extra={"store": self.where})
        try:
            if self._lock.try_lock(Holder.me()):
                self._fenced.clear()
                log.warning("store lease taken back: writes resume", extra={"store": self.where})
                return None
            return _Taken(self._lock.holder())
        except StoreError:
            return None

    def release(self) -> None:
        with self._mutex:
            self._released = True
            self._fenced.set()  # a writer still running past this point writes nothing
            self._lock.unlock()


class _Taken(NamedTuple):
    holder: Holder | None  # None: it has not said who it is


_UNSEEN = Holder("", -1, datetime.min.replace(tzinfo=UTC))  # no holder logged yet
