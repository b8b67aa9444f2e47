"""Scheduled probing: a timetable decides *when*, a bounded pool of workers *how many*.

Each (environment, probe kind) is an interval job with jitter (an entry of
:mod:`.timetable`, timed by APScheduler's interval triggers) that only puts work on a
priority queue (stale first, then suspect, then the rest, quarantined last); ``concurrency``
worker threads take work from it, so a 2-core host never runs more sandboxes than that, and
no more than ``per_image`` of one image at once; a busy image never idles a worker, and an
(environment, kind) already queued or running is not queued again (:mod:`.workqueue`).
Quarantined environments are probed ``quarantined_factor`` times less often; their jobs are
rescheduled when the quarantine changes (by a window's assessment or by hand).

Results are grouped into windows (``window_s``): each window with results is a check run, and
when it closes it is judged and assessed exactly like an ``envcheck check`` cycle
(``assess_cycle``), so the daemon and the CLI move states by the same rule. A window in which
nothing happened leaves no run behind.

The store may refuse writes for a while (a full disk): runs and results then go through
:class:`~envcheck.store.pending.PendingWrites`, held in order and written at the next window
tick that finds the store writable again. A closed window whose results are not all written
waits, and is assessed once they are (in the order windows closed): never assessed on half
its results, never dropped. At stop, held writes get what is left of the grace period.

A **budget** of sandbox-seconds per hour (:mod:`.budget`; the fleet's and per suite, both
optional) is spent on the queue's best work first: work it cannot afford now is deferred
(still queued, so its next due time is refused and it is probed less often) and competes
again, re-ranked, every few seconds and whenever a probe ends. Each window that ends with
work deferred says so in the log (how many, per suite); the metrics show spend, budget and
backlog.

Idle cost: the timetable's thread sleeps until the next job is due (the enqueue runs inline
in it, no pool), APScheduler's until the next window, workers sleep on a condition, and an
empty window costs one query.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence, Sized
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy import func
from sqlalchemy import select as sa_select
from sqlalchemy.exc import SQLAlchemyError

from envcheck.catalogue.models import Catalogue, Environment
from envcheck.core.errors import StoreError
from envcheck.core.results import Previous, ProbeKind, ProbeResult, Status
from envcheck.executors.base import Executor
from envcheck.executors.cycle import Services
from envcheck.schedule.budget import Budget, BudgetLimits, BudgetLine, worth
from envcheck.schedule.timetable import Job, Timetable
from envcheck.schedule.workqueue import Key, Work, WorkQueue
from envcheck.store import Store
from envcheck.store.core_tables import RESULTS, RUNS, STATES
from envcheck.store.pending import DEFAULT_LIMIT, PendingWrites, store_reason
from envcheck.store.sql import operation_failed
from envcheck.store.tables import RunState, TransitionRow

__all__ = ["ProbeScheduler", "SchedulerStats"]

log = logging.getLogger(__name__)

WINDOW_JOB = "envcheck:window"
CATCH_UP_JOB = "envcheck:catch-up"
CATCH_UP_BATCH = 200
# A backlog after a restart is spread over this many seconds at most instead of one burst.
RESTART_SPREAD_S = 5.0
# No result for this many intervals: the (environment, kind) counts as stale.
STALE_INTERVALS = 2.0
# Results kept in memory by windows waiting for the store (besides those it holds).
WAITING_RESULTS_MAX = DEFAULT_LIMIT
# What a probe is expected to cost before it ever ran (then: its newest duration).
DEFAULT_ESTIMATE_S = 60.0
# How often deferred work looks at the budget again when nothing else wakes the workers,
# and at most how often it does when probes end.
BUDGET_RETRY_S = 5.0
RELEASE_MIN_S = 1.0


class WindowOutcome(Protocol):
    """What the assessment of a window says: an infrastructure incident, or transitions."""

    @property
    def incident(self) -> tuple[str, int, int, str] | None: ...
    @property
    def transitions(self) -> Sequence[TransitionRow]: ...


class Assessment(Protocol):
    """How closed windows are judged: the feed's rule, wired in by the daemon
    (:class:`envcheck.feed.assess.StoreAssessment`), so the scheduler decides only *when*."""

    def window(self, run_id: str, envs: Sequence[Environment],
               results: Sequence[ProbeResult], before: Previous) -> WindowOutcome: ...

    def catch_up(self, envs: Sequence[Environment]) -> Sized: ...

    def fleet(self, envs: Sequence[Environment]) -> Sized:
        """``envs`` is the whole fleet now: retire the environments it no longer names,
        bring back those it names again."""
        ...


@dataclass(eq=False)
class Window:
    run_id: str | None = None  # created with the window's first probe
    results: list[ProbeResult] = field(default_factory=list)
    env_ids: set[str] = field(default_factory=set)
    before: Previous = field(default_factory=dict)
    writers: int = 0  # results being handed to the store right now
    run_lock: threading.Lock = field(default_factory=threading.Lock)


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


def _epoch(at: datetime) -> float:
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def _rows(store: Store, query: Any) -> list[Any]:
    """A read of a few columns over the whole fleet as plain rows: 10,000 ORM objects with
    their JSON columns would take most of a second, at start and at every window."""
    try:
        with store.engine.connect() as conn:
            return list(conn.execute(query))
    except SQLAlchemyError as exc:
        raise operation_failed(exc) from exc


def _unassessed_env_ids(store: Store) -> set[str]:
    """Environments with results in interrupted runs: nobody assessed those runs.

    A superset over time (assessing again changes nothing), bounded by the fleet.
    """
    query = (sa_select(RESULTS.c.env_id).distinct()
             .join(RUNS, RUNS.c.id == RESULTS.c.run_id)
             .where(RUNS.c.state == RunState.INTERRUPTED.value))
    return {row[0] for row in _rows(store, query)}


def _latest_outcomes(store: Store) -> list[Any]:
    """(env_id, kind, status, started_at) of the latest result of every environment and
    kind (by started_at, then id)."""
    rank = func.row_number().over(partition_by=(RESULTS.c.env_id, RESULTS.c.kind),
                                  order_by=(RESULTS.c.started_at.desc(), RESULTS.c.id.desc()))
    names = ("env_id", "kind", "status", "started_at")
    ranked = sa_select(*(RESULTS.c[n] for n in names), rank.label("rank")).subquery()
    return _rows(store, sa_select(*(ranked.c[n] for n in names)).where(ranked.c.rank == 1))


@functools.cache
def _trigger(interval: float, jitter: float) -> IntervalTrigger:
    """One trigger per schedule, shared by its jobs: a trigger holds nothing of a job (each
    job keeps its own next time, and every job here is given its first), and a fleet of
    100,000 jobs need not carry 100,000 of them (nor look up the local zone for each)."""
    return IntervalTrigger(seconds=interval, jitter=jitter or None, timezone=UTC)


class ProbeScheduler:
    def __init__(self, catalogue: Catalogue, executor: Executor, store: Store, *,
                 concurrency: int = 2, per_image: int | None = None, window_s: float = 60.0,
                 services: Callable[[Catalogue, Store], Services] | None = None,
                 assessment: Assessment,
                 on_cycle: Callable[[], None] | None = None,
                 writes: PendingWrites | None = None,
                 budget: BudgetLimits | None = None) -> None:
        self._catalogue = catalogue
        self._envs = {env.id: env for env in catalogue.environments}
        self._executor = executor  # where checks run: this engine, or Ray tasks on nodes
        self._store = store
        # runs and results go through here: held while the store refuses writes
        self._writes = writes or PendingWrites(store)
        self._waiting: list[Window] = []  # closed, not assessed yet: their writes are held
        self._concurrency = max(concurrency, 1)
        self._per_image = max(per_image or self._concurrency, 1)
        self._window_s = window_s
        self._build_services = services
        self._services: Services | None = services(catalogue, store) if services else None
        self._on_cycle = on_cycle
        self._assessment = assessment
        # _lock guards the queue, the stats, the states and the window; never call the store
        # or the timetable while holding it (the timetable calls _due, though not holding
        # its own lock).
        self._lock = threading.Lock()
        self._work_ready = threading.Condition(self._lock)
        self._records_done = threading.Condition(self._lock)
        self._queue = WorkQueue(self._per_image)
        self._close_lock = threading.Lock()  # one window closes at a time
        self._jobs_lock = threading.RLock()  # job changes: start, reload, quarantine changes
        self._stopping = threading.Event()
        self._workers: list[threading.Thread] = []
        self._last: Previous = {}
        self._last_at: dict[Key, float] = {}
        self._intervals: dict[Key, float] = {}  # of the jobs scheduled now
        self._quarantined: set[str] = set()
        self._suspect: set[str] = set()
        self._generation = -1
        self._window: Window | None = None
        self._budget = Budget(budget or BudgetLimits())
        self._cost: dict[Key, float] = {}  # newest duration: the budget's estimate
        self._new: set[Key] = set()  # defined anew by a reload, no result since
        self._budget_freed = False  # a probe ended since deferred work last looked
        self._released_at = float("-inf")  # monotonic
        self.stats = SchedulerStats()
        self._note_budget(time.time())
        # the probes' jobs: one entry each, handed over once when due however late
        self._timetable = Timetable(lambda key, due: self._due(key[0], key[1], due))
        # the windows and the catch-up, on one thread of their own
        self._aps = BackgroundScheduler(
            timezone=UTC, executors={"window": ThreadPoolExecutor(1)},
            # A late window still closes (once): skipping it would skip a whole interval.
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None})

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def catalogue(self) -> Catalogue:
        return self._catalogue

    @property
    def writes(self) -> PendingWrites:
        return self._writes

    def start(self) -> None:
        self._store.sync_suites(self._catalogue.suites)
        self._store.sync_environments(self._catalogue.environments)
        self._fleet(self._catalogue)
        self._refresh_states()
        kinds, statuses = {k.value: k for k in ProbeKind}, {s.value: s for s in Status}
        for env_id, kind, status, started_at in _latest_outcomes(self._store):
            key = (env_id, kinds[kind])  # not ProbeKind(kind): 17,500 enum calls take 0.1 s
            self._last[key] = statuses[status]
            self._last_at[key] = _epoch(started_at)
        with self._lock:
            self._window = Window()
        with self._jobs_lock:
            self._schedule(((env, kind) for env in self._catalogue.environments
                            for kind in env.declared_kinds()), time.time())
            self._aps.add_job(self.close_window, IntervalTrigger(seconds=self._window_s),
                              id=WINDOW_JOB, executor="window", replace_existing=True)
            # before the first window closes, on the same thread, without delaying the start
            self._aps.add_job(self._catch_up, id=CATCH_UP_JOB, executor="window")
        for i in range(self._concurrency):
            worker = threading.Thread(target=self._work, name=f"envcheck-worker-{i}",
                                      daemon=True)
            worker.start()
            self._workers.append(worker)
        self._timetable.start()
        self._aps.start()
        log.info("scheduler started", extra={"jobs": len(self._timetable),
                                             "environments": len(self._envs),
                                             "concurrency": self._concurrency,
                                             "per_image": self._per_image})

    def stop(self, grace_s: float = 60.0, flush_s: float = 10.0) -> None:
        """Stop scheduling, drop queued work, let in-flight probes finish (and remove their
        containers) within ``grace_s``, then assess what they produced. Results the store
        refused wait for it at most ``flush_s`` more (within the grace period)."""
        deadline = time.monotonic() + grace_s
        with self._lock:
            self._stopping.set()
            dropped = self._queue.clear()
            self.stats.queued = 0
            self._work_ready.notify_all()
        self._timetable.stop()
        if self._aps.running:
            # The one-off catch-up gone first: APScheduler removes a one-off job it has just
            # handed over, and once shut down it looks for it among jobs not yet added, so a
            # shutdown at that moment failed its thread (JobLookupError). A catch-up not run
            # yet runs at the next start; close_window below assesses what this run wrote.
            with contextlib.suppress(JobLookupError):
                self._aps.remove_job(CATCH_UP_JOB)
            self._aps.shutdown(wait=True)  # waits for a window being closed right now
        for worker in self._workers:
            worker.join(timeout=max(deadline - time.monotonic(), 0.1))
        still = [w.name for w in self._workers if w.is_alive()]
        if still:
            # They record into a new run, left running: the next start marks it interrupted,
            # assesses its results and reaps their containers.
            log.warning("probes still running after the grace period",
                        extra={"workers": still, "grace_s": grace_s})
        # the store may be taking writes again: held results get what is left of the grace
        self._writes.flush_within(min(max(deadline - time.monotonic(), 0.0), flush_s))
        self.close_window(reopen=False)
        if self._writes.status() is not None:
            # Lost with this process. Runs already written stay running: the next start
            # marks them interrupted and assesses whatever of them was written.
            log.error("results not written at shutdown: the store refuses writes",
                      extra={"held": self._writes.held, "dropped": self._writes.dropped,
                             "windows_unassessed": len(self._waiting),
                             "error": self._writes.error})
        log.info("scheduler stopped", extra={"dropped": dropped, "still_running": len(still)})

    def reload(self, catalogue: Catalogue) -> None:
        """Swap the catalogue (SIGHUP): jobs of removed environments go, new ones are added,
        changed schedules are replaced, the rest keep their timing; in-flight work finishes,
        queued work of a removed environment is dropped. Only what changed is touched: the
        store's rows and the jobs of environments added, removed or defined anew."""
        with self._jobs_lock:
            old = self._envs
            envs = {env.id: env for env in catalogue.environments}
            changed = [env for env in catalogue.environments if old.get(env.id) != env]
            renewed = {env.id for env in changed}
            self._catalogue = catalogue
            if self._build_services is not None:
                self._services = self._build_services(catalogue, self._store)
            self._store.sync_suites(catalogue.suites)
            self._store.sync_environments(changed, seen=[e for e in envs if e not in renewed])
            self._fleet(catalogue)
            with self._lock:
                self._envs = envs
            if self._stopping.is_set():
                return
            removed = 0
            for env_id in old.keys() - envs.keys():
                for kind in old[env_id].declared_kinds():
                    removed += self._unschedule(env_id, kind)
            now = time.time()
            renew: list[tuple[Environment, ProbeKind]] = []
            for env in changed:  # added, or defined anew
                kinds = env.declared_kinds()
                before = old.get(env.id)
                with self._lock:  # a new image or spec: evidence nobody has, worth most
                    self._new.update((env.id, k) for k in kinds if before is None
                                     or before.spec_hash(k) != env.spec_hash(k))
                for kind in before.declared_kinds() if before is not None else []:
                    if kind not in kinds:
                        removed += self._unschedule(env.id, kind)
                for kind in kinds:
                    job = self._timetable.get((env.id, kind))
                    if job is not None and self._same_trigger(job, env, kind):
                        continue  # the same schedule keeps its timing
                    removed += self._unschedule(env.id, kind)
                    renew.append((env, kind))
            added = self._schedule(renew, now)
        log.info("jobs reloaded", extra={"environments": len(catalogue.environments),
                                              "changed": len(changed),
                                              "jobs_added": added, "jobs_removed": removed})

    def _fleet(self, catalogue: Catalogue) -> None:
        moved = len(self._assessment.fleet(catalogue.environments))
        if moved:
            log.info("fleet changed: environments retired or back",
                     extra={"transitions": moved})

    def _catch_up(self) -> None:
        """Assess the results a killed daemon (or an interrupted ``envcheck check``) left
        unassessed; then the states, priorities and probing rates follow."""
        started = time.monotonic()
        ids = _unassessed_env_ids(self._store)
        envs = [self._envs[e] for e in sorted(ids) if e in self._envs]
        done = transitions = 0
        for i in range(0, len(envs), CATCH_UP_BATCH):  # a stop need not wait for all of it
            if self._stopping.is_set():
                break
            batch = envs[i:i + CATCH_UP_BATCH]
            transitions += len(self._assessment.catch_up(batch))
            done += len(batch)
        if done and not self._stopping.is_set():  # else the states read at start hold
            self._reschedule(self._refresh_states())
        log.info("unassessed results assessed", extra={
            "environments": done, "of": len(envs), "transitions": transitions,
            "seconds": round(time.monotonic() - started, 3)})

    # --- scheduling ---------------------------------------------------------------------

    def _refresh_states(self) -> set[str]:
        """Re-read states; the environments whose quarantine changed."""
        generation = self._store.generation()
        rows = _rows(self._store, sa_select(STATES.c.env_id, STATES.c.state,
                                            STATES.c.quarantined))
        quarantined = {env_id for env_id, _, q in rows if q}
        suspect = {env_id for env_id, state, _ in rows if state in ("degraded", "flaky",
                                                                     "broken")}
        with self._lock:
            changed = quarantined ^ self._quarantined
            self._quarantined, self._suspect = quarantined, suspect
            self._generation = generation
        return changed

    def _interval(self, env: Environment, kind: ProbeKind) -> float | None:
        return env.schedules.interval(kind, env.id in self._quarantined)

    def _same_trigger(self, job: Job, env: Environment, kind: ProbeKind) -> bool:
        trigger = job.trigger
        return bool(trigger.interval_length == self._interval(env, kind)
                    and (trigger.jitter or 0.0) == env.schedules.jitter_s)

    def _schedule(self, pairs: Iterable[tuple[Environment, ProbeKind]], now: float) -> int:
        """(Re)create the job of each (env, kind), due one interval after its last result;
        how many there are now. One hand-over to the timetable: a start schedules them all."""
        entries = []
        for env, kind in pairs:
            key = (env.id, kind)
            interval = self._interval(env, kind)
            if interval is None:
                self._timetable.remove(key)
                self._intervals.pop(key, None)
                continue
            jitter = env.schedules.jitter_s
            last = self._last_at.get(key)
            if last is None or last + interval <= now:
                first = now + random.uniform(0, min(interval, RESTART_SPREAD_S))
            else:
                # the same jitter as every later run: a fleet seeded at once does not fire at once
                first = last + interval + random.uniform(0, jitter)
            entries.append((key, _trigger(interval, jitter), first))
            self._intervals[key] = interval
        self._timetable.put_many(entries)
        return len(entries)

    def _unschedule(self, env_id: str, kind: ProbeKind) -> int:
        """Remove the job of (env, kind), if there is one; 1 if there was."""
        self._intervals.pop((env_id, kind), None)
        return int(self._timetable.remove((env_id, kind)))

    def _priority(self, env_id: str, kind: ProbeKind, now: float) -> int:
        """What the next probe of (env, kind) is worth (:func:`.budget.worth`)."""
        last = self._last_at.get((env_id, kind))
        env = self._envs.get(env_id)
        interval = self._interval(env, kind) if env is not None else None
        stale = last is None or (interval is not None and now - last > STALE_INTERVALS * interval)
        return worth(new=last is None or (env_id, kind) in self._new, stale=stale,
                     suspect=env_id in self._suspect, quarantined=env_id in self._quarantined)

    # --- the budget (call holding the lock) -----------------------------------------------

    def _estimate(self, key: Key) -> float:
        return self._cost.get(key, DEFAULT_ESTIMATE_S)

    def _afford(self, work: Work, env: Environment) -> bool:
        return self._budget.affordable(env.suite, self._estimate(work.key), time.time())

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
        self._queue.release_deferred(lambda w: self._priority(w.env_id, w.kind, at))

    def _note_budget(self, now: float) -> None:
        backlog: dict[str, int] = {}
        for work in self._queue.deferred:
            env = self._envs.get(work.env_id)
            suite = env.suite if env is not None else ""
            backlog[suite] = backlog.get(suite, 0) + 1
        self.stats.budget = self._budget.lines(now, backlog)
        self.stats.deferred_total = self._queue.deferred_total

    def _due(self, env_id: str, kind: ProbeKind, due: float | None = None) -> bool:
        now = time.time()
        with self._lock:
            if self._stopping.is_set() or env_id not in self._envs or not self._queue.put(
                    self._priority(env_id, kind, now), now if due is None else due, env_id, kind):
                return False
            self.stats.queued = self._queue.queued
            self._work_ready.notify()
        return True

    def enqueue_now(self, env_id: str, kind: ProbeKind) -> bool:
        """Check soon, out of schedule (tests, the API). False if it is already queued or
        running, or the environment is unknown."""
        return self._due(env_id, kind)

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
                    picked = self._queue.take(self._envs.get, afford)
                    if picked is None:
                        self._note_budget(time.time())
                        # deferred work looks again as the hour slides on
                        self._work_ready.wait(BUDGET_RETRY_S if self._queue.deferred_count
                                              else None)
                work, env = picked
                estimate = self._estimate(work.key)
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
            window = self._current_window()
        self._executor.check(env, [work.kind], self._run_of(window), self._record,
                             self._services)

    def _current_window(self) -> Window:
        """The open window (call holding the lock); after the final close, a new one: work
        that outlived the grace period still records, into a run the next start tidies."""
        if self._window is None:
            self._window = Window()
        return self._window

    def _run_of(self, window: Window) -> str:
        with window.run_lock:
            if window.run_id is None:  # never raises: a run the store refuses is held
                window.run_id = self._writes.start_run("daemon", list(self._catalogue.files))
            return window.run_id

    def _record(self, result: ProbeResult) -> None:
        key = (result.env_id, result.kind)
        with self._lock:
            window = self._current_window()
            window.writers += 1
        try:
            run_id = self._run_of(window)
            result_id = self._writes.record(run_id, result)  # None: held
            with self._lock:
                if key in self._last and key not in window.before:
                    window.before[key] = self._last[key]
                self._last[key] = result.status
                self._last_at[key] = _epoch(result.started_at)
                self._cost[key] = result.duration_s
                self._new.discard(key)
                env = self._envs.get(result.env_id)
                now = time.time()
                self._budget.charge(env.suite if env is not None else "", result.duration_s,
                                    now)
                self._note_budget(now)
                window.results.append(result)
                window.env_ids.add(result.env_id)
        finally:
            with self._lock:
                window.writers -= 1
                self._records_done.notify_all()
        extra = {"env": result.env_id, "kind": str(result.kind), "status": str(result.status),
                 "reason": str(result.reason), "duration_s": round(result.duration_s, 3),
                 "run": run_id, "result_id": result_id}
        if result_id is None:
            extra["held"] = True  # written later, when the store takes writes again
        log.info("probe result", extra=extra)

    # --- windows ------------------------------------------------------------------------

    def close_window(self, reopen: bool = True) -> WindowOutcome | None:
        """Close the current window as a check run; write what the store refused so far,
        then assess, oldest first, every closed window whose results are all written. A
        window without results stays open (and leaves no run). The outcome of the window
        closed now if it could be assessed now, else None."""
        with self._close_lock:
            with self._lock:
                window = self._window
                empty = window is None or (not window.results and not window.writers)
                if reopen and empty:
                    window = None
                else:
                    self._window = Window() if reopen else None
                    while window is not None and window.writers:
                        self._records_done.wait()
            self._flush_held()
            self._report_budget()
            if window is not None and window.run_id is not None:
                self._waiting.append(window)
            outcome, assessed = self._assess_waiting(window)
            if not assessed and reopen and not self._stopping.is_set():
                try:
                    if self._store.generation() != self._generation:
                        self._reschedule(self._refresh_states())  # e.g. a manual quarantine
                except StoreError as exc:
                    log.error("store unreadable", extra={"error": store_reason(exc)})
            return outcome

    def _report_budget(self) -> None:
        """Say what the budget could not afford, once a window, while it cannot."""
        with self._lock:
            self._note_budget(time.time())
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

    def _flush_held(self) -> None:
        held = self._writes.held
        if self._writes.flush():
            if held:
                log.info("held results written", extra={"results": held})
            return
        self._bound_waiting()
        log.error("store not writable: results held", extra={
            "held": self._writes.held, "dropped": self._writes.dropped,
            "windows_unassessed": len(self._waiting), "error": self._writes.error})

    def _bound_waiting(self) -> None:
        """Waiting windows keep their results for the incident judgement; over the bound,
        the oldest give them up and are assessed from the store alone."""
        total = sum(len(w.results) for w in self._waiting)
        for w in self._waiting:
            if total <= WAITING_RESULTS_MAX:
                break
            total -= len(w.results)
            w.results.clear()
            w.before.clear()

    def _assess_waiting(self, closed: Window | None) -> tuple[WindowOutcome | None, bool]:
        outcome, assessed = None, False
        while self._waiting:
            window = self._waiting[0]
            assert window.run_id is not None
            if self._writes.holds(window.run_id):
                break  # its results are not all written: assessed at a later tick
            try:
                result = self._assess(window)
            except (StoreError, OSError) as exc:  # e.g. the exports, on a full disk
                if isinstance(exc, StoreError):
                    self._writes.note_failure(exc)
                log.error("window not assessed yet: the store refuses writes",
                          extra={"run": window.run_id, "windows_unassessed": len(self._waiting),
                                 "error": store_reason(exc) if isinstance(exc, StoreError)
                                 else str(exc)})
                break
            self._waiting.pop(0)
            assessed = True
            if window is closed:
                outcome = result
        return outcome, assessed

    def _assess(self, window: Window) -> WindowOutcome:
        assert window.run_id is not None
        envs = [self._envs[e] for e in sorted(window.env_ids) if e in self._envs]
        outcome = self._assessment.window(window.run_id, envs, window.results, window.before)
        self._writes.note_success()
        # Finished only once assessed: killed in between, the run is found interrupted and
        # its results are assessed at the next start.
        self._writes.finish_run(window.run_id)
        if outcome.incident is not None:
            log.warning("infrastructure incident", extra={"run": window.run_id,
                                                          "detail": outcome.incident[3]})
        for t in outcome.transitions:
            log.info("transition", extra={"env": t.env_id, "old": t.old_state,
                                          "new": t.new_state, "quarantined": t.quarantined,
                                          "reason": t.reason})
        try:
            changed = self._refresh_states()
        except StoreError as exc:
            log.error("store unreadable", extra={"error": store_reason(exc)})
            changed = set()
        if not self._stopping.is_set():
            self._reschedule(changed)
        if self._on_cycle is not None:
            self._on_cycle()
        return outcome

    def _reschedule(self, env_ids: set[str]) -> None:
        """Quarantine changes the probing rate: a new job from the last result on."""
        if not env_ids:
            return
        envs = [self._envs[e] for e in sorted(env_ids) if e in self._envs]
        with self._jobs_lock:
            self._schedule(((env, kind) for env in envs for kind in env.declared_kinds()),
                           time.time())
        log.info("probing rate changed", extra={"environments": sorted(env_ids)})

    def intervals(self) -> dict[Key, float]:
        """(environment, kind) -> the probing interval in force now, quarantine included:
        what the daemon schedules (cheap: no catalogue walk, no job store scan)."""
        return dict(self._intervals)

    def jobs(self) -> list[Job]:
        """The (environment, kind) jobs."""
        return self._timetable.jobs()

    def job_count(self) -> int:
        """How many (environment, kind) jobs are scheduled (cheap: no job is built)."""
        return len(self._timetable)

