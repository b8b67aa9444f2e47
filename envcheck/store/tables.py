"""SQLModel tables of the result store. Migrations in ``migrations/versions`` mirror them.

Enumerated values (probe kind, status, reason, run state) are stored as plain strings, not
database enums: the reason vocabulary grows, and a new code must not need a migration.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import ConfigDict
from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    UniqueConstraint,
)
from sqlalchemy.types import TypeDecorator
from sqlmodel import AutoString, Field, SQLModel

from envcheck.core.results import CommandEvidence, ProbeKind, ProbeResult, Reason, Status

__all__ = [
    "DURATION_BOUNDS",
    "DURATION_COLUMNS",
    "ROLLUP_KEY",
    "CheckRun",
    "DataSourceShape",
    "DataSourceShapeRow",
    "Delivery",
    "DeliveryStatus",
    "EnvStateRow",
    "EnvironmentRow",
    "Incident",
    "IncidentFields",
    "IncidentRow",
    "NotificationRow",
    "ProbeResultRow",
    "QuarantineListing",
    "ResultFields",
    "ResultLine",
    "RetentionMarkRow",
    "RetiredListing",
    "RollupPeriod",
    "RunState",
    "SuiteRow",
    "Transition",
    "TransitionFields",
    "TransitionRow",
    "UTCDateTime",
    "WebhookRow",
    "probe_result",
    "result_rollup",
]


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


# A table that readers get frozen values of is declared as a frozen record of its columns,
# which the table class extends: each column is declared once, for the writes and the reads
# (and the API documents that build on the same records).
# (Typed Any: SQLModel types its config as its own subclass of pydantic's ConfigDict.)
_FROZEN: Any = ConfigDict(frozen=True)
_WRITABLE: Any = ConfigDict(frozen=False)  # rows are ORM objects, written field by field


class EnvironmentRow(SQLModel, table=True):
    """The last catalogue definition seen for an environment, so history outlives the YAML."""

    __tablename__ = "environment"

    id: str = Field(primary_key=True)
    suite: str
    image: str
    spec: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    first_seen: datetime = Field(default_factory=_now, sa_type=UTCDateTime)
    last_seen: datetime = Field(default_factory=_now, sa_type=UTCDateTime)
    # Set when the environment left the daemon's catalogue: it leaves allowlists, counts and
    # metrics, keeps its history, and is cleared when the environment comes back.
    retired_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


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


class ResultFields(SQLModel):
    """What every reader shows of a stored result (the API's result document builds on it)."""

    model_config = _FROZEN

    kind: str
    status: str
    reason: str
    summary: str
    started_at: datetime = Field(sa_type=UTCDateTime)
    duration_s: float
    image_digest: str | None = None
    spec_hash: str
    # Runs the result holds and how many failed (NULL: one, failed if the result failed), and
    # how deep a tests probe went (core.depth.Depth; NULL: not a tests probe, or stored before
    # depths, when every probe ran in full): what the health model weighs (core.depth.RunCount).
    runs: int | None = None
    failed_runs: int | None = None
    depth: str | None = None


class ResultLine(ResultFields):
    """A stored result without its evidence and details: what a timeline needs."""

    id: int | None = Field(default=None, primary_key=True)
    # Indexed because PostgreSQL does not index foreign keys and results_for_run filters on it.
    run_id: str = Field(foreign_key="check_run.id", index=True)
    env_id: str


class ProbeResultRow(ResultLine, table=True):
    __tablename__ = "probe_result"
    # Serves "latest per (env, kind)" and "history of env[, kind]" without a sort. Its leading
    # column also serves lookups by env_id alone, so env_id needs no index of its own.
    __table_args__ = (
        Index("ix_probe_result_env_kind_started", "env_id", "kind", "started_at", "id"),
    )
    model_config = _WRITABLE

    evidence: list[dict[str, Any]] = Field(default_factory=list, sa_type=JSON)
    details: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)


