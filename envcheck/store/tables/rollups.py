"""Rollups: what pruned results leave behind, and how far pruning has gone."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import Column, Float, Index, Integer, PrimaryKeyConstraint, String, Table
from sqlmodel import Field, SQLModel

from envcheck.store.tables.columns import UTCDateTime

__all__ = ["DURATION_BOUNDS", "DURATION_COLUMNS", "ROLLUP_KEY", "RetentionMarkRow",
           "RollupPeriod", "result_rollup"]


class RollupPeriod(StrEnum):
    HOUR = "hour"
    DAY = "day"
    TOTAL = "total"  # since the store began: one row per key, never pruned


# Upper bounds (seconds) of the duration histogram every rollup row holds, one column each
# (d00 counts durations <= 0.025 s, d01 those in (0.025, 0.05], ..., d30 those over an hour).
# Counts add, so an hour folded in several batches, a day from its hours and a week of days
# give the very histogram one pass over the raw results would; a percentile read from it is
# within its bucket (steps of 1.3-2x). Every bound of the metrics' duration histogram is one of
# these, so the metrics' buckets are sums of columns. Part of the schema: changing it needs a
# migration.
DURATION_BOUNDS: tuple[float, ...] = (
    0.025, 0.05, 0.1, 0.15, 0.25, 0.35, 0.5, 0.75, 1.0, 1.5, 2.5, 3.5, 5.0, 7.5, 10.0, 15.0,
    20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 450.0, 600.0, 900.0, 1200.0, 1800.0,
    3600.0)
DURATION_COLUMNS: tuple[str, ...] = tuple(f"d{i:02d}" for i in range(len(DURATION_BOUNDS) + 1))
# One row per environment, period, period start, probe kind, image digest ('' for none: a key
# column cannot be NULL), status and reason. env_id leads: pages read one page of environments.
ROLLUP_KEY = ("env_id", "period", "start", "kind", "image_digest", "status", "reason")

# A Core table: its histogram is a run of like columns, which a model would have to spell out.
result_rollup = Table(
    "result_rollup", SQLModel.metadata,
    Column("env_id", String, nullable=False),
    Column("period", String, nullable=False),
    Column("start", UTCDateTime, nullable=False),
    Column("kind", String, nullable=False),
    Column("image_digest", String, nullable=False),
    Column("status", String, nullable=False),
    Column("reason", String, nullable=False),
    Column("count", Integer, nullable=False),
    Column("duration_sum", Float, nullable=False),
    Column("duration_max", Float, nullable=False),
    Column("first_at", UTCDateTime, nullable=False),
    Column("last_at", UTCDateTime, nullable=False),
    *(Column(name, Integer, nullable=False) for name in DURATION_COLUMNS),
    PrimaryKeyConstraint(*ROLLUP_KEY),
    # pruning hour and day rows by age
    Index("ix_result_rollup_period_start", "period", "start"),
)


class RetentionMarkRow(SQLModel, table=True):
    """How far pruning has gone, for readers to know which rollups to read: ``hourly_from``
    (a midnight, UTC) is the first day whose hour rows are all kept; before it, day rows."""

    __tablename__ = "retention_mark"

    name: str = Field(primary_key=True)
    at: datetime = Field(sa_type=UTCDateTime)
