"""Writes the store refused, held in order and written when it accepts writes again.

A full disk, a database restarting or locked past its timeout: the probes go on and their
results are not lost. ``envcheck check`` and the daemon both write runs and results through
one :class:`PendingWrites`:

- A write the store refuses (:class:`~envcheck.core.errors.StoreError`) is **held** in memory;
  while anything is held, new writes queue behind it, so a run is written before its results
  and a run's end after them. Run ids are made here (:func:`~envcheck.store.store.new_run`),
  so a run can be held like a result.
- :meth:`PendingWrites.flush` writes what is held, oldest first, and stops at the first
  refusal; :meth:`PendingWrites.flush_within` retries it (tenacity, exponential backoff) until
  a deadline. A result arriving while writes are held also triggers a flush, at most once per
  ``retry_after_s``. Every wait is bounded: each write by the store's own timeouts, each retry
  loop by its deadline.
- **Bounded**: at most ``limit`` results are held (50,000 by default). Beyond that the
  *oldest* held result is dropped (the newest evidence matters most to the feed), counted in
  :attr:`PendingWrites.dropped` and logged, never silently. Run starts and ends (a few per
  window) are never dropped.
- A write refused for its data (an integrity or data error) would block everything behind it
  forever: it is dropped, counted and logged as an error. A run start whose commit failed but
  landed (possible on PostgreSQL) is found and counts as written.

Held writes live in this process only: a process that exits with writes held loses them and
says so (``envcheck check`` exits 3, the daemon logs the count at shutdown).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.exc import DataError, IntegrityError
from tenacity import Retrying, retry_if_result, stop_before_delay, wait_exponential

from envcheck.core.errors import StoreError
from envcheck.core.results import ProbeResult
from envcheck.store.database import redact
from envcheck.store.sql import error_line
from envcheck.store.store import Store, new_run
from envcheck.store.tables.runs import CheckRun, RunState

__all__ = ["DEFAULT_LIMIT", "PendingWrites", "store_reason"]

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 50_000


@dataclass(frozen=True, slots=True, eq=False)
class _Start:
    run: CheckRun

    @property
    def run_id(self) -> str:
        return self.run.id


@dataclass(frozen=True, slots=True, eq=False)
class _Result:
    run_id: str
    result: ProbeResult


@dataclass(frozen=True, slots=True, eq=False)
class _State:
    run_id: str
    state: RunState
    at: datetime


_Write = _Start | _Result | _State


def store_reason(exc: BaseException) -> str:
    """The database's own words, one line: 'database or disk is full', not the SQL."""
    return error_line(exc.__cause__ or exc)


def _permanent(exc: StoreError) -> bool:
    """Refused for its data: retrying the same write can never succeed."""
    return isinstance(exc.__cause__, IntegrityError | DataError)