def probe_result(row: Any) -> ProbeResult:
    """The result a ``probe_result`` row (an ORM row or a Core row of its columns) holds."""
    return ProbeResult(
        env_id=row.env_id, kind=ProbeKind(row.kind), status=Status(row.status),
        reason=Reason(row.reason), summary=row.summary, duration_s=row.duration_s,
        image_digest=row.image_digest, spec_hash=row.spec_hash, started_at=row.started_at,
        evidence=tuple(CommandEvidence(**e) for e in row.evidence or ()),
        details=row.details or {})


class EnvStateRow(SQLModel, table=True):
    """Each environment's current health and quarantine: what the feed serves.

    Derived from results by the health model and changed only together with a transition row.
    """

    __tablename__ = "env_state"

    env_id: str = Field(primary_key=True)
    suite: str
    state: str = "unknown"
    reason: str = "ok"
    image_digest: str | None = None
    kinds: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    quarantined: bool = False
    q_source: str | None = None
    q_actor: str | None = None
    q_reason: str | None = None
    q_since: datetime | None = Field(default=None, sa_type=UTCDateTime)
    q_evidence: list[int] = Field(default_factory=list, sa_type=JSON)
    updated_at: datetime = Field(default_factory=_now, sa_type=UTCDateTime)


class QuarantineListing(SQLModel):
    """A quarantined environment as every reader shows it: the feed's list, the API (whose
    document builds on it), the CLI, the exports and the dashboard (``q_*`` columns of
    :class:`EnvStateRow`, named as the readers know them)."""

    model_config = _FROZEN

    env_id: str
    suite: str
    state: str = Field(description="health state: unknown, healthy, degraded, flaky, broken")
    source: str = Field(description="`auto` (health model) or `manual` (a person)")
    actor: str
    reason: str
    since: datetime | None
    evidence: list[int] = Field(description="ids of the probe results that decided")

    @classmethod
    def of(cls, row: Any) -> QuarantineListing:
        """The quarantine an ``env_state`` row (an ORM row or a Core row of its columns)
        holds; only a quarantined row has one."""
        return cls(env_id=row.env_id, suite=row.suite, state=row.state,
                   source=row.q_source or "auto", actor=row.q_actor or "",
                   reason=row.q_reason or "", since=row.q_since,
                   evidence=list(row.q_evidence or ()))

    def to_json(self) -> dict[str, Any]:
        """As the exports and ``envcheck quarantine list --json`` write it (``since`` in
        ``isoformat``, which the API's documents do not use)."""
        return {**self.model_dump(), "since": self.since.isoformat() if self.since else None}


class RetiredListing(SQLModel):
    """An environment that left the daemon's catalogue, as ``envcheck retired`` and the API
    show it: when, and what it was when it left (its history stays readable)."""

    model_config = _FROZEN

    env_id: str
    suite: str
    image: str
    retired_at: datetime
    last_seen: datetime = Field(description="when a catalogue last held it")
    state: str = Field(description="its health state when it left")
    quarantined: bool


class TransitionFields(SQLModel):
    """A change of state or quarantine, as every reader shows it (the API builds on it)."""

    model_config = _FROZEN

    at: datetime = Field(sa_type=UTCDateTime)
    old_state: str
    new_state: str
    was_quarantined: bool
    quarantined: bool
    actor: str
    reason: str
    evidence: list[int] = Field(default_factory=list, sa_type=JSON)
    image_digest: str | None = None


class Transition(TransitionFields):
    """A stored transition. Its id is the feed's generation (ETags, exports)."""

    id: int | None = Field(default=None, primary_key=True)
    env_id: str = Field(index=True)


class TransitionRow(Transition, table=True):
    __tablename__ = "transition"
    model_config = _WRITABLE


class IncidentFields(SQLModel):
    """A check cycle judged an infrastructure incident, as every reader shows it (the API's
    document builds on it): its results move no state."""

    model_config = _FROZEN

    at: datetime = Field(default_factory=_now, sa_type=UTCDateTime)
    kind: str = Field(description="engine_unreachable or failure_storm")
    failing: int = Field(description="probes that failed (or hit the engine's failure)")
    total: int = Field(description="probes judged")
    detail: str
    # What the health model did not count: the cycle's results, and the failing ones among
    # them (env_id, kind, status, reason; the first few), whose states stood still.
    held_back: int = Field(0, description="results of the cycle kept out of the health model")
    held_back_failures: list[dict[str, str]] = Field(
        default_factory=list, sa_type=JSON,
        description="the failing results among them (env_id, kind, status, reason), the "
                    "first 50")


