"""The kept readiness state (envcheck.core.readiness) over an injected clock: what a report
says of each dependency from the watcher's record alone, and the watcher threads' life.

Pure logic; a frozen engine and a frozen PostgreSQL behind the daemon's ``/readyz`` are in
tests/faults/test_frozen_dependencies.py.
"""

from __future__ import annotations

import threading

from envcheck.core.errors import EngineUnreachable
from envcheck.core.readiness import Check, Readiness, Watch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_watch_reports_the_last_answer_with_its_age() -> None:
    watch = Watch(interval_s=3.0, bound_s=2.5)
    assert watch.check(100.0) == Check("error: no answer yet", None)
    watch.asked(100.0)
    assert watch.check(101.0) == Check("error: no answer yet", None)
    watch.answered("ok", 100.2)
    assert watch.check(101.0) == Check("ok", 0.8)
    assert watch.check(101.0).ok
    watch.asked(103.2)
    assert watch.check(104.0) == Check("ok", 3.8), "an answer within the bound is awaited"
    watch.answered("error: engine unreachable", 104.2)
    assert watch.check(105.0) == Check("error: engine unreachable", 0.8)
    assert not watch.check(105.0).ok


def test_a_question_outstanding_past_the_bound_reads_as_not_answering() -> None:
    watch = Watch(interval_s=3.0, bound_s=2.5)
    watch.answered("ok", 100.0)
    watch.asked(103.0)
    assert watch.check(105.5).ok  # 2.5 s: at the bound, not past it
    assert watch.check(105.6) == Check("error: not answering for 3 s", 5.6)
    assert watch.check(143.0) == Check("error: not answering for 40 s", 43.0)
    watch.answered("ok", 143.5)
    assert watch.check(144.0) == Check("ok", 0.5)


def test_a_first_question_never_answered_reads_as_not_answering() -> None:
    watch = Watch(interval_s=3.0, bound_s=2.5)
    watch.asked(100.0)
    assert watch.check(110.0) == Check("error: not answering for 10 s", None)


def test_an_answer_nobody_renews_goes_stale() -> None:
    """A watcher stopped (or dead): its last ``ok`` proves nothing after an interval and
    the bound."""
    watch = Watch(interval_s=3.0, bound_s=2.5)
    watch.answered("ok", 100.0)
    assert watch.check(105.5).ok
    assert watch.check(106.0) == Check("error: not asked for 6 s", 6.0)


def test_readiness_records_each_question_and_its_errors() -> None:
    clock = Clock()

    def engine() -> None:
        raise EngineUnreachable("Docker engine unreachable at unix:///x: refused")

    def store() -> int:
        return 7

    def bare() -> None:
        raise RuntimeError

    ready = Readiness({"store": store, "engine": engine, "bare": bare}, monotonic=clock)
    for name in ("store", "engine", "bare"):
        ready.ask(name)
    clock.now += 1.0
    assert ready.checks() == {
        "store": Check("ok", 1.0),
        "engine": Check("error: Docker engine unreachable at unix:///x: refused", 1.0),
        "bare": Check("error: RuntimeError", 1.0),
    }


def test_a_hung_question_never_holds_a_report() -> None:
    clock = Clock()
    release = threading.Event()
    entered = threading.Event()
    hung = [False]

    def engine() -> None:
        if hung[0]:
            entered.set()
            release.wait(60)

    ready = Readiness({"engine": engine}, interval_s=3.0, bound_s=2.5, monotonic=clock)
    ready.ask("engine")
    hung[0] = True
    asking = threading.Thread(target=ready.ask, args=("engine",), daemon=True)
    asking.start()
    try:
        assert entered.wait(10)  # the question is recorded, and outstanding in its thread
        clock.now += 40.0
        assert ready.checks() == {"engine": Check("error: not answering for 40 s", 40.0)}
    finally:
        release.set()
        asking.join(timeout=10)
    assert ready.checks() == {"engine": Check("ok", 0.0)}


def watcher_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("envcheck-ready-")]


def test_watchers_ask_at_their_interval_and_stop() -> None:
    asked = {"store": threading.Semaphore(0), "engine": threading.Semaphore(0)}
    ready = Readiness({name: sem.release for name, sem in asked.items()}, interval_s=0.01)
    ready.start()
    try:
        for sem in asked.values():  # each asks again and again, in its own thread
            for _ in range(3):
                assert sem.acquire(timeout=10)
        assert {t.name for t in watcher_threads()} == {"envcheck-ready-store",
                                                       "envcheck-ready-engine"}
        assert all(c.ok for c in ready.checks().values())
    finally:
        ready.stop(timeout_s=10)
    assert watcher_threads() == []


def test_stop_does_not_wait_for_a_hung_question() -> None:
    release = threading.Event()
    entered = threading.Event()

    def hung() -> None:
        entered.set()
        release.wait(60)

    ready = Readiness({"engine": hung}, interval_s=0.01)
    ready.start()
    try:
        assert entered.wait(10)
        ready.stop(timeout_s=0.1)  # returns with the thread still held by the question
        [thread] = watcher_threads()
        assert thread.daemon, "a hung question never keeps the process alive"
    finally:
        release.set()
    thread.join(timeout=10)
    assert not thread.is_alive(), "once answered, a stopped watcher asks nothing more"
