"""The probing jobs: one timetable entry per (environment, kind), due one interval after its
last result, at the rate its quarantine sets."""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC

from apscheduler.triggers.interval import IntervalTrigger

from envcheck.catalogue.models import Environment
from envcheck.core.results import ProbeKind
from envcheck.schedule.ledger import Ledger
from envcheck.schedule.timetable import Job, Timetable
from envcheck.schedule.workqueue import Key

__all__ = ["Jobs"]

# the scheduler's one logger, whichever of its modules speaks
log = logging.getLogger("envcheck.schedule.scheduler")

# A backlog after a restart is spread over this many seconds at most instead of one burst.
RESTART_SPREAD_S = 5.0


@functools.cache
def _trigger(interval: float, jitter: float) -> IntervalTrigger:
    """One trigger per schedule, shared by its jobs: a trigger holds nothing of a job (each
    job keeps its own next time, and every job here is given its first), and a fleet of
    100,000 jobs need not carry 100,000 of them (nor look up the local zone for each)."""
    return IntervalTrigger(seconds=interval, jitter=jitter or None, timezone=UTC)


class Jobs:
    """``due(key, at)`` runs on the timetable's thread when a job is due: it only hands the
    work over."""

    def __init__(self, ledger: Ledger, due: Callable[[Key, float], bool]) -> None:
        self._ledger = ledger
        self.lock = threading.RLock()  # job changes: start, reload, quarantine changes
        self._intervals: dict[Key, float] = {}  # of the jobs scheduled now
        # the probes' jobs: one entry each, handed over once when due however late
        self._timetable = Timetable(due)

    def start(self) -> None:
        self._timetable.start()

    def stop(self) -> None:
        self._timetable.stop()

    def same_trigger(self, job: Job, env: Environment, kind: ProbeKind) -> bool:
        trigger = job.trigger
        return bool(trigger.interval_length == self._ledger.interval(env, kind)
                    and (trigger.jitter or 0.0) == env.schedules.jitter_s)

    def schedule(self, pairs: Iterable[tuple[Environment, ProbeKind]], now: float) -> int:
        """(Re)create the job of each (env, kind), due one interval after its last result;
        how many there are now. One hand-over to the timetable: a start schedules them all."""
        entries = []
        for env, kind in pairs:
            key = (env.id, kind)
            interval = self._ledger.interval(env, kind)
            if interval is None:
                self._timetable.remove(key)
                self._intervals.pop(key, None)
                continue
            jitter = env.schedules.jitter_s
            last = self._ledger.last_at.get(key)
            if last is None or last + interval <= now:
                first = now + random.uniform(0, min(interval, RESTART_SPREAD_S))
            else:
                # the same jitter as every later run: a fleet seeded at once does not fire at once
                first = last + interval + random.uniform(0, jitter)
            entries.append((key, _trigger(interval, jitter), first))
            self._intervals[key] = interval
        self._timetable.put_many(entries)
        return len(entries)

    def unschedule(self, env_id: str, kind: ProbeKind) -> int:
        """Remove the job of (env, kind), if there is one; 1 if there was."""
        self._intervals.pop((env_id, kind), None)
        return int(self._timetable.remove((env_id, kind)))

    def reschedule(self, env_ids: set[str]) -> None:
        """Quarantine changes the probing rate: a new job from the last result on."""
        if not env_ids:
            return
        envs = self._ledger.known(env_ids)
        with self.lock:
            self.schedule(((env, kind) for env in envs for kind in env.declared_kinds()),
                          time.time())
        log.info("probing rate changed", extra={"environments": sorted(env_ids)})

    def upcoming(self, until: float, limit: int) -> list[tuple[Key, float]]:
        """At most ``limit`` jobs due by ``until`` (epoch seconds), soonest first."""
        return self._timetable.upcoming(until, limit)

    def get(self, key: Key) -> Job | None:
        return self._timetable.get(key)

    def intervals(self) -> dict[Key, float]:
        """(environment, kind) -> the probing interval in force now, quarantine included:
        what the daemon schedules (cheap: no catalogue walk, no job store scan)."""
        return dict(self._intervals)

    def jobs(self) -> list[Job]:
        """The (environment, kind) jobs."""
        return self._timetable.jobs()

    def __len__(self) -> int:
        """How many (environment, kind) jobs are scheduled (cheap: no job is built)."""
        return len(self._timetable)
