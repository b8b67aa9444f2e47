"""The work: due probes go on a bounded, prioritised queue; ``concurrency`` worker threads
take them, as far as the budget affords, run them and record each result into the open
window.

A busy image never idles a worker, and an (environment, kind) already queued or running is
not queued again (:mod:`.workqueue`). Work the budget cannot afford now is deferred (still
queued) and competes again, re-ranked, every few seconds and whenever a probe ends.

**Urgent** work (:meth:`Workers.urgent`: what the training run's rollouts asked for) goes
ahead of everything and past the budget: queued work is promoted in place, and work running
when it is asked for runs once more when it ends (its result began before the question).

**Overload** (:mod:`.overload`): within a priority the oldest evidence, in its own intervals,
goes first; the queue is ranked anew every so often, so waiting work ages and rises.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from envcheck.catalogue.models import Environment
from envcheck.core.results import ProbeKind, ProbeResult
from envcheck.executors.base import Executor
from envcheck.executors.cycle import Services
from envcheck.schedule.budget import NEW, URGENT, Budget, BudgetLimits, BudgetLine
from envcheck.schedule.ledger import Ledger
from envcheck.schedule.overload import Overload
from envcheck.schedule.windows import Windows
from envcheck.schedule.workqueue import Key, Work, WorkQueue
from envcheck.store.pending import PendingWrites

__all__ = ["SchedulerStats", "Workers"]

# the scheduler's one logger, whichever of its modules speaks
log = logging.getLogger("envcheck.schedule.scheduler")

# How often deferred work looks at the budget again when nothing else wakes the workers,
# and at most how often it does when probes end.
BUDGET_RETRY_S = 5.0
RELEASE_MIN_S = 1.0


@dataclass
class SchedulerStats:
    queued: int = 0
    running: int = 0
    completed: int = 0
    last_lag_s: float = 0.0
    max_lag_s: float = 0.0
    lags: deque[float] = field(default_factory=lambda: deque(maxlen=1000))
    deferred_total: int = 0  # probes the budget deferred at least once, since start
    # the fleet's budget line, then each suite's with a budget: refreshed as work moves
    budget: tuple[BudgetLine, ...] = ()
    # overload: time since the previous result over the interval, of the recent probes; the
    # queued work that waited past its interval, and the longest wait since due
    stretches: deque[float] = field(default_factory=lambda: deque(maxlen=1000))
    backlog: int = 0
    oldest_wait_s: float = 0.0


class Workers:
    """The queue, the budget and the stats are guarded by the scheduler's ``lock``; never
    call the store or the timetable while holding it. ``services`` are handed to every
    check (swapped whole by a reload)."""

    def __init__(self, lock: threading.Lock, stopping: threading.Event, ledger: Ledger,
                 windows: Windows, executor: Executor, writes: PendingWrites, *,
                 concurrency: int, per_image: int | None, budget: BudgetLimits,
                 services: Services | None) -> None:
        self._lock = lock
        self._work_ready = threading.Condition(lock)
        self._stopping = stopping
        self._ledger = ledger
        self._windows = windows
        self._executor = executor  # where checks run: this engine, or Ray tasks on nodes
        self._writes = writes
        self.services = services
        self.concurrency = max(concurrency, 1)
        self.per_image = max(per_image or self.concurrency, 1)
        self._queue = WorkQueue(self.per_image)
        self._threads: list[threading.Thread] = []
        self._budget = Budget(budget)
        self._budget_freed = False  # a probe ended since deferred work last looked
        self._released_at = float("-inf")  # monotonic
        # asked for while running (urgent, or a new digest): queued again, at this priority,
        # when it ends
        self._again: dict[Key, int] = {}
        self._started: dict[Key, float] = {}  # work running now: when it began (epoch)
        self._overload = Overload(ledger)
        self.stats = SchedulerStats(stretches=self._overload.stretches)
        self._note_budget(time.time())

    def start(self) -> None:
        for i in range(self.concurrency):
            worker = threading.Thread(target=self._work, name=f"envcheck-worker-{i}",
                                      daemon=True)
            worker.start()
            self._threads.append(worker)

    def stop(self) -> int:
        """Stop taking work (``stopping`` set) and drop what is queued; how much."""
        with self._lock:
            self._stopping.set()
            dropped = self._queue.clear()
            self.stats.queued = 0
            self._work_ready.notify_all()
        return dropped

    def join(self, deadline: float) -> list[str]:
        """Wait for the probes in flight until ``deadline`` (monotonic); the workers still
        running then."""
        for worker in self._threads:
            worker.join(timeout=max(deadline - time.monotonic(), 0.1))
        return [w.name for w in self._threads if w.is_alive()]

    def due(self, env_id: str, kind: ProbeKind, due: float | None = None) -> bool:
        now = time.time()
        with self._lock:
            due = now if due is None else due
            if self._stopping.is_set() or env_id not in self._ledger.envs or not self._queue.put(
                    self._overload.priority(env_id, kind, now), due, env_id, kind,
                    self._overload.rank(env_id, kind, due, now)):
                return False
            self.stats.queued = self._queue.queued
            self._work_ready.notify()
        return True

    def waiting(self, limit: int) -> list[Key]:
        """At most ``limit`` queued work, best first (what the workers take next)."""
        with self._lock:
            return [work.key for work in sorted(self._queue.waiting())[:limit]]

    def urgent(self, env_id: str, kind: ProbeKind) -> bool:
        """Probe now, ahead of the queue and past the budget; False if stopping or the
        environment is unknown."""
        key = (env_id, kind)
        with self._lock:
            if self._stopping.is_set() or env_id not in self._ledger.envs:
                return False
            self._ledger.urgent.add(key)
            if key not in self._queue:
                self._queue.put(URGENT, time.time(), env_id, kind)
            elif not self._queue.promote(key, URGENT):
                self._again[key] = URGENT  # running: its result began before the question
            self.stats.queued = self._queue.queued
            self._work_ready.notify()
        return True

    def _new_digest(self, key: Key, found_at: float) -> None:
        """(holding the lock) A kind of an environment whose image digest a probe that began
        at ``found_at`` found changed: validated at once, as new work, ahead of routine work
        and within the budget; if it runs now, once more when it ends, unless it began after
        that probe (it looked the digest up later: it validates the new image already)."""
        if self._stopping.is_set():
            return
        if key not in self._queue:
            self._queue.put(NEW, time.time(), *key)
        elif not self._queue.promote(key, NEW) and self._started.get(key, 0.0) < found_at:
            self._again.setdefault(key, NEW)
        self.stats.queued = self._queue.queued
        self._work_ready.notify()

    # --- the budget (call holding the lock) -----------------------------------------------

    def _afford(self, work: Work, env: Environment) -> bool:
        if work.priority == URGENT:
            return True
        return self._budget.affordable(env.suite, self._ledger.estimate(work.key), time.time())

    def _release_deferred(self) -> None:
        """Deferred work competes again, re-ranked: when a probe ended (its estimate is
        free), at most every RELEASE_MIN_S, and every BUDGET_RETRY_S as the hour slides on.
        Bounded so: each release re-ranks the whole backlog."""
        if not self._queue.deferred_count:
            return
        now = time.monotonic()
        since = now - self._released_at
        if since < RELEASE_MIN_S or (since < BUDGET_RETRY_S and not self._budget_freed):
            return
        self._released_at, self._budget_freed = now, False
        at = time.time()
        self._queue.release_deferred(lambda w: self._overload.priority(w.env_id, w.kind, at))

    def _note_budget(self, now: float) -> None:
        backlog: dict[str, int] = {}
        for work in self._queue.deferred:
            suite = self._ledger.suite(work.env_id)
            backlog[suite] = backlog.get(suite, 0) + 1
        self.stats.budget = self._budget.lines(now, backlog)
        self.stats.deferred_total = self._queue.deferred_total

    def _note_backlog(self) -> None:
        self.stats.backlog = self._overload.backlog.count
        self.stats.oldest_wait_s = self._overload.backlog.oldest_wait_s

    def report_budget(self) -> None:
        """Say what the budget could not afford, once a window, while it cannot."""
        with self._lock:
            self._note_budget(time.time())
            self._overload.measure(self._queue, time.time())
            self._note_backlog()
            lines = self.stats.budget
        fleet = lines[0] if lines else None
        if fleet is None or not fleet.backlog:
            return
        log.warning("budget exhausted: probes deferred", extra={
            "deferred": fleet.backlog, "spent_s": round(fleet.spent_s, 1),
            "budget_s": fleet.limit_s,
            "suites": {line.suite: {"deferred": line.backlog, "spent_s": round(line.spent_s, 1),
                                    "budget_s": line.limit_s}
                       for line in lines[1:] if line.backlog}})

    # --- work ---------------------------------------------------------------------------

    def _work(self) -> None:
        afford = self._afford if self._budget.limits.limited else None
        while True:
            with self._lock:
                picked = None
                while picked is None:
                    if self._stopping.is_set():
                        return
                    self._release_deferred()
                    if self._overload.tick(self._queue, time.time()):
                        self._note_backlog()
                    picked = self._queue.take(self._ledger.envs.get, afford)
                    if picked is None:
                        self._note_budget(time.time())
                        # deferred work looks again as the hour slides on
                        self._work_ready.wait(BUDGET_RETRY_S if self._queue.deferred_count
                                              else None)
                work, env = picked
                self._started[work.key] = time.time()
                self._overload.started(work, time.time())
                self._ledger.urgent.discard(work.key)  # started: what was asked for runs
                estimate = self._ledger.estimate(work.key)
                self._budget.start(env.suite, estimate)
                self._note_budget(time.time())
                self.stats.queued, self.stats.running = self._queue.queued, self._queue.running
            try:
                self._run(work, env)
            except Exception:  # a worker must survive anything one probe does
                log.exception("probe work failed", extra={"env": work.env_id,
                                                          "kind": str(work.kind)})
            finally:
                with self._lock:
                    self._budget.end(env.suite, estimate)
                    self._budget_freed = True  # deferred work may fit now
                    self._queue.done(work, env)
                    self._started.pop(work.key, None)
                    again = self._again.pop(work.key, None)
                    if again is not None and not self._stopping.is_set():
                        self._queue.put(again, time.time(), *work.key)
                    self.stats.completed += 1
                    self.stats.queued, self.stats.running = (self._queue.queued,
                                                             self._queue.running)
                    # all: an environment going idle may let several held probes run
                    self._work_ready.notify_all()

    def _run(self, work: Work, env: Environment) -> None:
        lag = max(time.time() - work.due, 0.0)
        self.stats.last_lag_s = lag
        self.stats.max_lag_s = max(self.stats.max_lag_s, lag)
        self.stats.lags.append(lag)
        with self._lock:
            window = self._windows.current()
        self._executor.check(env, [work.kind], self._windows.run_of(window), self._record,
                             self.services)

    def _record(self, result: ProbeResult) -> None:
        with self._windows.recording() as window:
            run_id = self._windows.run_of(window)
            result_id = self._writes.record(run_id, result)  # None: held
            with self._lock:
                found_at = result.started_at.timestamp()
                for key in self._ledger.note(result, window.before):
                    self._new_digest(key, found_at)
                now = time.time()
                self._budget.charge(self._ledger.suite(result.env_id), result.duration_s, now)
                self._note_budget(now)
                window.results.append(result)
                window.env_ids.add(result.env_id)
        extra = {"env": result.env_id, "kind": str(result.kind), "status": str(result.status),
                 "reason": str(result.reason), "duration_s": round(result.duration_s, 3),
                 "run": run_id, "result_id": result_id}
        if result_id is None:
            extra["held"] = True  # written later, when the store takes writes again
        log.info("probe result", extra=extra)
