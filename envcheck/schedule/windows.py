"""The scheduler's windows: the open one results are recorded into, and the closed ones
waiting for the store.

Each window with results is a check run; when it closes it is assessed (the feed's rule,
handed in). A closed window whose results are not all written waits, and is assessed once
they are, in the order windows closed: never on half its results, never dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from envcheck.core.errors import StoreError
from envcheck.core.outages import StoreOutages
from envcheck.core.results import Previous, ProbeResult
from envcheck.schedule.assessment import Assessment, WindowOutcome
from envcheck.schedule.ledger import Ledger
from envcheck.store.pending import DEFAULT_LIMIT, PendingWrites, store_reason

__all__ = ["ASSESSING", "WRITING", "Window", "Windows"]

# the scheduler's one logger, whichever of its modules speaks
log = logging.getLogger("envcheck.schedule.scheduler")

# Results kept in memory by windows waiting for the store (besides those it holds).
WAITING_RESULTS_MAX = DEFAULT_LIMIT
# what a store outage stops here (said once per outage)
WRITING = "writing results"
ASSESSING = "assessing windows"


@dataclass(eq=False)
class Window:
    run_id: str | None = None  # created with the window's first probe
    results: list[ProbeResult] = field(default_factory=list)
    env_ids: set[str] = field(default_factory=set)
    before: Previous = field(default_factory=dict)
    writers: int = 0  # results being handed to the store right now
    run_lock: threading.Lock = field(default_factory=threading.Lock)


class Windows:
    """The open window is guarded by the scheduler's ``lock``; the closed ones are touched
    only by whoever closes a window (one at a time). ``files()`` names the catalogue files
    of a new run; ``assessed()`` runs after each window is assessed; ``outages``: where the
    store being unavailable is said, once per outage."""

    def __init__(self, lock: threading.Lock, writes: PendingWrites, assessment: Assessment,
                 ledger: Ledger, files: Callable[[], list[str]],
                 assessed: Callable[[], None], outages: StoreOutages) -> None:
        self._lock = lock
        self._outages = outages
        self._records_done = threading.Condition(lock)
        self._writes = writes
        self._assessment = assessment
        self._ledger = ledger
        self._files = files
        self._assessed = assessed
        self._window: Window | None = None
        self._waiting: list[Window] = []  # closed, not assessed yet: their writes are held

    @property
    def unassessed(self) -> int:
        return len(self._waiting)

    # --- the open window ------------------------------------------------------------------

    def open(self) -> None:
        with self._lock:
            self._window = Window()

    def current(self) -> Window:
        """The open window (call holding the lock); after the final close, a new one: work
        that outlived the grace period still records, into a run the next start tidies."""
        if self._window is None:
            self._window = Window()
        return self._window

    def run_of(self, window: Window) -> str:
        with window.run_lock:
            if window.run_id is None:  # never raises: a run the store refuses is held
                window.run_id = self._writes.start_run("daemon", self._files())
            return window.run_id

    @contextmanager
    def recording(self) -> Iterator[Window]:
        """The open window, while a result is handed to the store: it closes only after."""
        with self._lock:
            window = self.current()
            window.writers += 1
        try:
            yield window
        finally:
            with self._lock:
                window.writers -= 1
                self._records_done.notify_all()

    def take(self, reopen: bool) -> Window | None:
        """Close the open window once the results being written to it are in (and open a
        new one if ``reopen``); None if it stays open: it has no results (and no run)."""
        with self._lock:
            window = self._window
            empty = window is None or (not window.results and not window.writers)
            if reopen and empty:
                window = None
            else:
                self._window = Window() if reopen else None
                while window is not None and window.writers:
                    self._records_done.wait()
        return window

    # --- the closed windows ---------------------------------------------------------------

    def flush_held(self) -> None:
        held = self._writes.held
        if self._writes.flush():
            # after an outage its line says so; else results held a moment are news
            if not self._outages.ran(WRITING, written=held) and held:
                log.info("held results written", extra={"results": held})
            return
        self._bound_waiting()
        refusal = self._writes.refusal
        if refusal is not None and self._outages.failed(
                WRITING, refusal, then="results held in memory, written in order once it "
                "takes writes again"):
            return
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

    def assess(self, closed: Window | None) -> tuple[WindowOutcome | None, bool]:
        """``closed`` (if it made a run) waits behind the windows closed before it; then
        every waiting window whose results are all written is assessed, oldest first. The
        outcome of ``closed`` if it was assessed now, and whether any window was."""
        if closed is not None and closed.run_id is not None:
            self._waiting.append(closed)
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
                if self._outages.failed(ASSESSING, exc, then="windows wait, assessed in order "
                                        "once it is back"):
                    break
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
        envs = self._ledger.known(window.env_ids)
        outcome = self._assessment.window(window.run_id, envs, window.results, window.before)
        self._outages.ran(ASSESSING)
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
        self._assessed()
        return outcome
