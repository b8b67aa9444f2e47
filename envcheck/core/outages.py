"""What the store being unavailable stops, said once per outage.

A long-running process has parts that need the store every window or every probe (a look at
the rollouts, the reuse advice of a probe, the assessment of a window). While the store is
unavailable (:class:`~envcheck.core.errors.StoreUnavailable`: it does not answer, dropped the
connection, is full, or the lease on it is lost) each of them fails the same way again and
again; that is a state the process knows, not news. :class:`StoreOutages` says it once per
part: one ``store unavailable`` line naming the part, the store and its error, and what the
part does meanwhile, the first time the part cannot run; one ``store available again`` line
when it next runs. Anything else a part raises is unexpected: :meth:`StoreOutages.failed`
says it is not the store's, and the caller logs it with its traceback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from envcheck.core.errors import StoreUnavailable

__all__ = ["AVAILABLE_AGAIN", "UNAVAILABLE", "StoreOutages", "every"]

log = logging.getLogger(__name__)

UNAVAILABLE = "store unavailable"
AVAILABLE_AGAIN = "store available again"


class StoreOutages:
    """The parts of a process that could not run for the store's unavailability, each since
    when and why. Thread-safe: a part may fail in one thread and run again in another."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._down: dict[str, tuple[float, str]] = {}  # part -> (since, the store)

    def failed(self, part: str, exc: BaseException, then: str = "") -> bool:
        """``part`` could not run for ``exc``. The store's unavailability: True, and the
        first time in this outage one line (``then``: what the part does meanwhile). Else
        False: nobody expected it, the caller logs it with its traceback."""
        if not isinstance(exc, StoreUnavailable):
            return False
        with self._lock:
            first = part not in self._down
            if first:
                self._down[part] = (self._monotonic(), exc.where)
        if first:
            extra = {"part": part, "store": exc.where, "error": exc.reason}
            log.error(UNAVAILABLE, extra={**extra, "then": then} if then else extra)
        return True

    def ran(self, part: str, **extra: object) -> bool:
        """``part`` ran: if it could not before, one line saying for how long (``extra``:
        what it caught up on), and True."""
        if part not in self._down:  # the common case, without the lock (a dict lookup)
            return False
        with self._lock:
            down = self._down.pop(part, None)
        if down is None:
            return False
        since, where = down
        log.info(AVAILABLE_AGAIN, extra={"part": part, "store": where,
                                         "down_s": round(self._monotonic() - since, 1),
                                         **extra})
        return True

    def down(self) -> dict[str, str]:
        """The parts that could not run, and the store each could not reach."""
        with self._lock:
            return {part: where for part, (_, where) in self._down.items()}


def every(name: str, interval_s: float, stop: threading.Event, work: Callable[[], object],
          part: str, outages: StoreOutages, then: str = "", first_s: float | None = None
          ) -> threading.Thread:
    """Run ``work`` (``part`` of a process's upkeep) every ``interval_s``, the first time
    after ``first_s``, in a thread ``name`` of its own until ``stop``. A failure never ends
    it (the next round tries again): the store unavailable is said once per outage
    (``then``: what the part does meanwhile), anything else with its traceback."""

    def loop() -> None:
        wait = interval_s if first_s is None else first_s
        while not stop.wait(wait):  # periodic work until stop, not a retry
            wait = interval_s
            try:
                work()
            except Exception as exc:  # a process must not lose its upkeep to one round
                if not outages.failed(part, exc, then):
                    log.exception("%s failed", part)
            else:
                outages.ran(part)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread
