"""Scheduled probing: APScheduler decides *when*, a bounded pool of workers decides *how many*.

Each (environment, probe kind) is an interval job with jitter that only puts work on a
priority queue (stale first, then suspect, then the rest, quarantined last); ``concurrency``
worker threads take work from it, so a 2-core host never runs more sandboxes than that, and
no more than ``per_image`` of one image at once. A (environment, kind) already queued or
running is not queued again (APScheduler's ``max_instances=1`` only covers the enqueue).

Results are grouped into windows (``window_s``): each window is a check run, and when it
closes it is judged and assessed exactly like an ``envcheck check`` cycle (``assess_cycle``),
so the daemon and the CLI move states by the same rule.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from envcheck.catalogue import Catalogue, Environment
from envcheck.feed import CycleOutcome, Previous, applicable_kinds, assess_cycle, evaluate
from envcheck.results import ProbeKind, ProbeResult
from envcheck.runner import Services, check_environment
from envcheck.sandbox.base import SandboxRuntime
from envcheck.store import Store

__all__ = ["ProbeScheduler", "SchedulerStats"]

log = logging.getLogger(__name__)

STALE, SUSPECT, NORMAL, QUARANTINED = 0, 1, 2, 3


@dataclass(order=True, frozen=True)
class Work:
    priority: int
    due: float
    env_id: str = field(compare=False)
    kind: ProbeKind = field(compare=False)


@dataclass
class Window:
    run_id: str
    results: list[ProbeResult] = field(default_factory=list)
    env_ids: set[str] = field(default_factory=set)
    before: Previous = field(default_factory=dict)


@dataclass
class SchedulerStats:
    queued: int = 0
    running: int = 0
    completed: int = 0
    last_lag_s: float = 0.0
    max_lag_s: float = 0.0
    lags: deque[float] = field(default_factory=lambda: deque(maxlen=1000))


def interval_of(env: Environment, kind: ProbeKind, quarantined: bool) -> float | None:
    base: float | None = getattr(env.schedules, str(kind))
    if base is None:
        return None
    return base * env.schedules.quarantined_factor if quarantined else base


class ProbeScheduler:
    def __init__(self, catalogue: Catalogue, runtime: SandboxRuntime, store: Store, *,
                 concurrency: int = 2, per_image: int | None = None, window_s: float = 60.0,
                 services: Callable[[Catalogue, Store], Services] | None = None,
                 on_cycle: Callable[[CycleOutcome], None] | None = None) -> None:
        self._catalogue = catalogue
        self._runtime = runtime
        self._store = store
        self._concurrency = max(concurrency, 1)
        self._per_image = max(per_image or self._concurrency, 1)
        self._window_s = window_s
        self._build_services = services
        self._services: Services | None = services(catalogue, store) if services else None
        self._on_cycle = on_cycle
        self._queue: queue.PriorityQueue[Work] = queue.PriorityQueue()
        self._lock = threading.Lock()
        self._busy: set[tuple[str, ProbeKind]] = set()
        self._image_slots: dict[str, threading.BoundedSemaphore] = defaultdict(
            lambda: threading.BoundedSemaphore(self._per_image))
        self._stopping = threading.Event()
        self._workers: list[threading.Thread] = []
        self._last: Previous = {}
        self._quarantined: set[str] = set()
        self._suspect: set[str] = set()
        self._window: Window | None = None
        self.stats = SchedulerStats()
        self._aps = BackgroundScheduler(timezone=UTC, job_defaults={
            "coalesce": True, "max_instances": 1, "misfire_grace_time": 300})

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def catalogue(self) -> Catalogue:
        return self._catalogue

    def start(self) -> None:
        self._store.sync_suites(self._catalogue.suites)
        self._store.sync_environments(self._catalogue.environments)
        # Results a killed daemon left unassessed count now.
        evaluate(self._store, self._catalogue.environments)
        self._refresh_states()
        self._last = {(r.env_id, r.kind): r.status for r in self._store.latest_results()}
        self._open_window()
        self._schedule_all()
        self._aps.add_job(self.close_window, IntervalTrigger(seconds=self._window_s),
                          id="envcheck:window", replace_existing=True)
        for i in range(self._concurrency):
            worker = threading.Thread(target=self._work, name=f"envcheck-worker-{i}",
                                      daemon=True)
            worker.start()
            self._workers.append(worker)
        self._aps.start()
        log.info("scheduler started", extra={"jobs": len(self._aps.get_jobs()),
                                             "concurrency": self._concurrency})

    def stop(self, grace_s: float = 60.0) -> None:
        """Stop scheduling, drop queued work, let in-flight probes finish (and remove their
        containers) within ``grace_s``, then assess what they produced."""
        self._stopping.set()
        if self._aps.running:
            self._aps.shutdown(wait=False)
        dropped = 0
        while True:
            try:
                self._queue.get_nowait()
                dropped += 1
            except queue.Empty:
                break
        deadline = time.monotonic() + grace_s
        for worker in self._workers:
            worker.join(timeout=max(deadline - time.monotonic(), 0.1))
        self.close_window(reopen=False)
        log.info("scheduler stopped", extra={"dropped": dropped,
                                             "still_running": self.stats.running})

    def reload(self, catalogue: Catalogue) -> None:
        """Swap the catalogue (SIGHUP): jobs are replaced; in-flight work finishes."""
        self._catalogue = catalogue
        if self._build_services is not None:
            self._services = self._build_services(catalogue, self._store)
        self._store.sync_suites(catalogue.suites)
        self._store.sync_environments(catalogue.environments)
        for job in self._aps.get_jobs():
            if job.id != "envcheck:window":
                job.remove()
        self._schedule_all()
        log.info("catalogue reloaded", extra={"environments": len(catalogue.environments)})

    # --- scheduling ---------------------------------------------------------------------

    def _refresh_states(self) -> None:
        rows = self._store.env_states()
        self._quarantined = {r.env_id for r in rows if r.quarantined}
        self._suspect = {r.env_id for r in rows if r.state in ("degraded", "flaky", "broken")}

    def _schedule_all(self) -> None:
        now = datetime.now(UTC)
        latest = {(r.env_id, r.kind): r.started_at for r in self._store.latest_results()}
        for env in self._catalogue.environments:
            for kind in applicable_kinds(env):
                self._schedule(env, kind, latest.get((env.id, kind)), now)

    def _schedule(self, env: Environment, kind: ProbeKind, last: datetime | None,
                  now: datetime) -> None:
        interval = interval_of(env, kind, env.id in self._quarantined)
        if interval is None:
            return
        if last is None or last + timedelta(seconds=interval) <= now:
            # due now; spread a restart's backlog over a few seconds instead of one burst
            first = now + timedelta(seconds=random.uniform(0, min(interval, 5.0)))
        else:
            first = last + timedelta(seconds=interval)
        self._aps.add_job(self._due, IntervalTrigger(seconds=interval,
                                                     jitter=env.schedules.jitter_s or None),
                          args=(env.id, kind), id=f"{env.id}:{kind}", replace_existing=True,
                          next_run_time=first)

    def _priority(self, env_id: str, kind: ProbeKind) -> int:
        if env_id in self._quarantined:
            return QUARANTINED
        if (env_id, kind) not in self._last:
            return STALE
        return SUSPECT if env_id in self._suspect else NORMAL

    def _due(self, env_id: str, kind: ProbeKind) -> None:
        with self._lock:
            if (env_id, kind) in self._busy or self._stopping.is_set():
                return
            self._busy.add((env_id, kind))
        self._queue.put(Work(self._priority(env_id, kind), time.monotonic(), env_id, kind))
        self.stats.queued = self._queue.qsize()

    def enqueue_now(self, env_id: str, kind: ProbeKind) -> None:
        """Check soon, out of schedule (tests, the API)."""
        self._due(env_id, kind)

    # --- work ---------------------------------------------------------------------------

    def _work(self) -> None:
        while not self._stopping.is_set():
            try:
                work = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if self._stopping.is_set():
                break
            try:
                self._run(work)
            except Exception:  # a worker must survive anything one probe does
                log.exception("probe work failed", extra={"env": work.env_id,
                                                          "kind": str(work.kind)})
            finally:
                with self._lock:
                    self._busy.discard((work.env_id, work.kind))
                self.stats.queued = self._queue.qsize()

    def _run(self, work: Work) -> None:
        try:
            env = self._catalogue.environment(work.env_id)
        except KeyError:
            return  # removed by a reload while queued
        lag = time.monotonic() - work.due
        self.stats.last_lag_s = lag
        self.stats.max_lag_s = max(self.stats.max_lag_s, lag)
        self.stats.lags.append(lag)
        slot = self._image_slots[env.image]
        with slot:
            self.stats.running += 1
            try:
                check_environment(env, [work.kind], self._runtime, self._current_run(),
                                  self._record, self._services)
            finally:
                self.stats.running -= 1
        self.stats.completed += 1

    def _current_run(self) -> str:
        with self._lock:
            assert self._window is not None
            return self._window.run_id

    def _record(self, result: ProbeResult) -> None:
        with self._lock:
            window = self._window
            assert window is not None
            key = (result.env_id, result.kind)
            if key in self._last and key not in window.before:
                window.before[key] = self._last[key]
            self._last[key] = result.status
            window.results.append(result)
            window.env_ids.add(result.env_id)
            run_id = window.run_id
        self._store.record(run_id, result)
        log.info("probe result", extra={"env": result.env_id, "kind": str(result.kind),
                                        "status": str(result.status),
                                        "reason": str(result.reason),
                                        "duration_s": round(result.duration_s, 3)})

    # --- windows ------------------------------------------------------------------------

    def _open_window(self) -> None:
        run_id = self._store.start_run("daemon", list(self._catalogue.files))
        with self._lock:
            self._window = Window(run_id)

    def close_window(self, reopen: bool = True) -> CycleOutcome | None:
        """Close the current window as a check run, judge and assess it."""
        with self._lock:
            window = self._window
            self._window = None
        if reopen and not self._stopping.is_set():
            self._open_window()
        if window is None:
            return None
        self._store.finish_run(window.run_id)
        envs = [e for e in self._catalogue.environments if e.id in window.env_ids]
        outcome = assess_cycle(self._store, window.run_id, envs, window.results, window.before)
        if outcome.incident is not None:
            log.warning("infrastructure incident", extra={"run": window.run_id,
                                                          "detail": outcome.incident[3]})
        changed = {t.env_id for t in outcome.transitions if t.quarantined != t.was_quarantined}
        self._refresh_states()
        for env in self._catalogue.environments:
            if env.id in changed and not self._stopping.is_set():
                for kind in applicable_kinds(env):  # quarantine changes the probing rate
                    self._schedule(env, kind, datetime.now(UTC), datetime.now(UTC))
        for t in outcome.transitions:
            log.info("transition", extra={"env": t.env_id, "old": t.old_state,
                                          "new": t.new_state, "quarantined": t.quarantined,
                                          "reason": t.reason})
        if self._on_cycle is not None:
            self._on_cycle(outcome)
        return outcome

    def jobs(self) -> list[Any]:
        return list(self._aps.get_jobs())
