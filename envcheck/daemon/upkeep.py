"""The daemon's periodic upkeep, each in a thread of its own: the looks at the rollouts every
window (what they flag handed to the scheduler), the store's prune, and the loop that runs
them (:func:`every`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from envcheck.core.results import ProbeKind
from envcheck.feed.assess import LookOutcome, StoreAssessment
from envcheck.schedule.scheduler import ProbeScheduler
from envcheck.store import Store
from envcheck.store.retention import Retention

__all__ = ["pruner", "rollout_look"]

log = logging.getLogger("envcheck.daemon")


def rollout_look(assessment: StoreAssessment, scheduler: ProbeScheduler,
                  wake: Callable[[], None] | None) -> Callable[[], None]:
    """One look at the rollouts counted since the last: what it flags anew is probed now,
    ahead of the queue (every declared kind), what it notes always solved gets its tests
    probe (whose controls a full validation plays); the notifier hears what moved."""

    def look() -> None:
        envs = {env.id: env for env in scheduler.catalogue.environments}
        outcome = assessment.rollouts(envs)
        if outcome is None:
            return
        for env_id in outcome.flagged:
            kinds = envs[env_id].declared_kinds()
            for kind in kinds:
                scheduler.enqueue_now(env_id, kind, urgent=True)
            log.info("rollouts flagged an environment: probing it now",
                     extra={"env": env_id, "kinds": [str(k) for k in kinds]})
        for env_id in outcome.always_solved:
            if env_id in outcome.flagged:
                continue  # its tests probe is queued already
            if ProbeKind.TESTS in envs[env_id].declared_kinds():
                scheduler.enqueue_now(env_id, ProbeKind.TESTS, urgent=True)
            log.info("rollouts noted an environment always solved: probing its tests now",
                     extra={"env": env_id})
        _log_look(outcome)
        if wake is not None and (outcome.transitions or outcome.incident is not None):
            wake()

    return look


def _log_look(outcome: LookOutcome) -> None:
    if outcome.incident is not None:
        log.warning("infrastructure incident", extra={"kind": outcome.incident[0],
                                                      "detail": outcome.incident[3]})
    for t in outcome.transitions:
        log.info("transition", extra={"env": t.env_id, "old": t.old_state, "new": t.new_state,
                                      "quarantined": t.quarantined, "reason": t.reason})


def pruner(store: Store, retention: Retention) -> Callable[[], None]:
    """One prune of the store, logged; the advice to turn on incremental vacuum, once."""
    advised = threading.Event()

    def prune() -> None:
        started = time.monotonic()
        report = store.prune(retention)
        log.info("store pruned", extra={**report.as_dict(),
                                        "seconds": round(time.monotonic() - started, 3)})
        if report.incremental_vacuum is False and not advised.is_set():
            advised.set()
            log.warning("the SQLite file does not give freed pages back: run `envcheck store "
                        "prune --vacuum` once, with the daemon stopped")

    return prune
