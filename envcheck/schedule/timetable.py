"""When each (environment, kind) is next due: one heap and one thread for the whole fleet.

A fleet has a job per environment and kind (17,500 at 10,000 environments). As APScheduler
jobs they cost ~50-70 us each to create (validation, an event, a sorted job store), twice
over when added before the scheduler starts: most of a daemon's start, and of a reload's
job changes. Here a job is one heap entry. APScheduler's interval triggers still compute
every next time (interval, then jitter), and a due job is handed over as APScheduler hands
it with ``coalesce=True`` and no misfire grace time: once however late, with the time it
was last due. The thread sleeps until the earliest entry is due (nothing polls), and is
woken when an entry earlier than that is added.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from apscheduler.triggers.interval import IntervalTrigger

from envcheck.schedule.workqueue import Key

__all__ = ["Job", "Timetable"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Job:
    """An entry as APScheduler shows a job: its id, its trigger and its next run."""

    id: str
    trigger: IntervalTrigger
    next_run_time: datetime


@dataclass(slots=True)
class _Entry:
    trigger: IntervalTrigger
    at: float  # epoch seconds
    seq: int  # of its heap item: older items of the same key are stale, skipped


def job_id(key: Key) -> str:
    return f"{key[0]}:{key[1]}"


class Timetable:
    """``fire(key, due)`` runs on this thread when ``key`` is due (``due``: epoch seconds);
    it must only hand the work over, never block."""

    def __init__(self, fire: Callable[[Key, float], object], name: str = "envcheck-timetable"
                 ) -> None:
        self._fire = fire
        self._name = name
        self._cond = threading.Condition()
        self._entries: dict[Key, _Entry] = {}
        self._heap: list[tuple[float, int, Key]] = []
        self._seq = itertools.count()
        self._stopping = False
        self._thread: threading.Thread | None = None

    # --- entries --------------------------------------------------------------------------

    def put(self, key: Key, trigger: IntervalTrigger, first: float) -> None:
        """Add ``key``, or replace its entry: due at ``first``, then as ``trigger`` says."""
        self.put_many([(key, trigger, first)])

    def put_many(self, entries: Sequence[tuple[Key, IntervalTrigger, float]]) -> None:
        """:meth:`put` each, under one lock; a whole fleet's in one heapify."""
        if not entries:
            return
        with self._cond:
            earliest = self._heap[0][0] if self._heap else float("inf")
            items = []
            for key, trigger, first in entries:
                seq = next(self._seq)
                self._entries[key] = _Entry(trigger, first, seq)
                items.append((first, seq, key))
            if len(items) > len(self._heap):
                self._heap.extend(items)
                heapq.heapify(self._heap)
            else:
                for item in items:
                    heapq.heappush(self._heap, item)
            self._compact()
            if min(first for first, _, _ in items) < earliest:  # sooner than it sleeps for
                self._cond.notify()

    def remove(self, key: Key) -> bool:
        """Forget ``key``; whether it was there. Its heap item is dropped when it comes up."""
        with self._cond:
            return self._entries.pop(key, None) is not None

    def get(self, key: Key) -> Job | None:
        with self._cond:
            entry = self._entries.get(key)
            return None if entry is None else _job(key, entry)

    def jobs(self) -> list[Job]:
        with self._cond:
            return [_job(key, entry) for key, entry in self._entries.items()]

    def __len__(self) -> int:
        return len(self._entries)

    def upcoming(self, until: float, limit: int) -> list[tuple[Key, float]]:
        """At most ``limit`` entries due by ``until`` (epoch seconds), soonest first."""
        with self._cond:
            return [(key, at) for at, key in heapq.nsmallest(
                limit, ((e.at, k) for k, e in self._entries.items() if e.at <= until),
                key=lambda item: item[0])]

    def _compact(self) -> None:
        """Replaced and removed entries leave stale heap items: rebuilt when they outnumber
        the live ones (a reload, many quarantine changes), so the heap stays bounded."""
        if len(self._heap) > 2 * len(self._entries) + 1024:
            self._heap = [(e.at, e.seq, k) for k, e in self._entries.items()]
            heapq.heapify(self._heap)

    # --- the thread -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """No more firing; waits for a hand-over in progress (at most ``timeout_s``)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                due = self._wait_for_due()
            if due is None:
                return
            for key, at in due:
                try:
                    self._fire(key, at)
                except Exception:
                    log.exception("enqueueing a due probe failed", extra={"job": job_id(key)})

    def _wait_for_due(self) -> list[tuple[Key, float]] | None:
        """(call holding the condition) Sleep until something is due; take it, each entry
        moved to its next time. None once stopping."""
        while not self._stopping:
            while self._heap and not self._live(self._heap[0]):
                heapq.heappop(self._heap)
            if not self._heap:
                self._cond.wait()
                continue
            now = time.time()
            wait = self._heap[0][0] - now
            if wait > 0:
                self._cond.wait(min(wait, threading.TIMEOUT_MAX))
                continue
            due: list[tuple[Key, float]] = []
            while self._heap and self._heap[0][0] <= now:
                item = heapq.heappop(self._heap)
                if self._live(item):
                    due.append((item[2], self._advance(item[2], now)))
            return due
        return None

    def _live(self, item: tuple[float, int, Key]) -> bool:
        entry = self._entries.get(item[2])
        return entry is not None and entry.seq == item[1]

    def _advance(self, key: Key, now: float) -> float:
        """Move ``key`` past ``now`` the way APScheduler moves a coalesced job: its trigger
        from each time due until one is in the future. The last time due, returned."""
        entry = self._entries[key]
        last = entry.at
        now_dt = datetime.fromtimestamp(now, UTC)
        upcoming = entry.trigger.get_next_fire_time(datetime.fromtimestamp(last, UTC), now_dt)
        while upcoming is not None and upcoming <= now_dt:
            last = upcoming.timestamp()
            upcoming = entry.trigger.get_next_fire_time(upcoming, now_dt)
        if upcoming is None:  # a trigger that ends (none here yet): the entry goes
            del self._entries[key]
            return last
        entry.at, entry.seq = upcoming.timestamp(), next(self._seq)
        heapq.heappush(self._heap, (entry.at, entry.seq, key))
        return last


def _job(key: Key, entry: _Entry) -> Job:
    return Job(job_id(key), entry.trigger, datetime.fromtimestamp(entry.at, UTC))
