"""What the daemon's dependencies last answered, kept so that a health endpoint reads it
without waiting on any of them.

One thread per dependency asks it (the engine's ping, a read of the store) every
``interval_s`` and records the outcome and when it came. A report reads only that record:
each check ``ok`` or its error, with the age of its last answer. A question outstanding
longer than ``bound_s`` reads as "not answering for N s", whatever the last answer was: a
frozen engine or a hung database holds a watcher's thread, never the endpoint that says so.
Idle, a watcher costs one question per interval.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["BOUND_S", "INTERVAL_S", "Check", "Readiness", "Watch"]

INTERVAL_S = 3.0  # between questions to one dependency
BOUND_S = 2.5  # a question outstanding longer than this: "not answering"
OK = "ok"


@dataclass(frozen=True, slots=True)
class Check:
    """One dependency as a report shows it: ``ok`` or ``error: why``, and the seconds since
    its last answer (None: it never answered)."""

    status: str
    age_s: float | None

    @property
    def ok(self) -> bool:
        return self.status == OK


class Watch:
    """The record of one dependency: its last answer, and since when a question is
    outstanding. Pure state over a clock's readings; the caller asks."""

    def __init__(self, interval_s: float = INTERVAL_S, bound_s: float = BOUND_S) -> None:
        self.interval_s = interval_s
        self.bound_s = bound_s
        self._lock = threading.Lock()
        self._answer: str | None = None
        self._answered_at: float | None = None
        self._asked_at: float | None = None

    def asked(self, now: float) -> None:
        with self._lock:
            self._asked_at = now

    def answered(self, outcome: str, now: float) -> None:
        with self._lock:
            self._answer, self._answered_at, self._asked_at = outcome, now, None

    def check(self, now: float) -> Check:
        with self._lock:
            answer, answered_at, asked_at = self._answer, self._answered_at, self._asked_at
        age = None if answered_at is None else round(max(now - answered_at, 0.0), 1)
        if asked_at is not None and now - asked_at > self.bound_s:
            return Check(f"error: not answering for {now - asked_at:.0f} s", age)
        if answer is None:
            return Check("error: no answer yet", age)
        if asked_at is None and age is not None and age > self.interval_s + self.bound_s:
            # nobody is asking: the watcher stopped, and an old answer proves nothing now
            return Check(f"error: not asked for {age:.0f} s", age)
        return Check(answer, age)


def _outcome(question: Callable[[], object]) -> str:
    """``ok``, or ``error: why`` for whatever the question raised (a watcher never dies of
    a dependency's failure)."""
    try:
        question()
    except Exception as exc:
        return f"error: {exc}" if str(exc) else f"error: {type(exc).__name__}"
    return OK


class Readiness:
    """Watchers over named questions (each raises when its dependency is not usable), in
    threads of their own from :meth:`start` until :meth:`stop`."""

    def __init__(self, questions: Mapping[str, Callable[[], object]], *,
                 interval_s: float = INTERVAL_S, bound_s: float = BOUND_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._questions = dict(questions)
        self._watches = {name: Watch(interval_s, bound_s) for name in questions}
        self._interval_s = interval_s
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def ask(self, name: str) -> None:
        """Ask one dependency now and record its answer (blocks as long as it does)."""
        watch = self._watches[name]
        watch.asked(self._monotonic())
        outcome = _outcome(self._questions[name])
        watch.answered(outcome, self._monotonic())

    def checks(self) -> dict[str, Check]:
        """Every dependency as last recorded; never waits on one."""
        now = self._monotonic()
        return {name: watch.check(now) for name, watch in self._watches.items()}

    def start(self) -> None:
        for name in self._questions:
            thread = threading.Thread(target=self._loop, args=(name,), daemon=True,
                                      name=f"envcheck-ready-{name}")
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop asking; a thread held by a hung dependency is left to its own timeout (it
        is a daemon thread, and asks nothing more)."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(timeout=max(deadline - time.monotonic(), 0.0))

    def _loop(self, name: str) -> None:
        while not self._stop.is_set():
            self.ask(name)
            self._stop.wait(self._interval_s)  # periodic questions, not a retry
