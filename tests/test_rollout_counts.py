"""The pure parts of the rollouts' way in: a batch's body read whole (``read_batch``), each
producer's sequence numbers as ranges (``merge_ranges``, ``seen_in``, ``fresh``), the
counters a batch adds (``count``, ``fold_days``), and group commit's answers
(``GroupCommit``, with a writer of its own in place of a store)."""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from sqlalchemy.dialects import postgresql, sqlite

from envcheck.core.rollouts import ENVIRONMENT_OUTCOMES, TRAINER_OUTCOMES, Outcome, Rollout
from envcheck.rollouts.batch import BatchError, read_batch
from envcheck.store.core_tables import ROLLOUTS
from envcheck.store.groupcommit import GroupCommit
from envcheck.store.rollout_counts import count, fold_days, fresh, merge_ranges, seen_in
from envcheck.store.rollouts import counters_upsert
from envcheck.store.tables.rollouts import ROLLOUT_COUNTERS
from envcheck.store.tables.rollups import RollupPeriod

T = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


def rollout(seq: int, **kw: object) -> Rollout:
    base: dict[str, object] = {"env_id": "e", "at": T, "producer": "p", "seq": seq,
                               "outcome": Outcome.OK}
    return Rollout(**{**base, **kw})  # type: ignore[arg-type]


def test_every_outcome_is_the_environments_the_trainers_or_ok() -> None:
    assert ENVIRONMENT_OUTCOMES.isdisjoint(TRAINER_OUTCOMES)
    assert ENVIRONMENT_OUTCOMES | TRAINER_OUTCOMES | {Outcome.OK} == set(Outcome)


def test_ranges_join_when_adjacent_and_the_oldest_join_past_the_limit() -> None:
    assert merge_ranges([], [3, 1, 2, 2, 7]) == [[1, 3], [7, 7]]
    assert merge_ranges([[0, 9]], [10, 11, 20]) == [[0, 11], [20, 20]]
    assert merge_ranges([[5, 9]], [0, 1, 2, 3, 4]) == [[0, 9]]  # earlier numbers, later
    assert merge_ranges([[0, 0], [2, 2], [4, 4], [6, 6]], [8], limit=3) == [
        [0, 4], [6, 6], [8, 8]]  # the two oldest gaps now count as seen
    ranges = [[0, 4], [10, 10], [20, 29]]
    assert [s for s in range(32) if seen_in(ranges, s)] == [*range(5), 10, *range(20, 30)]
    assert not seen_in([], 0)


def test_fresh_drops_numbers_seen_before_or_earlier_in_the_batch() -> None:
    batch = [rollout(1), rollout(2), rollout(1), rollout(9), rollout(1, producer="q")]
    new, ranges = fresh(batch, {"p": [[8, 10]]})
    assert [(r.producer, r.seq) for r in new] == [("p", 1), ("p", 2), ("q", 1)]
    assert ranges == {"p": [[1, 2], [8, 10]], "q": [[1, 1]]}


def test_counts_add_per_hour_environment_digest_and_outcome_in_utc() -> None:
    plus2 = timezone(timedelta(hours=2))
    buckets = count([
        rollout(0, reward=0.0, agent_s=3.0), rollout(1, reward=1.0),
        rollout(2, reward=0.25, at=T + timedelta(minutes=59)),
        rollout(3, at=(T + timedelta(minutes=30)).astimezone(plus2)),  # 12:30+02: 10:30Z
        rollout(4, outcome=Outcome.SANDBOX_LOST, image_digest="sha256:x"),
        rollout(5, at=T + timedelta(hours=1))])
    assert sorted(buckets) == [(T, "e", "", "ok"), (T, "e", "sha256:x", "sandbox_lost"),
                               (T + timedelta(hours=1), "e", "", "ok")]
    ok = dict(zip(ROLLOUT_COUNTERS, buckets[(T, "e", "", "ok")], strict=False))
    assert (ok["count"], ok["reward_n"], ok["reward_zero"], ok["reward_one"]) == (4, 3, 1, 1)
    assert ok["reward_sum"] == 1.25 and ok["reward_sq"] == 1.0625
    assert (ok["agent_s_sum"], ok["agent_s_n"], ok["verifier_s_n"]) == (3.0, 1, 0)
    first, last = buckets[(T, "e", "", "ok")][-2:]
    assert (first, last) == (T, T + timedelta(minutes=59))
    assert first.utcoffset() == timedelta(0)


def test_day_rows_add_the_hour_rows_of_their_day() -> None:
    hours = count([rollout(0, reward=1.0), rollout(1, at=T + timedelta(hours=5)),
                   rollout(2, at=T + timedelta(days=1))])

    def row(key: tuple[datetime, str, str, str], b: list[object]) -> SimpleNamespace:
        values = {**dict(zip(ROLLOUT_COUNTERS, b, strict=False)), "hour": key[0],
                  "env_id": key[1], "image_digest": key[2], "outcome": key[3],
                  "first_at": b[-2], "last_at": b[-1]}
        return SimpleNamespace(_mapping=values)

    days = fold_days(row(k, b) for k, b in hours.items())
    midnight = T.replace(hour=0)
    assert sorted(days) == [(midnight, "e", "", "ok"),
                            (midnight + timedelta(days=1), "e", "", "ok")]
    day = days[(midnight, "e", "", "ok")]
    assert (day[0], day[1], day[-2], day[-1]) == (2, 1, T, T + timedelta(hours=5))


