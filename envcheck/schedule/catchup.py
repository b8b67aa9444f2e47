"""The catch-up at start: results a killed daemon (or an interrupted ``envcheck check``)
left unassessed are assessed before the first window closes, in batches a stop need not
wait out."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from envcheck.schedule.assessment import Assessment
from envcheck.schedule.ledger import Ledger
from envcheck.schedule.reads import unassessed_env_ids
from envcheck.store import Store

__all__ = ["catch_up"]

# the scheduler's one logger, whichever of its modules speaks
log = logging.getLogger("envcheck.schedule.scheduler")

CATCH_UP_BATCH = 200


def catch_up(store: Store, ledger: Ledger, assessment: Assessment, stopping: threading.Event,
             follow: Callable[[], None]) -> None:
    """Assess the results a killed daemon (or an interrupted ``envcheck check``) left
    unassessed; then the states, priorities and probing rates ``follow``."""
    started = time.monotonic()
    ids = unassessed_env_ids(store)
    envs = ledger.known(ids)
    done = transitions = 0
    for i in range(0, len(envs), CATCH_UP_BATCH):  # a stop need not wait for all of it
        if stopping.is_set():
            break
        batch = envs[i:i + CATCH_UP_BATCH]
        transitions += len(assessment.catch_up(batch))
        done += len(batch)
    if done and not stopping.is_set():  # else the states read at start hold
        follow()
    log.info("unassessed results assessed", extra={
        "environments": done, "of": len(envs), "transitions": transitions,
        "seconds": round(time.monotonic() - started, 3)})
