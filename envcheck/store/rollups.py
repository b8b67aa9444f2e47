"""Rollups: results folded into counts per environment, period, kind, image digest, status and
reason, with their durations as a histogram
(:data:`~envcheck.store.tables.rollups.DURATION_BOUNDS`).

Every result is counted exactly once: as a raw row, or in the rollups, which the very
transaction that deletes it adds it to (:mod:`envcheck.store.prune`). So a reader that counts
over time adds the raw rows to the rollups and never counts twice, whether a prune ran, ran
half-way or is running now; and a prune stopped half-way and run again folds nothing twice.

Each result goes to three rows: its hour, its day and the ``total`` since the store began.
Readers take hour rows from the ``hourly_from`` mark on and day rows before it (the mark moves
whole days, before their hour rows are deleted), and ``total`` rows for all time. A folded
result counts at the start of its hour (or day): a reader's buckets of whole hours, aligned to
them, come out exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, case, func, select

from envcheck.core.numbers import bucket_index, histogram_quantile
from envcheck.store.core_tables import MARKS, ROLLUPS
from envcheck.store.database import upsert_insert
from envcheck.store.retention import day_start, hour_start
from envcheck.store.tables.rollups import (
    DURATION_BOUNDS,
    DURATION_COLUMNS,
    ROLLUP_KEY,
    RollupPeriod,
)

__all__ = ["EPOCH", "FOLD_COLUMNS", "HOURLY_FROM", "Histogram", "RollupTotal", "add_rollups",
           "duration_bucket", "duration_bucket_sql", "fold", "histogram_sums", "hourly_from",
           "rollup_totals"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # the start of every ``total`` row
HOURLY_FROM = "hourly_from"
# What a deleted result gives its rollups (what the prune's DELETE ... RETURNING reads back).
FOLD_COLUMNS = ("env_id", "kind", "image_digest", "status", "reason", "started_at",
                "duration_s")


@dataclass(slots=True)
class Histogram:
    """Durations: how many, their sum and largest, and how many fell in each bucket."""

    count: int = 0
    total_s: float = 0.0
    max_s: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * len(DURATION_COLUMNS))

    def add(self, duration_s: float, n: int = 1) -> None:
        self.count += n
        self.total_s += duration_s * n
        self.max_s = max(self.max_s, duration_s)
        self.buckets[duration_bucket(duration_s)] += n

    def merge(self, count: int, total_s: float, max_s: float, buckets: Sequence[int]) -> None:
        self.count += int(count)
        self.total_s += float(total_s)
        self.max_s = max(self.max_s, float(max_s))
        for i, n in enumerate(buckets):
            self.buckets[i] += int(n or 0)

    def quantile(self, q: float) -> float | None:
        return histogram_quantile(DURATION_BOUNDS, self.buckets, q, self.max_s)


def duration_bucket(duration_s: float) -> int:
    return bucket_index(DURATION_BOUNDS, duration_s)


@dataclass(slots=True)
class _Row:
    first_at: datetime
    last_at: datetime
    durations: Histogram = field(default_factory=Histogram)

    def merge(self, other: _Row) -> None:
        self.first_at, self.last_at = min(self.first_at, other.first_at), max(self.last_at,
                                                                               other.last_at)
        d = other.durations
        self.durations.merge(d.count, d.total_s, d.max_s, d.buckets)


def fold(rows: Iterable[Any], hours_from: datetime = EPOCH) -> list[dict[str, Any]]:
    """The rollup rows (as values for :func:`add_rollups`) of results given as rows of
    :data:`FOLD_COLUMNS`: each result in its hour, its day and the total; in its hour only
    from ``hours_from`` (the ``hourly_from`` mark) on: readers take day rows before it, and
    the prune deletes hour rows there, so one written would only be garbage."""
    hours: dict[tuple[Any, ...], _Row] = {}
    for r in rows:  # each result once, into its hour; days and totals from the hours
        key = (r.env_id, hour_start(r.started_at), r.kind, r.image_digest or "", r.status,
               r.reason)
        row = hours.get(key)
        if row is None:
            row = hours[key] = _Row(r.started_at, r.started_at)
        else:
            row.first_at, row.last_at = min(row.first_at, r.started_at), max(row.last_at,
                                                                               r.started_at)
        row.durations.add(float(r.duration_s))
    rolled: dict[tuple[Any, ...], _Row] = {}
    for (env_id, hour, *rest), row in hours.items():
        if hour >= hours_from:
            rolled[(env_id, RollupPeriod.HOUR.value, hour, *rest)] = row
        for period, start in ((RollupPeriod.DAY, day_start(hour)), (RollupPeriod.TOTAL, EPOCH)):
            key = (env_id, period.value, start, *rest)
            target = rolled.get(key)
            if target is None:
                target = rolled[key] = _Row(row.first_at, row.last_at)
            target.merge(row)
    return [{**dict(zip(ROLLUP_KEY, key, strict=True)), "count": row.durations.count,
             "duration_sum": row.durations.total_s, "duration_max": row.durations.max_s,
             "first_at": row.first_at, "last_at": row.last_at,
             **dict(zip(DURATION_COLUMNS, row.durations.buckets, strict=True))}
            for key, row in rolled.items()]


def add_rollups(conn: Connection, values: list[dict[str, Any]]) -> None:
    """Add ``values`` (from :func:`fold`) to the rollups: new rows inserted, existing ones
    summed into, in one statement per row that is atomic on both backends."""
    if not values:
        return
    sqlite = conn.dialect.name == "sqlite"
    greatest, least = (func.max, func.min) if sqlite else (func.greatest, func.least)
    stmt = upsert_insert(conn.engine)(ROLLUPS)
    new = stmt.excluded
    summed = {name: ROLLUPS.c[name] + new[name] for name in ("count", "duration_sum",
                                                               *DURATION_COLUMNS)}
    stmt = stmt.on_conflict_do_update(index_elements=list(ROLLUP_KEY), set_={
        **summed,
        "duration_max": greatest(ROLLUPS.c.duration_max, new.duration_max),
        "first_at": least(ROLLUPS.c.first_at, new.first_at),
        "last_at": greatest(ROLLUPS.c.last_at, new.last_at)})
    conn.execute(stmt, values)


def hourly_from(conn: Connection) -> datetime:
    """From when hour rows are complete (before it, read day rows): the epoch until a prune
    first deleted hour rows."""
    at = conn.execute(select(MARKS.c.at).where(MARKS.c.name == HOURLY_FROM)).scalar()
    return at if at is not None else EPOCH


def histogram_sums() -> list[ColumnElement[Any]]:
    """``sum(dNN)`` of every histogram column, in order: a select's trailing columns."""
    return [func.sum(ROLLUPS.c[name]) for name in DURATION_COLUMNS]


