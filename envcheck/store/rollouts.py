"""Store methods for the training run's rollouts (mixed into ``Store``): a batch is added into
counters in one transaction, never kept record by record.

- **Once per sequence number.** Each producer's sequence numbers already counted are kept as
  sorted ranges (``rollout_producer.seen``); a record whose number is among them (a retried
  batch, a batch sent twice) is a duplicate and adds nothing. A producer that sends its numbers
  in order keeps one range. Past :data:`MAX_RANGES` ranges the two oldest are joined (their gap
  then counts as seen): a producer cannot grow its row without bound.
- **Counters.** Records of known environments add into ``rollout_rollup`` rows per
  environment, hour, image digest and outcome (an upsert adding each counter), so the store's
  size per environment-hour is fixed whatever the volume; records of environments the
  catalogue does not hold (or no longer holds) are counted per hour with a few ids to show.
- **One batch at a time** per process (the API's threads); the daemon's lease makes it one
  process per store.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, func
from sqlalchemy import select as sa_select

from envcheck.core.rollouts import DURATION_NAMES, Rollout
from envcheck.store.access import StoreAccess
from envcheck.store.core_tables import (
    ENVS,
    HELD_ROLLOUTS,
    PRODUCERS,
    ROLLOUTS,
    UNKNOWN_ROLLOUTS,
)
from envcheck.store.tables.columns import now
from envcheck.store.tables.rollouts import ROLLOUT_COUNTERS, ROLLOUT_KEY

__all__ = ["MAX_RANGES", "UNKNOWN_IDS_KEPT", "IngestOutcome", "RolloutRecords", "hour_of",
           "merge_ranges", "seen_in"]

MAX_RANGES = 1_000
UNKNOWN_IDS_KEPT = 20  # unknown environment ids kept per hour, to show
_IDS_BATCH = 500  # ids per IN list: under SQLite's limit of bound parameters
_INGEST = threading.Lock()


@dataclass(frozen=True, slots=True)
class IngestOutcome:
    """What a batch added: ``counted`` records of known environments, ``duplicates`` already
    counted before (or twice in the batch), ``unknown`` naming no environment of the
    catalogue (a few of their ids in ``unknown_ids``)."""

    received: int
    counted: int
    duplicates: int
    unknown: int
    unknown_ids: tuple[str, ...] = ()


def hour_of(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def seen_in(ranges: Sequence[Sequence[int]], seq: int) -> bool:
    """Is ``seq`` inside one of the sorted, disjoint closed ``ranges``?"""
    i = bisect.bisect_right(ranges, seq, key=lambda r: r[0]) - 1
    return i >= 0 and ranges[i][0] <= seq <= ranges[i][1]


def merge_ranges(ranges: Iterable[Sequence[int]], seqs: Iterable[int],
                 limit: int = MAX_RANGES) -> list[list[int]]:
    """``ranges`` with ``seqs`` added, sorted, adjacent ranges joined; past ``limit`` ranges
    the oldest are joined across their gap."""
    points = sorted([[lo, hi] for lo, hi in ranges] + [[s, s] for s in set(seqs)])
    merged: list[list[int]] = []
    for lo, hi in points:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    while len(merged) > limit:
        merged[0:2] = [[merged[0][0], merged[1][1]]]
    return merged


def _bucket(rollout: Rollout) -> tuple[str, datetime, str, str]:
    return (rollout.env_id, hour_of(rollout.at), rollout.image_digest or "",
            str(rollout.outcome))


def _counters(rows: Iterable[Rollout]) -> dict[tuple[str, datetime, str, str], dict[str, Any]]:
    buckets: dict[tuple[str, datetime, str, str], dict[str, Any]] = {}
    for r in rows:
        key = _bucket(r)
        b = buckets.get(key)
        if b is None:
            b = buckets[key] = dict.fromkeys(ROLLOUT_COUNTERS, 0)
            b["first_at"] = b["last_at"] = r.at
        b["count"] += 1
        if r.reward is not None:
            b["reward_n"] += 1
            b["reward_sum"] += r.reward
            b["reward_sq"] += r.reward * r.reward
            b["reward_zero"] += r.reward == 0
            b["reward_one"] += r.reward == 1
        for name in DURATION_NAMES:
            value = getattr(r, name)
            if value is not None:
                b[f"{name}_sum"] += value
                b[f"{name}_n"] += 1
        b["first_at"] = min(b["first_at"], r.at)
        b["last_at"] = max(b["last_at"], r.at)
    return buckets


class RolloutRecords(StoreAccess):
    def record_rollouts(self, rollouts: Sequence[Rollout]) -> IngestOutcome:
        """Count one batch, in one transaction: all of it or (on an error) none of it."""
        with _INGEST, self._transaction() as conn:
            fresh, duplicates, seen = self._fresh(conn, rollouts)
            ids = {r.env_id for r in fresh}
            known = self._known_ids(conn, ids)
            counted = [r for r in fresh if r.env_id in known]
            unknown = [r for r in fresh if r.env_id not in known]
            buckets = _counters(counted)
            if buckets:
                self._add_counters(conn, buckets)
            if unknown:
                self._count_unknown(conn, unknown)
            if seen:
                self._keep_seen(conn, seen)
        shown = tuple(sorted({r.env_id for r in unknown}))[:UNKNOWN_IDS_KEPT]
        return IngestOutcome(len(rollouts), len(counted), duplicates, len(unknown), shown)

    # --- the parts of one batch ---------------------------------------------------------

    def _fresh(self, conn: Any, rollouts: Sequence[Rollout]
               ) -> tuple[list[Rollout], int, dict[str, list[list[int]]]]:
        """The records not counted before, how many were, and each producer's new ranges."""
        producers = sorted({r.producer for r in rollouts})
        query = sa_select(PRODUCERS.c.producer, PRODUCERS.c.seen).where(
            PRODUCERS.c.producer.in_(producers))
        if conn.dialect.name == "postgresql":
            query = query.with_for_update()
        ranges = {p: [list(x) for x in seen or []] for p, seen in conn.execute(query)}
        fresh: list[Rollout] = []
        taken: dict[str, set[int]] = {}
        for r in rollouts:
            mine = taken.setdefault(r.producer, set())
            if r.seq in mine or seen_in(ranges.get(r.producer, []), r.seq):
                continue
            mine.add(r.seq)
            fresh.append(r)
        seen = {p: merge_ranges(ranges.get(p, []), seqs) for p, seqs in taken.items() if seqs}
        return fresh, len(rollouts) - len(fresh), seen

    def _known_ids(self, conn: Any, ids: set[str]) -> set[str]:
        ordered, known = sorted(ids), set[str]()
        for start in range(0, len(ordered), _IDS_BATCH):
            query = sa_select(ENVS.c.id).where(ENVS.c.id.in_(ordered[start:start + _IDS_BATCH]),
                                               ENVS.c.retired_at.is_(None))
            known.update(row[0] for row in conn.execute(query))
        return known

    def _add_counters(self, conn: Any, buckets: dict[tuple[str, datetime, str, str],
                                                     dict[str, Any]]) -> None:
        stmt = self._upsert()(ROLLOUTS)
        added = {name: ROLLOUTS.c[name] + stmt.excluded[name] for name in ROLLOUT_COUNTERS}
        added["first_at"] = case((stmt.excluded.first_at < ROLLOUTS.c.first_at,
                                  stmt.excluded.first_at), else_=ROLLOUTS.c.first_at)
        added["last_at"] = case((stmt.excluded.last_at > ROLLOUTS.c.last_at,
                                 stmt.excluded.last_at), else_=ROLLOUTS.c.last_at)
        added["updated_at"] = stmt.excluded.updated_at
        stmt = stmt.on_conflict_do_update(index_elements=list(ROLLOUT_KEY), set_=added)
        at = now()
        conn.execute(stmt, [dict(zip(ROLLOUT_KEY, key, strict=True), **counters, updated_at=at)
                            for key, counters in buckets.items()])

    def _count_unknown(self, conn: Any, unknown: Sequence[Rollout]) -> None:
        by_hour: dict[datetime, list[str]] = {}
        for r in unknown:
            by_hour.setdefault(hour_of(r.at), []).append(r.env_id)
        for hour, ids in by_hour.items():
            row = conn.execute(sa_select(UNKNOWN_ROLLOUTS.c.count, UNKNOWN_ROLLOUTS.c.ids)
                               .where(UNKNOWN_ROLLOUTS.c.hour == hour)).first()
            count, kept = (row[0], list(row[1] or [])) if row is not None else (0, [])
            for env_id in sorted(set(ids)):
                if len(kept) < UNKNOWN_IDS_KEPT and env_id not in kept:
                    kept.append(env_id)
            stmt = self._upsert()(UNKNOWN_ROLLOUTS).values(hour=hour, count=count + len(ids),
                                                           ids=kept)
            conn.execute(stmt.on_conflict_do_update(
                index_elements=["hour"], set_={"count": stmt.excluded["count"],
                                               "ids": stmt.excluded.ids}))

    def _keep_seen(self, conn: Any, seen: dict[str, list[list[int]]]) -> None:
        at = now()
        stmt = self._upsert()(PRODUCERS)
        stmt = stmt.on_conflict_do_update(index_elements=["producer"],
                                          set_={"seen": stmt.excluded.seen,
                                                "updated_at": stmt.excluded.updated_at})
        conn.execute(stmt, [{"producer": p, "seen": r, "updated_at": at}
                            for p, r in seen.items()])

    # --- reads --------------------------------------------------------------------------

    def rollout_rows(self, env_ids: Sequence[str] | None = None,
                     since: datetime | None = None) -> list[Any]:
        """Counter rows (every column of ``rollout_rollup``), oldest hour first: of
        ``env_ids`` (None: every environment), from the hour of ``since`` on."""
        query = sa_select(ROLLOUTS)
        if since is not None:
            query = query.where(ROLLOUTS.c.hour >= hour_of(since))
        query = query.order_by(ROLLOUTS.c.env_id, ROLLOUTS.c.hour, ROLLOUTS.c.image_digest,
                               ROLLOUTS.c.outcome)
        with self._reading() as conn:
            if env_ids is None:
                return list(conn.execute(query))
            ordered, out = sorted(set(env_ids)), list[Any]()
            for start in range(0, len(ordered), _IDS_BATCH):
                part = ordered[start:start + _IDS_BATCH]
                out.extend(conn.execute(query.where(ROLLOUTS.c.env_id.in_(part))))
            return out

    def rollout_envs_since(self, at: datetime) -> set[str]:
        """Environments with a rollout counted at or after ``at`` (when its batch came in,
        whatever the rollout's own time: a late batch changes old hours too)."""
        query = sa_select(ROLLOUTS.c.env_id).distinct().where(ROLLOUTS.c.updated_at >= at)
        with self._reading() as conn:
            return {row[0] for row in conn.execute(query)}

    def rollout_totals(self, since: datetime) -> list[tuple[datetime, str, int]]:
        """(hour, outcome, rollouts) of every environment together, from the hour of
        ``since`` on: the fleet's counts, a row per hour and outcome."""
        query = (sa_select(ROLLOUTS.c.hour, ROLLOUTS.c.outcome, func.sum(ROLLOUTS.c["count"]))
                 .where(ROLLOUTS.c.hour >= hour_of(since))
                 .group_by(ROLLOUTS.c.hour, ROLLOUTS.c.outcome)
                 .order_by(ROLLOUTS.c.hour, ROLLOUTS.c.outcome))
        with self._reading() as conn:
            return [(hour, outcome, int(n)) for hour, outcome, n in conn.execute(query)]

    def hold_rollout_hours(self, hours: Iterable[datetime], incident_id: int | None) -> None:
        """Keep these hours' rollouts from the health model (an incident's); an hour held
        already stays with its first incident."""
        rows = [{"hour": hour_of(h), "incident_id": incident_id} for h in set(hours)]
        if not rows:
            return
        stmt = self._upsert()(HELD_ROLLOUTS).on_conflict_do_nothing(index_elements=["hour"])
        with self._transaction() as conn:
            conn.execute(stmt, rows)

    def held_rollout_hours(self, since: datetime | None = None) -> set[datetime]:
        """The hours held (from the hour of ``since`` on; None: all)."""
        query = sa_select(HELD_ROLLOUTS.c.hour)
        if since is not None:
            query = query.where(HELD_ROLLOUTS.c.hour >= hour_of(since))
        with self._reading() as conn:
            return {row[0] for row in conn.execute(query)}

    def unknown_rollouts(self, since: datetime | None = None) -> tuple[int, list[str]]:
        """Rollouts that named no environment of the catalogue since ``since`` (every hour
        kept: None), and a few of their ids."""
        query = sa_select(UNKNOWN_ROLLOUTS.c.count, UNKNOWN_ROLLOUTS.c.ids)
        if since is not None:
            query = query.where(UNKNOWN_ROLLOUTS.c.hour >= hour_of(since))
        count, ids = 0, list[str]()
        with self._reading() as conn:
            for n, kept in conn.execute(query.order_by(UNKNOWN_ROLLOUTS.c.hour)):
                count += n
                ids.extend(i for i in kept or [] if i not in ids)
        return count, ids[:UNKNOWN_IDS_KEPT]

    def prune_rollouts(self, before: datetime, producers_before: datetime | None = None
                       ) -> int:
        """Delete counter, unknown and held rows of hours before ``before``, and producers
        not heard from since ``producers_before`` (default: ``before`` less a day); rows
        deleted."""
        producers_before = producers_before or before - timedelta(days=1)
        with self._transaction() as conn:
            n = conn.execute(ROLLOUTS.delete().where(ROLLOUTS.c.hour < hour_of(before))).rowcount
            n += conn.execute(UNKNOWN_ROLLOUTS.delete().where(
                UNKNOWN_ROLLOUTS.c.hour < hour_of(before))).rowcount
            n += conn.execute(HELD_ROLLOUTS.delete().where(
                HELD_ROLLOUTS.c.hour < hour_of(before))).rowcount
            n += conn.execute(PRODUCERS.delete().where(
                PRODUCERS.c.updated_at < producers_before)).rowcount
        return int(n)
