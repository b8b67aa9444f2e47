"""The scheduler under overload (schedule/overload.py over the real WorkQueue and Ledger, pure,
in explicit time): the oldest evidence in its own intervals goes first, never-probed first;
waiting work ages (routine work to stale, quarantined work once twice as stretched as the
rest); urgent and new work stay first; the queue never holds more than the fleet's jobs; the
stretch and the backlog the metrics show."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from envcheck.catalogue.models import Environment, Schedules
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.schedule.budget import NEW, NORMAL, QUARANTINED, STALE, SUSPECT, URGENT
from envcheck.schedule.ledger import Ledger
from envcheck.schedule.overload import AGING, RERANK_S, Overload
from envcheck.schedule.workqueue import WorkQueue

T, D = ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES
SCHEDULES = Schedules(terminal=600.0, dependencies=3600.0, tests=None, datasource=None,
                      jitter_s=0, quarantined_factor=4.0)


def fleet(*ids: str) -> Ledger:
    return Ledger({i: Environment(id=i, image=f"img-{i}", suite="s", schedules=SCHEDULES)
                   for i in ids})


def result(ledger: Ledger, env_id: str, kind: ProbeKind, at: float) -> None:
    ledger.note(ProbeResult(env_id=env_id, kind=kind, status=Status.PASS, reason=Reason.OK,
                            summary="ok", duration_s=1.0,
                            started_at=datetime.fromtimestamp(at, UTC)), {})


def put(queue: WorkQueue, overload: Overload, env_id: str, kind: ProbeKind, due: float,
        now: float) -> bool:
    return queue.put(overload.priority(env_id, kind, now), due, env_id, kind,
                     overload.rank(env_id, kind, due, now))


def drain(queue: WorkQueue, ledger: Ledger) -> list[tuple[str, ProbeKind]]:
    order = []
    while (taken := queue.take(ledger.envs.get)) is not None:
        order.append(taken[0].key)
        queue.done(*taken)
    return order


def test_the_oldest_evidence_in_its_own_intervals_goes_first_never_probed_first() -> None:
    ledger = fleet("a", "b", "c", "d")
    now = 100_000.0
    result(ledger, "a", T, now - 1_500)  # 2.5 terminal intervals old
    result(ledger, "b", T, now - 3_000)  # 5 intervals
    result(ledger, "c", D, now - 7_920)  # 2.2 dependency intervals: the oldest result, yet
    overload, queue = Overload(ledger), WorkQueue(per_image=1)
    ledger.take_states(0, set(), set())
    # all fell due in the order a, b, c, d: today's queue would run them so
    for due, (env_id, kind) in enumerate([("a", T), ("b", T), ("c", D), ("d", T)]):
        assert put(queue, overload, env_id, kind, now - 100 + due, now)
    # never probed first (new), then, all stale, by age in intervals: b 5, a 2.5, c 2.2 (by
    # the last result alone c would go first, and the hourly kind would stretch least)
    assert drain(queue, ledger) == [("d", T), ("b", T), ("a", T), ("c", D)]

    today, queue = Overload(ledger, ordered=False), WorkQueue(per_image=1)
    for due, (env_id, kind) in enumerate([("a", T), ("b", T), ("c", D), ("d", T)]):
        assert put(queue, today, env_id, kind, now - 100 + due, now)
    assert drain(queue, ledger) == [("d", T), ("a", T), ("b", T), ("c", D)], \
        "today: new first, then by the time due"


def test_waiting_work_ages_routine_to_stale_quarantined_once_twice_as_stretched() -> None:
    ledger = fleet("normal", "suspect", "quar", "urgent", "new")
    start = 0.0
    for env_id in ("normal", "suspect", "quar", "urgent"):
        result(ledger, env_id, T, start)
    ledger.take_states(0, {"quar"}, {"suspect"})
    overload, queue = Overload(ledger), WorkQueue(per_image=1)
    now = start + 600.0  # one interval: all due
    for env_id in ("normal", "suspect", "quar"):
        assert put(queue, overload, env_id, T, now, now)
    assert sorted(w.priority for w in queue.waiting()) == [SUSPECT, NORMAL, QUARANTINED]

    # 2.5 intervals later nothing ran (a long overload): routine work is stale now
    overload.stretches.extend([10.0] * 5)  # the rest of the fleet runs 10 intervals apart
    now = start + 1_500.0
    assert overload.tick(queue, now)
    assert not overload.tick(queue, now + RERANK_S - 1), "ranked anew at most every RERANK_S"
    ranks = {w.env_id: w.priority for w in queue.waiting()}
    assert ranks == {"normal": STALE, "suspect": STALE, "quar": QUARANTINED}
    # quarantined: 4 x 600 s interval, rises past AGING x stretch x interval, not before
    rise = start + AGING * 10.0 * 2_400.0
    assert overload.priority("quar", T, rise - 1) == QUARANTINED
    assert overload.priority("quar", T, rise + 1) == STALE
    assert overload.tick(queue, rise + 1)
    assert {w.env_id: w.priority for w in queue.waiting()}["quar"] == STALE

    # urgent and new work still come first, and are not ranked down
    ledger.urgent.add(("urgent", T))
    assert put(queue, overload, "urgent", T, rise, rise + 1)
    assert put(queue, overload, "new", T, rise, rise + 1)
    assert overload.tick(queue, rise + 1 + RERANK_S)
    assert sorted(w.priority for w in queue.waiting()) == [URGENT, NEW, STALE, STALE, STALE]
    # within stale by age in its own intervals: routine work 80 of its intervals old, the
    # quarantined 20 of its (4x longer) ones
    assert drain(queue, ledger) == [("urgent", T), ("new", T), ("normal", T), ("suspect", T),
                                    ("quar", T)]


def test_the_queue_holds_at_most_one_work_per_job_however_long_the_overload() -> None:
    ids = [f"e{i}" for i in range(20)]
    ledger = fleet(*ids)
    ledger.take_states(0, {"e0"}, {"e1"})
    overload, queue = Overload(ledger), WorkQueue(per_image=2)
    rng = random.Random(7)
    jobs = [(e, k) for e in ids for k in (T, D)]
    now, longest, running = 0.0, 0, []
    for _ in range(5_000):  # every job due 100 times as often as one worker runs
        now += 1.0
        env_id, kind = rng.choice(jobs)
        put(queue, overload, env_id, kind, now, now)
        longest = max(longest, queue.queued)
        if rng.random() < 0.01:
            overload.tick(queue, now)
            taken = queue.take(ledger.envs.get)
            if taken is not None:
                running.append(taken)
        if running and rng.random() < 0.01:
            work, env = running.pop(0)
            result(ledger, work.env_id, work.kind, now)
            queue.done(work, env)
        assert queue.queued + queue.running <= len(jobs)
    assert len(jobs) // 2 < longest <= len(jobs)


def test_the_stretch_and_the_backlog() -> None:
    ledger = fleet("a", "b", "c")
    ledger.take_states(0, set(), set())
    for key in (("a", T), ("b", T), ("c", D)):
        result(ledger, *key, 0.0)
    overload, queue = Overload(ledger), WorkQueue(per_image=4)
    assert put(queue, overload, "a", T, 600.0, 600.0)
    assert put(queue, overload, "b", T, 1_800.0, 1_800.0)
    assert put(queue, overload, "c", D, 1_800.0, 1_800.0)
    # at 2,000 s: a waited 1,400 s, past its 600 s interval (a due time refused); b 200 s,
    # c 200 s of its hour: on time
    backlog = overload.measure(queue, 2_000.0)
    assert (backlog.count, backlog.oldest_wait_s) == (1, 1_400.0)
    # b (stale) starts 2,400 s after its result: 4 intervals apart; a 5; c (an hour) 1.25
    for env_id, kind, at in (("b", T, 2_400.0), ("a", T, 3_000.0), ("c", D, 4_500.0)):
        taken = queue.take(ledger.envs.get)
        assert taken is not None and taken[0].key == (env_id, kind)
        overload.started(taken[0], at)
        queue.done(*taken)
    assert list(overload.stretches) == [4.0, 5.0, 1.25]
    overload.tick(queue, 5_000.0)  # empty queue: nothing to rank, the stretch as it was
    assert overload.stretch == 1.0
    assert put(queue, overload, "a", T, 5_000.0, 5_000.0)
    assert overload.tick(queue, 5_000.0) and overload.stretch == 4.0
    assert overload.measure(queue, 5_000.0).count == 0


def test_a_tags_look_goes_ahead_of_sandbox_work_and_is_not_slowed_by_quarantine() -> None:
    ledger = fleet("quar", "new")
    result(ledger, "quar", T, 0.0)
    ledger.take_states(0, {"quar"}, set())
    env = ledger.envs["quar"]
    assert env.schedules.image is not None
    assert env.schedules.interval(ProbeKind.IMAGE, True) == env.schedules.image
    assert env.schedules.interval(T, True) == env.schedules.terminal * 4
    overload, queue = Overload(ledger), WorkQueue(per_image=2)
    now = 1_000.0
    assert put(queue, overload, "new", T, now - 50, now)  # queued first, new work
    assert put(queue, overload, "quar", ProbeKind.IMAGE, now, now)
    assert overload.priority("quar", ProbeKind.IMAGE, now) == URGENT
    assert drain(queue, ledger)[0] == ("quar", ProbeKind.IMAGE)