class PendingWrites:
    """Runs and results on their way to the store. Safe to share between threads."""

    def __init__(self, store: Store, *, limit: int = DEFAULT_LIMIT, retry_after_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self._store = store
        self._limit = limit
        self._retry_after_s = retry_after_s
        self._clock = clock
        self._lock = threading.Lock()  # guards everything below; never held across a write
        self._flushing = threading.Lock()  # one flush at a time, so the order holds
        self._held: deque[_Write] = deque()
        self._results_held = 0
        self._runs_held: Counter[str] = Counter()  # run id -> its writes held
        self._in_flight: _Write | None = None  # the held write being written by a flush
        self._refusal: StoreError | None = None  # the last refusal, until a write succeeds
        self._failed_at: float | None = None
        self._overflowing = False
        self.dropped = 0  # results lost: over the limit, or refused for their data

    @property
    def store(self) -> Store:
        return self._store

    @property
    def held(self) -> int:
        """Results held now."""
        return self._results_held

    @property
    def error(self) -> str | None:
        """Why the store refused the last write, until a write succeeds again."""
        refusal = self._refusal
        return store_reason(refusal) if refusal is not None else None

    @property
    def refusal(self) -> StoreError | None:
        """The store's last refusal, until a write succeeds again."""
        return self._refusal

    def holds(self, run_id: str) -> bool:
        """Whether a write of this run (its start, a result, its end) is still held."""
        with self._lock:
            return self._runs_held[run_id] > 0

    def status(self) -> str | None:
        """None while the store takes writes; else what an operator should read."""
        with self._lock:
            if self._refusal is None and not self._held:
                return None
            where = redact(self._store.engine.url)
            return (f"{self._results_held} results held, store not writable: "
                    f"{self.error or 'not retried yet'} ({where})")

    def note_failure(self, exc: StoreError) -> None:
        """Another write of the caller's (e.g. an assessment) was refused: not healthy."""
        with self._lock:
            self._refusal = exc
            self._failed_at = self._clock()

    def note_success(self) -> None:
        with self._lock:
            if not self._held:
                self._refusal = None

    # --- writes -------------------------------------------------------------------------

    def start_run(self, trigger: str, catalogue_files: Sequence[str]) -> str:
        run = new_run(trigger, catalogue_files)
        self._write(_Start(run))
        return run.id

    def record(self, run_id: str, result: ProbeResult) -> int | None:
        """The result's id when written now; None when held (or dropped)."""
        return self._write(_Result(run_id, result))

    def finish_run(self, run_id: str) -> None:
        self._write(_State(run_id, RunState.FINISHED, datetime.now(UTC)))

    def interrupt_run(self, run_id: str) -> None:
        self._write(_State(run_id, RunState.INTERRUPTED, datetime.now(UTC)))

    def _write(self, op: _Write) -> int | None:
        with self._lock:
            direct = not self._held
        if direct:
            try:
                written = self._apply(op)
            except StoreError as exc:
                if _permanent(exc):
                    self._reject(op, exc)
                    return None
                self._refused(exc)
            else:
                self.note_success()
                return written
        self._hold(op)
        if not direct:
            self._flush_if_due()
        return None

    def _apply(self, op: _Write) -> int | None:
        if isinstance(op, _Result):
            return self._store.record(op.run_id, op.result)
        if isinstance(op, _State):
            if op.state is RunState.FINISHED:
                self._store.finish_run(op.run_id, op.at)
            else:
                self._store.interrupt_run(op.run_id, op.at)
            return None
        try:
            self._store.add_run(op.run)
        except StoreError as exc:
            # committed although the commit answered with an error, then retried
            if not _permanent(exc) or self._store.run(op.run.id) is None:
                raise
        return None

    def _hold(self, op: _Write) -> None:
        with self._lock:
            if isinstance(op, _Result):
                if self._results_held >= self._limit and not self._drop_oldest_result():
                    self._count_drop()
                    return
                self._results_held += 1
            self._held.append(op)
            self._runs_held[op.run_id] += 1

    def _drop_oldest_result(self) -> bool:
        """(holding the lock) Make room for a newer result."""
        for i, op in enumerate(self._held):
            if isinstance(op, _Result) and op is not self._in_flight:
                del self._held[i]
                self._forget(op)
                self._count_drop()
                return True
        return False

    def _count_drop(self) -> None:
        self.dropped += 1
        if not self._overflowing:
            self._overflowing = True
            log.warning("held results over the limit: dropping the oldest",
                        extra={"limit": self._limit, "error": self.error})

    def _forget(self, op: _Write) -> None:
        """(holding the lock) ``op`` is no longer held."""
        if isinstance(op, _Result):
            self._results_held -= 1
        self._runs_held[op.run_id] -= 1
        if self._runs_held[op.run_id] <= 0:
            del self._runs_held[op.run_id]

    def _refused(self, exc: StoreError) -> None:
        with self._lock:
            self._refusal = exc
            self._failed_at = self._clock()

    def _reject(self, op: _Write, exc: StoreError) -> None:
        if isinstance(op, _Result):
            with self._lock:
                self.dropped += 1
        log.error("the store rejected a write: dropped",
                  extra={"run": op.run_id, "write": type(op).__name__.strip("_").lower(),
                         "error": store_reason(exc)})

    # --- flushing -----------------------------------------------------------------------

    def _flush_if_due(self) -> None:
        with self._lock:
            due = self._failed_at is None or \
                self._clock() - self._failed_at >= self._retry_after_s
        if due and self._flushing.acquire(blocking=False):
            try:
                self._flush()
            finally:
                self._flushing.release()

    def flush(self) -> bool:
        """Write what is held, oldest first, until the store refuses a write.
        True when nothing is held any more."""
        with self._flushing:
            return self._flush()

    def _flush(self) -> bool:
        wrote = False
        while True:  # drains the held writes once; the retries are flush_within's
            with self._lock:
                if not self._held:
                    if wrote:  # the store took writes again
                        self._refusal = None
                        self._overflowing = False
                    return True
                op = self._in_flight = self._held[0]
            try:
                self._apply(op)
            except StoreError as exc:
                if not _permanent(exc):
                    with self._lock:
                        self._in_flight = None
                    self._refused(exc)
                    return False
                self._reject(op, exc)
            wrote = True
            with self._lock:
                self._in_flight = None
                if self._held and self._held[0] is op:
                    self._held.popleft()
                    self._forget(op)

    def flush_within(self, seconds: float) -> bool:
        """:meth:`flush`, retried with backoff while the store refuses, for at most about
        ``seconds`` (one attempt at least). True when nothing is held any more."""
        retrying = Retrying(stop=stop_before_delay(max(seconds, 0.0)),
                            wait=wait_exponential(multiplier=0.25, max=5.0),
                            retry=retry_if_result(lambda done: not done),
                            retry_error_callback=lambda _state: False)
        return bool(retrying(self.flush))