def duration_bucket_sql(duration: ColumnElement[Any]) -> ColumnElement[Any]:
    """The histogram bucket of a raw result's duration, computed by the database (what
    :func:`duration_bucket` says of the same value)."""
    return case(*((duration <= bound, i) for i, bound in enumerate(DURATION_BOUNDS)),
                else_=len(DURATION_BOUNDS))


@dataclass(frozen=True, slots=True)
class RollupTotal:
    """The folded results of one environment, kind and status since the store began."""

    env_id: str
    kind: str
    status: str
    count: int
    duration_sum: float
    buckets: tuple[int, ...]
    last_at: datetime


def rollup_totals(conn: Connection) -> list[RollupTotal]:
    """Every ``total`` rollup, summed per environment, kind and status (over digests and
    reasons): what the metrics add to the raw results they count."""
    query = (select(ROLLUPS.c.env_id, ROLLUPS.c.kind, ROLLUPS.c.status,
                    func.sum(ROLLUPS.c.count), func.sum(ROLLUPS.c.duration_sum),
                    func.max(ROLLUPS.c.last_at), *histogram_sums())
             .where(ROLLUPS.c.period == RollupPeriod.TOTAL.value)
             .group_by(ROLLUPS.c.env_id, ROLLUPS.c.kind, ROLLUPS.c.status))
    return [RollupTotal(env_id, kind, status, int(n), float(seconds),
                        tuple(int(b) for b in buckets), last)
            for env_id, kind, status, n, seconds, last, *buckets in conn.execute(query)]
