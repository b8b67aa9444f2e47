"""What a batch of rollouts adds, worked out in memory before the store writes it: which
records are new (each producer's sequence numbers already counted, as sorted ranges), and the
counters they add per environment, hour, image digest and outcome. Pure: no database.

The hot path of ``POST /v1/rollouts`` (bench/rollouts.py): one pass over the records, each
bucket a list of plain numbers in :data:`~envcheck.store.tables.rollouts.ROLLOUT_COUNTERS`
order followed by its first and last time.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

from envcheck.core.rollouts import DURATION_NAMES, Rollout
from envcheck.store.retention import day_start
from envcheck.store.tables.rollouts import ROLLOUT_COUNTERS

__all__ = ["MAX_RANGES", "Bucket", "BucketKey", "count", "fold_days", "fresh", "hour_of",
           "merge_ranges", "seen_in"]

# Sequence ranges kept per producer. A producer that sends its numbers in order keeps one;
# past this many (numbers sent far out of order, or skipped for good) the two oldest are
# joined, their gap then counted as seen: the row stays bounded, at the price of dropping a
# record that arrives in such an old gap later (never of counting one twice).
MAX_RANGES = 1_000

# (hour, env_id, image_digest or '', outcome): the table's key order
BucketKey = tuple[datetime, str, str, str]
# ROLLOUT_COUNTERS' values in order, then first_at and last_at
Bucket = list[Any]
_FIRST, _LAST = len(ROLLOUT_COUNTERS), len(ROLLOUT_COUNTERS) + 1
_DURATIONS = attrgetter(*DURATION_NAMES)
assert ROLLOUT_COUNTERS[6:] == tuple(f"{name}_{part}" for name in DURATION_NAMES
                                     for part in ("sum", "n")), "count() adds in this order"


def hour_of(at: datetime) -> datetime:
    """The start of ``at``'s hour, in UTC (an offset of +05:30 has its own half hours)."""
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def seen_in(ranges: Sequence[Sequence[int]], seq: int) -> bool:
    """Is ``seq`` inside one of the sorted, disjoint closed ``ranges``?"""
    i = bisect.bisect_right(ranges, seq, key=lambda r: r[0]) - 1
    return i >= 0 and ranges[i][0] <= seq <= ranges[i][1]


def merge_ranges(ranges: Iterable[Sequence[int]], seqs: Iterable[int],
                 limit: int = MAX_RANGES) -> list[list[int]]:
    """``ranges`` with ``seqs`` added, sorted, adjacent ranges joined; past ``limit`` ranges
    the oldest are joined across their gap."""
    points = sorted([[lo, hi] for lo, hi in ranges] + _runs(seqs))
    merged: list[list[int]] = []
    for lo, hi in points:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    if len(merged) > limit:
        merged[:len(merged) - limit + 1] = [[merged[0][0], merged[len(merged) - limit][1]]]
    return merged


def _runs(seqs: Iterable[int]) -> list[list[int]]:
    """``seqs`` as sorted closed ranges of consecutive numbers (a batch's are mostly one)."""
    ordered = sorted(set(seqs))
    if not ordered:
        return []
    if ordered[-1] - ordered[0] + 1 == len(ordered):
        return [[ordered[0], ordered[-1]]]
    runs = [[ordered[0], ordered[0]]]
    for seq in ordered[1:]:
        if seq == runs[-1][1] + 1:
            runs[-1][1] = seq
        else:
            runs.append([seq, seq])
    return runs


def fresh(rollouts: Sequence[Rollout], seen: dict[str, list[list[int]]]
          ) -> tuple[list[Rollout], dict[str, list[list[int]]]]:
    """The records whose producer and sequence number are neither in ``seen`` (each
    producer's ranges counted before) nor earlier in the batch, and each of their producers'
    ranges with them added."""
    new: list[Rollout] = []
    taken: dict[str, set[int]] = {}
    for r in rollouts:
        mine = taken.get(r.producer)
        if mine is None:
            mine = taken[r.producer] = set()
        seq = r.seq
        if seq in mine:
            continue
        ranges = seen.get(r.producer)
        if ranges and seen_in(ranges, seq):
            continue
        mine.add(seq)
        new.append(r)
    merged = {p: merge_ranges(seen.get(p, ()), seqs) for p, seqs in taken.items() if seqs}
    return new, merged


def count(rollouts: Iterable[Rollout]) -> dict[BucketKey, Bucket]:
    """The counters ``rollouts`` add, per bucket (:data:`Bucket`); a rollout's time in UTC."""
    buckets: dict[BucketKey, Bucket] = {}
    hours: dict[tuple[int, int, int, int], datetime] = {}  # an hour's start, made once
    for r in rollouts:
        at = r.at
        if at.utcoffset():
            at = at.astimezone(UTC)
        hour = hours.get((at.year, at.month, at.day, at.hour))
        if hour is None:
            hour = hours[(at.year, at.month, at.day, at.hour)] = hour_of(at)
        key = (hour, r.env_id, r.image_digest or "", r.outcome.value)
        b = buckets.get(key)
        if b is None:
            b = buckets[key] = [0, 0, 0.0, 0.0, 0, 0, 0.0, 0, 0.0, 0, 0.0, 0, at, at]
        b[0] += 1
        reward = r.reward
        if reward is not None:
            b[1] += 1
            b[2] += reward
            b[3] += reward * reward
            if reward == 0:
                b[4] += 1
            elif reward == 1:
                b[5] += 1
        start, agent, verifier = _DURATIONS(r)
        if start is not None:
            b[6] += start
            b[7] += 1
        if agent is not None:
            b[8] += agent
            b[9] += 1
        if verifier is not None:
            b[10] += verifier
            b[11] += 1
        if at < b[_FIRST]:
            b[_FIRST] = at
        elif at > b[_LAST]:
            b[_LAST] = at
    return buckets


def fold_days(rows: Iterable[Any]) -> dict[BucketKey, Bucket]:
    """Counter rows (of ``rollout_rollup``'s columns) added up per day, environment, image
    digest and outcome: what a prune folds hour rows into."""
    days: dict[BucketKey, Bucket] = {}
    for row in rows:
        values = row._mapping
        key = (day_start(values["hour"]), values["env_id"], values["image_digest"],
               values["outcome"])
        b = days.get(key)
        if b is None:
            days[key] = [*(values[name] for name in ROLLOUT_COUNTERS), values["first_at"],
                         values["last_at"]]
            continue
        for i, name in enumerate(ROLLOUT_COUNTERS):
            b[i] += values[name]
        b[_FIRST] = min(b[_FIRST], values["first_at"])
        b[_LAST] = max(b[_LAST], values["last_at"])
    return days
