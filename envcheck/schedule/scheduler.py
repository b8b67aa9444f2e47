"""Scheduled probing: a timetable decides *when*, a bounded pool of workers *how many*.

Each (environment, probe kind) is an interval job with jitter (an entry of
:mod:`.timetable`, timed by APScheduler's interval triggers) that only puts work on a
priority queue (stale first, then suspect, then the rest, quarantined last; urgent work, what
the training run's rollouts ask for, before all: ``enqueue_now(..., urgent=True)``);
``concurrency`` worker threads take work from it, so a 2-core host never runs more sandboxes
than that, and no more than ``per_image`` of one image at once; a busy image never idles a
worker, and an (environment, kind) already queued or running is not queued again
(:mod:`.workqueue`).
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

The images envcheck pulls (``pull: watch``) of the next due probes are pulled ahead of their
slots (:mod:`.prefetch`: the queued work, then the jobs due within ``prefetch_horizon_s``), so
a worker does not wait on the registry.

The parts, composed here: the jobs (:mod:`.jobs`), the workers and their budget
(:mod:`.workers`), the pulls ahead (:mod:`.prefetch`), the windows (:mod:`.windows`), what is
known of the fleet (:mod:`.ledger`, read by :mod:`.reads`), the catch-up (:mod:`.catchup`) and
a reload's job changes (:mod:`.reload`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from envcheck.catalogue.models import Catalogue, Environment
from envcheck.core.errors import StoreError
from envcheck.core.outages import StoreOutages
from envcheck.core.results import ProbeKind
from envcheck.executors.base import Executor, PullsAhead
from envcheck.executors.cycle import Services
from envcheck.schedule.assessment import Assessment, WindowOutcome
from envcheck.schedule.budget import BudgetLimits
from envcheck.schedule.catchup import catch_up
from envcheck.schedule.jobs import Jobs
from envcheck.schedule.ledger import Ledger
from envcheck.schedule.prefetch import Prefetch
from envcheck.schedule.reads import latest_outcomes, states
from envcheck.schedule.reload import renew_jobs
from envcheck.schedule.timetable import Job
from envcheck.schedule.windows import Windows
from envcheck.schedule.workers import SchedulerStats, Workers
from envcheck.schedule.workqueue import Key
from envcheck.store import Store
from envcheck.store.pending import PendingWrites, store_reason

__all__ = ["ProbeScheduler"]

log = logging.getLogger(__name__)

WINDOW_JOB = "envcheck:window"
CATCH_UP_JOB = "envcheck:catch-up"
READING = "reading the fleet's states"  # what a store outage stops here (said once)


class ProbeScheduler:
    def __init__(self, catalogue: Catalogue, executor: Executor, store: Store, *,
                 concurrency: int = 2, per_image: int | None = None, window_s: float = 60.0,
                 services: Callable[[Catalogue, Store], Services] | None = None,
                 assessment: Assessment,
                 on_cycle: Callable[[], None] | None = None,
                 writes: PendingWrites | None = None,
                 budget: BudgetLimits | None = None,
                 outages: StoreOutages | None = None,
                 prefetch_interval_s: float = 5.0,
                 prefetch_horizon_s: float = 300.0) -> None:
        self._catalogue = catalogue
        # what the store being unavailable stops, said once per outage
        self._outages = outages or StoreOutages()
        self._store = store
        # runs and results go through here: held while the store refuses writes
        self._writes = writes or PendingWrites(store)
        self._window_s = window_s
        self._build_services = services
        self._on_cycle = on_cycle
        self._assessment = assessment
        # _lock guards the queue, the stats, the states and the window; never call the store
        # or the timetable while holding it (the timetable calls Workers.due, though not
        # holding its own lock).
        self._lock = threading.Lock()
        self._close_lock = threading.Lock()  # one window closes at a time
        self._stopping = threading.Event()
        self._ledger = Ledger({env.id: env for env in catalogue.environments})
        self._windows = Windows(self._lock, self._writes, assessment, self._ledger,
                                lambda: list(self._catalogue.files), self._assessed,
                                self._outages)
        self._workers = Workers(
            self._lock, self._stopping, self._ledger, self._windows, executor, self._writes,
            concurrency=concurrency, per_image=per_image, budget=budget or BudgetLimits(),
            services=services(catalogue, store) if services else None)
        self._jobs = Jobs(self._ledger, self._due)
        # the images of the next due probes pulled ahead of their slots (pull: watch)
        self._prefetch = Prefetch(self._upcoming, lambda: self._workers.services,
                                  self._stopping, interval_s=prefetch_interval_s,
                                  ahead=executor.pull_ahead
                                  if isinstance(executor, PullsAhead) else None)
        self._prefetch_horizon_s = prefetch_horizon_s
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

    @property
    def stats(self) -> SchedulerStats:
        return self._workers.stats

    def start(self) -> None:
        self._store.sync_suites(self._catalogue.suites)
        self._store.sync_environments(self._catalogue.environments)
        self._fleet(self._catalogue)
        self._refresh_states()
        self._ledger.seed(latest_outcomes(self._store))
        self._windows.open()
        with self._jobs.lock:
            self._jobs.schedule(((env, kind) for env in self._catalogue.environments
                                 for kind in env.declared_kinds()), time.time())
            self._aps.add_job(self.close_window, IntervalTrigger(seconds=self._window_s),
                              id=WINDOW_JOB, executor="window", replace_existing=True)
            # before the first window closes, on the same thread, without delaying the start
            self._aps.add_job(self._catch_up, id=CATCH_UP_JOB, executor="window")
        self._workers.start()
        self._jobs.start()
        self._prefetch.start()
        self._aps.start()
        log.info("scheduler started", extra={"jobs": len(self._jobs),
                                             "environments": len(self._ledger.envs),
                                             "concurrency": self._workers.concurrency,
                                             "per_image": self._workers.per_image})

    def stop(self, grace_s: float = 60.0, flush_s: float = 10.0) -> None:
        """Stop scheduling, drop queued work, let in-flight probes finish (and remove their
        containers) within ``grace_s``, then assess what they produced. Results the store
        refused wait for it at most ``flush_s`` more (within the grace period)."""
        deadline = time.monotonic() + grace_s
        dropped = self._workers.stop()
        self._jobs.stop()
        self._prefetch.stop()
        if self._aps.running:
            # The one-off catch-up gone first: APScheduler removes a one-off job it has just
            # handed over, and once shut down it looks for it among jobs not yet added, so a
            # shutdown at that moment failed its thread (JobLookupError). A catch-up not run
            # yet runs at the next start; close_window below assesses what this run wrote.
            with contextlib.suppress(JobLookupError):
                self._aps.remove_job(CATCH_UP_JOB)
            self._aps.shutdown(wait=True)  # waits for a window being closed right now
        still = self._workers.join(deadline)
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
                             "windows_unassessed": self._windows.unassessed,
                             "error": self._writes.error})
        log.info("scheduler stopped", extra={"dropped": dropped, "still_running": len(still)})

    def reload(self, catalogue: Catalogue) -> None:
        """Swap the catalogue (SIGHUP): jobs of removed environments go, new ones are added,
        changed schedules are replaced, the rest keep their timing; in-flight work finishes,
        queued work of a removed environment is dropped. Only what changed is touched: the
        store's rows and the jobs of environments added, removed or defined anew."""
        with self._jobs.lock:
            old = self._ledger.envs
            envs = {env.id: env for env in catalogue.environments}
            changed = [env for env in catalogue.environments if old.get(env.id) != env]
            renewed = {env.id for env in changed}
            self._catalogue = catalogue
            if self._build_services is not None:
                self._workers.services = self._build_services(catalogue, self._store)
            self._store.sync_suites(catalogue.suites)
            self._store.sync_environments(changed, seen=[e for e in envs if e not in renewed])
            self._fleet(catalogue)
            with self._lock:
                self._ledger.envs = envs
            if self._stopping.is_set():
                return
            added, removed = renew_jobs(self._jobs, self._ledger, self._lock, old, envs,
                                        changed)
        log.info("jobs reloaded", extra={"environments": len(catalogue.environments),
                                              "changed": len(changed),
                                              "jobs_added": added, "jobs_removed": removed})

    def _fleet(self, catalogue: Catalogue) -> None:
        moved = len(self._assessment.fleet(catalogue.environments))
        if moved:
            log.info("fleet changed: environments retired or back",
                     extra={"transitions": moved})


    def _due(self, key: Key, due: float) -> bool:
        queued = self._workers.due(key[0], key[1], due)
        if queued:
            self._prefetch.poke()
        return queued

    def _upcoming(self, limit: int) -> list[tuple[Environment, ProbeKind]]:
        """The next due probes, soonest first: the queued work, then the jobs due within
        the prefetch's horizon."""
        keys = self._workers.waiting(limit)
        if len(keys) < limit:
            until = time.time() + self._prefetch_horizon_s
            keys += [key for key, _ in self._jobs.upcoming(until, limit - len(keys))
                     if key not in keys]
        envs = self._ledger.envs
        return [(envs[env_id], kind) for env_id, kind in keys if env_id in envs]

    def _catch_up(self) -> None:
        catch_up(self._store, self._ledger, self._assessment, self._stopping,
                 lambda: self._jobs.reschedule(self._refresh_states()))

    def _refresh_states(self) -> set[str]:
        """Re-read states; the environments whose quarantine changed."""
        generation = self._store.generation()
        quarantined, suspect = states(self._store)
        with self._lock:
            return self._ledger.take_states(generation, quarantined, suspect)

    def enqueue_now(self, env_id: str, kind: ProbeKind, *, urgent: bool = False) -> bool:
        """Check soon, out of schedule (tests, the API). False if it is already queued or
        running, or the environment is unknown. ``urgent``: ahead of the queue and past the
        budget (what the training run's rollouts ask for); queued work is promoted, running
        work runs again when it ends; False only if the environment is unknown."""
        if urgent:
            return self._workers.urgent(env_id, kind)
        return self._workers.due(env_id, kind)

    # --- windows ------------------------------------------------------------------------

    def close_window(self, reopen: bool = True) -> WindowOutcome | None:
        """Close the current window as a check run; write what the store refused so far,
        then assess, oldest first, every closed window whose results are all written. A
        window without results stays open (and leaves no run). The outcome of the window
        closed now if it could be assessed now, else None."""
        with self._close_lock:
            window = self._windows.take(reopen)
            self._windows.flush_held()
            self._workers.report_budget()
            outcome, assessed = self._windows.assess(window)
            if not assessed and reopen and not self._stopping.is_set():
                try:
                    if self._store.generation() != self._ledger.generation:
                        self._jobs.reschedule(self._refresh_states())  # e.g. a manual quarantine
                except StoreError as exc:
                    self._unreadable(exc)
                else:
                    self._outages.ran(READING)
            return outcome

    def _unreadable(self, exc: StoreError) -> None:
        if not self._outages.failed(READING, exc, then="probing at the rates last read"):
            log.error("store unreadable", extra={"error": store_reason(exc)})

    def _assessed(self) -> None:
        """A window assessed: the states, priorities and probing rates follow."""
        try:
            changed = self._refresh_states()
        except StoreError as exc:
            self._unreadable(exc)
            changed = set()
        else:
            self._outages.ran(READING)
        if not self._stopping.is_set():
            self._jobs.reschedule(changed)
        if self._on_cycle is not None:
            self._on_cycle()

    def intervals(self) -> dict[Key, float]:
        """(environment, kind) -> the probing interval in force now, quarantine included:
        what the daemon schedules (cheap: no catalogue walk, no job store scan)."""
        return self._jobs.intervals()

    def jobs(self) -> list[Job]:
        """The (environment, kind) jobs."""
        return self._jobs.jobs()

    def job_count(self) -> int:
        """How many (environment, kind) jobs are scheduled (cheap: no job is built)."""
        return len(self._jobs)
