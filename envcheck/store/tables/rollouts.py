"""Rollout evidence: counters per environment, image digest, hour (a day, once the hour is past
its retention) and outcome (never one row per rollout), each producer's sequence numbers
already counted, the unknown environments rollouts named, and the hours an incident held back
from the health model."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, Float, Index, Integer, PrimaryKeyConstraint, String, Table
from sqlmodel import Field, SQLModel

from envcheck.core.rollouts import DURATION_NAMES
from envcheck.store.tables.columns import UTCDateTime, now

__all__ = ["ROLLOUT_COUNTERS", "ROLLOUT_KEY", "RolloutHeldRow", "RolloutProducerRow",
           "RolloutUnknownRow", "rollout_rollup"]

# One row per period start, environment, image digest ('' for none: a key column cannot be
# NULL), outcome and period: a store's size per environment-hour is bounded by the outcomes
# and digests seen, whatever the volume. ``hour`` is the start of the row's period: an hour
# (``period`` 'hour'), or a midnight (UTC) for a day row, which a prune folds the day's hour
# rows into once they are past their retention (:mod:`envcheck.store.rollout_retention`).
# Each rollout is in exactly one row, so readers add both periods.
# The start leads: a batch's records are of a few hours, so its upserts land on a few
# neighbouring pages. Led by env_id, the ~780 rows a batch of 1,000 records over 1,000
# environments updates were nearly as many pages, each written to the WAL at every commit:
# 12.0 ms a batch against 8.0 led by the hour (bench/README.md, rollouts). An environment's
# own rows are found by ``ix_rollout_rollup_env``, which only a new row writes to.
ROLLOUT_KEY = ("hour", "env_id", "image_digest", "outcome", "period")
# Columns that add: a batch's counters are added to the row's (an upsert), so batches in any
# order and any split give the same row. reward_*: the reward's count, sum, sum of squares,
# how many were exactly 0 and exactly 1; per duration, its sum and how many carried it.
ROLLOUT_COUNTERS: tuple[str, ...] = (
    "count", "reward_n", "reward_sum", "reward_sq", "reward_zero", "reward_one",
    *(f"{name}_{part}" for name in DURATION_NAMES for part in ("sum", "n")))
_FLOATS = {"reward_sum", "reward_sq", *(f"{name}_sum" for name in DURATION_NAMES)}

rollout_rollup = Table(
    "rollout_rollup", SQLModel.metadata,
    Column("env_id", String, nullable=False),
    Column("hour", UTCDateTime, nullable=False),
    Column("image_digest", String, nullable=False),
    Column("outcome", String, nullable=False),
    Column("period", String, nullable=False),  # RollupPeriod: 'hour' or 'day'
    *(Column(name, Float if name in _FLOATS else Integer, nullable=False)
      for name in ROLLOUT_COUNTERS),
    Column("first_at", UTCDateTime, nullable=False),
    Column("last_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint(*ROLLOUT_KEY),
    # an environment's evidence since an hour
    Index("ix_rollout_rollup_env", "env_id", "hour"),
    # SQLite: the rows in the key's b-tree itself, no second one by rowid (the upserts of a
    # batch: a further 8.0 ms down to 5.8)
    sqlite_with_rowid=False,
)


class RolloutProducerRow(SQLModel, table=True):
    """The sequence numbers of one producer (a training run) already counted, as sorted
    closed ranges ``[[lo, hi], ...]``: a retried batch is counted once."""

    __tablename__ = "rollout_producer"

    producer: str = Field(primary_key=True)
    seen: list[Any] = Field(default_factory=list, sa_type=JSON)
    updated_at: datetime = Field(default_factory=now, sa_type=UTCDateTime, index=True)


class RolloutUnknownRow(SQLModel, table=True):
    """Rollouts per hour that named no environment of the catalogue: counted, a few ids kept
    to show, never an error and never a counter row of their own."""

    __tablename__ = "rollout_unknown"

    hour: datetime = Field(primary_key=True, sa_type=UTCDateTime)
    count: int = 0
    ids: list[str] = Field(default_factory=list, sa_type=JSON)


class RolloutHeldRow(SQLModel, table=True):
    """An hour whose rollouts an incident (many environments failing at once) keeps from the
    health model, the fleet's rate included: their failures are the cluster's, not the
    environments'."""

    __tablename__ = "rollout_held"

    hour: datetime = Field(primary_key=True, sa_type=UTCDateTime)
    incident_id: int | None = None
