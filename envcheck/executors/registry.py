"""Choosing and connecting an executor by name; the one place that knows every executor.

Ray is imported only here, and only when chosen.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    wait_exponential,
)

from envcheck.core.errors import InfraError
from envcheck.executors.base import Executor, ExecutorConfig, ExecutorKind
from envcheck.executors.local import LocalExecutor

if TYPE_CHECKING:
    from envcheck.core.outages import StoreOutages
    from envcheck.kinds.datasource.sampling import ShapeStore

__all__ = ["open_executor", "wait_for_executor"]

log = logging.getLogger(__name__)


def open_executor(config: ExecutorConfig, *, shapes: ShapeStore | None = None,
                  outages: StoreOutages | None = None) -> Executor:
    """The configured executor, connected. Raises ``EngineUnreachable`` (local) or
    ``ExecutorUnavailable`` (ray) when it has nowhere to run checks.

    ``shapes`` is where data-source fingerprints are read and written (the store): remote
    checks return what they observed and the executor writes it here, in the caller;
    ``outages``: where it says, once per outage, that the store does not answer.
    """
    if config.kind is ExecutorKind.LOCAL:
        return LocalExecutor.from_env(config.concurrency)
    from envcheck.executors.ray import RayExecutor  # the only place Ray is ever imported

    return RayExecutor.connect(config.ray, shapes=shapes, outages=outages)


def wait_for_executor(config: ExecutorConfig, stop: threading.Event, *,
                      shapes: ShapeStore | None = None,
                      outages: StoreOutages | None = None,
                      max_wait_s: float | None = None) -> Executor:
    """:func:`open_executor` for a daemon: the engine or the cluster may come up after us.
    Retries with backoff (1 s doubling to 30 s) until ``stop`` or until the waits add up to
    ``max_wait_s``; every attempt has its own timeout."""

    def give_up(state: RetryCallState) -> bool:
        # idle_for: the waits so far, not the attempts' own time (each has its timeout)
        return stop.is_set() or (max_wait_s is not None and state.idle_for >= max_wait_s)

    def pause(seconds: float) -> None:
        stop.wait(seconds)  # a stop cuts the wait short

    def log_retry(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning("executor unavailable, retrying",
                    extra={"executor": str(config.kind), "error": str(exc),
                           "retry_in_s": delay})

    retrying = Retrying(retry=retry_if_exception_type(InfraError),
                        stop=give_up,
                        wait=wait_exponential(multiplier=1.0, max=30.0),
                        sleep=pause, before_sleep=log_retry, reraise=True)
    return retrying(open_executor, config, shapes=shapes, outages=outages)
