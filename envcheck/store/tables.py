"""SQLModel tables of the result store. Migrations in ``migrations/versions`` mirror them.

Enumerated values (probe kind, status, reason, run state) are stored as plain strings, not
database enums: the reason vocabulary grows, and a new code must not need a migration.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, DateTime, Dialect, Index
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

__all__ = ["CheckRun", "EnvironmentRow", "ProbeResultRow", "RunState", "UTCDateTime"]


class RunState(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware datetime, stored and returned in UTC on every backend.

    SQLite has no time zones: SQLAlchemy stores the wall clock and returns naive values.
    Normalising to UTC on the way in keeps string order equal to time order there, and
    tagging UTC on the way out gives callers the same aware values PostgreSQL returns.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the store takes aware datetimes only")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def _now() -> datetime:
    return datetime.now(UTC)


class EnvironmentRow(SQLModel, table=True):
    """The last catalogue definition seen for an environment, so history outlives the YAML."""

    __tablename__ = "environment"

    id: str = Field(primary_key=True)
    suite: str
    image: str
    spec: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    first_seen: datetime = Field(default_factory=_now, sa_type=UTCDateTime)
    last_seen: datetime = Field(default_factory=_now, sa_type=UTCDateTime)


class CheckRun(SQLModel, table=True):
    """One invocation of ``envcheck check`` or one daemon cycle."""

    __tablename__ = "check_run"

    id: str = Field(primary_key=True)
    started_at: datetime = Field(default_factory=_now, sa_type=UTCDateTime)
    # NULL while running, and for runs found dead by interrupt_stale_runs: their end is unknown.
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    state: str = RunState.RUNNING.value
    trigger: str
    host: str
    pid: int
    catalogue_files: list[str] = Field(default_factory=list, sa_type=JSON)


class ProbeResultRow(SQLModel, table=True):
    __tablename__ = "probe_result"
    # Serves "latest per (env, kind)" and "history of env[, kind]" without a sort. Its leading
    # column also serves lookups by env_id alone, so env_id needs no index of its own.
    __table_args__ = (
        Index("ix_probe_result_env_kind_started", "env_id", "kind", "started_at", "id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    # Indexed because PostgreSQL does not index foreign keys and results_for_run filters on it.
    run_id: str = Field(foreign_key="check_run.id", index=True)
    env_id: str
    kind: str
    status: str
    reason: str
    summary: str
    duration_s: float
    image_digest: str | None = None
    spec_hash: str
    started_at: datetime = Field(sa_type=UTCDateTime)
    evidence: list[dict[str, Any]] = Field(default_factory=list, sa_type=JSON)
    details: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
