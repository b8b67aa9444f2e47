"""Probe results: the rows, the records readers show, and the core result a row holds."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Index
from sqlmodel import Field, SQLModel

from envcheck.core.results import CommandEvidence, ProbeKind, ProbeResult, Reason, Status
from envcheck.store.tables.columns import FROZEN, WRITABLE, UTCDateTime

__all__ = ["ProbeResultRow", "ResultFields", "ResultLine", "probe_result"]


class ResultFields(SQLModel):
    """What every reader shows of a stored result (the API's result document builds on it)."""

    model_config = FROZEN

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
    model_config = WRITABLE

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

