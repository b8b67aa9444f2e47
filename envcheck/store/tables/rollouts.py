"""Rollout evidence: counters per environment, image digest, hour and outcome (never one row
per rollout), each producer's sequence numbers already counted, the unknown environments
rollouts named, and the hours an incident held back from the health model."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, Float, Index, Integer, PrimaryKeyConstraint, String, Table
from sqlmodel import Field, SQLModel

from envcheck.core.rollouts import DURATION_NAMES
from envcheck.store.tables.columns import UTCDateTime, now

__all__ = ["ROLLOUT_COUNTERS", "ROLLOUT_KEY", "RolloutHeldRow", "RolloutProducerRow",
           "RolloutUnknownRow", "rollout_rollup"]

# One row per environment, hour, image digest ('' for none: a key column cannot be NULL) and
# outcome: a store's size per environment-hour is bounded by the outcomes and digests seen,
# whatever the volume. env_id leads: an environment's evidence is one index range.
ROLLOUT_KEY = ("env_id", "hour", "image_digest", "outcome")
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
    *(Column(name, Float if name in _FLOATS else Integer, nullable=False)
      for name in ROLLOUT_COUNTERS),
    Column("first_at", UTCDateTime, nullable=False),
    Column("last_at", UTCDateTime, nullable=False),
    # when a batch last added to the row (not a rollout's time: a batch may arrive late)
    Column("updated_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint(*ROLLOUT_KEY),
    # pruning by age, and the fleet's rates over the last hours
    Index("ix_rollout_rollup_hour", "hour"),
    # the environments whose counters changed since the health model's last look
    Index("ix_rollout_rollup_updated_at", "updated_at"),
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