class Incident(IncidentFields):
    """A stored incident, known by its id and the check cycle (run) it happened in."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="check_run.id", index=True)


class IncidentRow(Incident, table=True):
    __tablename__ = "incident"
    model_config = _WRITABLE


class SuiteRow(SQLModel, table=True):
    """A suite as last seen in a catalogue, so the feed can answer without the YAML."""

    __tablename__ = "suite"

    id: str = Field(primary_key=True)
    description: str = ""
    allow_degraded: bool = False
    file: str = ""
    updated_at: datetime = Field(default_factory=_now, sa_type=UTCDateTime)


class DataSourceShape(SQLModel):
    """A structural fingerprint seen in a data source's answers (keys and value types, never
    values). The accepted shape is the one with the newest ``accepted_at``: the first shape
    ever seen is accepted by envcheck, later ones by a person (``envcheck accept-schema``)."""

    model_config = _FROZEN

    source_id: str
    fingerprint: str
    shape: Any = Field(sa_type=JSON)
    first_seen: datetime = Field(sa_type=UTCDateTime)
    last_seen: datetime = Field(sa_type=UTCDateTime)
    seen: int = 0  # samples with this shape
    accepted_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    accepted_by: str | None = None


class DataSourceShapeRow(DataSourceShape, table=True):
    __tablename__ = "data_source_shape"
    # Also serves every lookup by source_id (its leading column): no index of its own.
    __table_args__ = (
        UniqueConstraint("source_id", "fingerprint", name="uq_data_source_shape"),
    )
    model_config = _WRITABLE

    id: int | None = Field(default=None, primary_key=True)


class WebhookRow(SQLModel, table=True):
    """A webhook the notifier delivers to, and how far it got. Never its URL: tokens travel in
    webhook URLs, so a webhook is known by a stable hash and the name it was given."""

    __tablename__ = "webhook"

    id: str = Field(primary_key=True)
    name: str
    format: str  # alertmanager | slack
    # Transitions / incidents up to these ids are handled (delivered, failed, or nothing to
    # send); a new webhook starts at the generation it was first seen, so it gets no backlog.
    transition_cursor: int = 0
    incident_cursor: int = 0
    first_seen: datetime = Field(default_factory=_now, sa_type=UTCDateTime)
    last_seen: datetime = Field(default_factory=_now, sa_type=UTCDateTime)


class DeliveryStatus(StrEnum):
    PENDING = "pending"  # claimed; not delivered yet (a receiver outage, a shutdown)
    DELIVERED = "delivered"
    FAILED = "failed"  # the receiver refused it (a 4xx): never retried


class Delivery(SQLModel):
    """One notification to one webhook and what its delivery attempts gave. Unique per
    (webhook, subject, subject id): the same transition is never sent twice to a webhook."""

    model_config = _FROZEN

    webhook_id: str = Field(foreign_key="webhook.id")
    subject: str  # transition | incident | incident_resolved
    subject_id: int  # the transition's or the incident's id
    # A plain string column, like every enumerated value here (see the module's docstring).
    status: DeliveryStatus = Field(default=DeliveryStatus.PENDING, sa_type=AutoString)
    attempts: int = 0
    http_status: int | None = None
    last_error: str | None = None  # redacted: never the URL or its token
    created_at: datetime = Field(default_factory=_now, sa_type=UTCDateTime)
    updated_at: datetime = Field(default_factory=_now, sa_type=UTCDateTime)
    delivered_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class NotificationRow(Delivery, table=True):
    __tablename__ = "notification"
    __table_args__ = (
        UniqueConstraint("webhook_id", "subject", "subject_id", name="uq_notification"),
    )
    model_config = _WRITABLE

    id: int | None = Field(default=None, primary_key=True)


# --- rollups: what pruned results leave behind ---------------------------------------------

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