def test_the_upsert_binds_times_as_the_column_type_stores_them() -> None:
    plus2 = timezone(timedelta(hours=2))
    for dialect in (sqlite.dialect(), postgresql.psycopg.dialect()):  # type: ignore[attr-defined]
        upsert = counters_upsert(dialect)
        processor = ROLLOUTS.c.hour.type.dialect_impl(dialect).bind_processor(dialect)
        for at in (T, T + timedelta(microseconds=7),
                   datetime(2026, 1, 1, tzinfo=plus2).astimezone(UTC)):
            assert upsert.datetime_param(at) == (processor(at) if processor else at)
        rows = upsert.rows(count([rollout(0)]), RollupPeriod.HOUR)
        assert len(rows) == 1


# --- a batch's body ---------------------------------------------------------------------------


def rec(seq: int, **kw: object) -> dict[str, object]:
    return {"env_id": "e", "at": "2026-03-01T10:00:00Z", "producer": "p", "seq": seq,
            "outcome": "ok", **kw}


def test_a_batch_reads_from_an_array_ndjson_or_gzip() -> None:
    records = [rec(0, reward=1.0, durations={"agent_s": 2.5}), rec(1)]
    array = json.dumps(records).encode()
    lines = b"\n".join(json.dumps(r).encode() for r in records)
    got = [read_batch(array), read_batch(lines, content_type="application/x-ndjson"),
           read_batch(gzip.compress(array), content_encoding="gzip"),
           read_batch(b"\n" + lines + b"\n\n", content_type="application/jsonl")]
    assert all(g == got[0] for g in got)
    assert got[0][0] == Rollout("e", T, "p", 0, Outcome.OK, None, 1.0, None, 2.5, None)


@pytest.mark.parametrize(("body", "status", "index", "field"), [
    (json.dumps([rec(0), {**rec(1), "seq": "x"}]), 400, 1, "seq"),
    (json.dumps([rec(0), {"env_id": "e"}]), 400, 1, "at"),
    (json.dumps([rec(0, durations={"agent_s": float("nan")})]).replace("NaN", "1e999"), 400,
     0, "durations.agent_s"),
    ("[" + ",".join([json.dumps(rec(0))] * 20_001) + "]", 413, None, None),
])
def test_a_bad_batch_says_which_record_and_field(body: str, status: int, index: int | None,
                                                 field: str | None) -> None:
    with pytest.raises(BatchError) as refused:
        read_batch(body.encode())
    assert (refused.value.status, refused.value.index, refused.value.field) == (
        status, index, field)


def test_a_record_in_the_future_is_refused_by_its_index() -> None:
    future = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    with pytest.raises(BatchError) as refused:
        read_batch(json.dumps([rec(0), rec(1), rec(2, at=future)]).encode())
    assert (refused.value.index, refused.value.field, refused.value.kind) == (
        2, "at", "in_the_future")
    # within the skew a sender's clock may have, accepted
    near = (datetime.now(UTC) + timedelta(minutes=30)).isoformat()
    assert len(read_batch(json.dumps([rec(0, at=near)]).encode())) == 1


# --- group commit -----------------------------------------------------------------------------


def test_group_commit_answers_each_caller_and_isolates_a_failing_item() -> None:
    group: GroupCommit[int, int] = GroupCommit()
    calls: list[list[int]] = []
    entered, release = threading.Event(), threading.Event()

    def write(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        if items == [0]:  # the first writer holds on until the others queue behind it
            entered.set()
            release.wait(10)
        if 13 in items:
            raise ValueError("unlucky")
        return [i * 10 for i in items]

    answers: dict[int, object] = {}

    def call(i: int) -> None:
        try:
            answers[i] = group.run(i, write)
        except ValueError as exc:
            answers[i] = exc

    first = threading.Thread(target=call, args=(0,))
    first.start()
    assert entered.wait(10)
    others = [threading.Thread(target=call, args=(i,)) for i in (1, 2, 13, 4)]
    for t in others:
        t.start()
    deadline = time.monotonic() + 10
    while len(group._pending) < 4:  # all four queued behind the first write
        assert time.monotonic() < deadline, "the callers did not queue"
        time.sleep(0.01)
    release.set()
    for t in [first, *others]:
        t.join(10)
    assert answers[0] == 0 and [answers[i] for i in (1, 2, 4)] == [10, 20, 40]
    assert isinstance(answers[13], ValueError)
    # one write for the first, one for the four together, then each of them alone
    assert calls[0] == [0] and sorted(calls[1]) == [1, 2, 4, 13]
    assert sorted(map(tuple, calls[2:])) == [(1,), (2,), (4,), (13,)]
