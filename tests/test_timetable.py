"""The probes' timetable: a job handed over once however late, with the time it was last due;
replaced and removed entries never fire; a sooner entry wakes the sleeping thread."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator

import pytest
from apscheduler.triggers.interval import IntervalTrigger

from envcheck.core.results import ProbeKind
from envcheck.schedule.timetable import Timetable
from envcheck.schedule.workqueue import Key

T = ProbeKind.TERMINAL
HOUR = IntervalTrigger(seconds=3600)


@pytest.fixture
def fired() -> queue.Queue[tuple[Key, float]]:
    return queue.Queue()


@pytest.fixture
def table(fired: queue.Queue[tuple[Key, float]]) -> Iterator[Timetable]:
    t = Timetable(lambda key, due: fired.put((key, due)))
    t.start()
    yield t
    t.stop()
    assert not t.running


def test_a_late_job_fires_once_with_its_last_due_time(table: Timetable,
                                                      fired: queue.Queue[tuple[Key, float]]
                                                      ) -> None:
    first = time.time() - 3.5 * 3600  # three and a half intervals late
    table.put(("late", T), HOUR, first)
    key, due = fired.get(timeout=10)
    assert key == ("late", T) and due == pytest.approx(first + 3 * 3600, abs=1e-5)
    job = table.get(("late", T))
    assert job is not None and job.id == f"late:{T}"
    assert job.next_run_time.timestamp() == pytest.approx(first + 4 * 3600)
    assert fired.empty()


def test_replaced_and_removed_entries_never_fire(table: Timetable,
                                                 fired: queue.Queue[tuple[Key, float]]) -> None:
    now = time.time()
    table.put_many([(("moved", T), HOUR, now + 3600), (("gone", T), HOUR, now + 3600)])
    table.put(("moved", T), HOUR, now - 1)  # replaced: due now instead
    assert table.remove(("gone", T)) and not table.remove(("gone", T))
    table.put(("last", T), HOUR, now - 0.5)
    assert [fired.get(timeout=10)[0] for _ in range(2)] == [("moved", T), ("last", T)]
    assert {j.id for j in table.jobs()} == {f"moved:{T}", f"last:{T}"} and len(table) == 2


def test_a_sooner_entry_wakes_the_thread(table: Timetable,
                                         fired: queue.Queue[tuple[Key, float]]) -> None:
    table.put(("later", T), HOUR, time.time() + 3600)  # the thread sleeps for an hour
    due = time.time()
    table.put(("now", T), HOUR, due)
    assert fired.get(timeout=10) == (("now", T), due)


def test_many_replacements_keep_the_heap_bounded(table: Timetable) -> None:
    start = time.time() + 3600
    for i in range(5000):
        table.put(("same", T), HOUR, start + i)
    assert len(table) == 1 and len(table._heap) <= 2 + 1024 + 1
