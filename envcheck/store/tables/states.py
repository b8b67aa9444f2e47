"""Each environment's health and quarantine, and the transitions that changed them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON
from sqlmodel import Field, SQLModel

from envcheck.store.tables.columns import FROZEN, WRITABLE, UTCDateTime, now

__all__ = ["EnvStateRow", "QuarantineListing", "Transition", "TransitionFields",
           "TransitionRow"]


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
    # the training run's rollouts as last assessed (None: no rollout evidence)
    rollouts: dict[str, Any] | None = Field(default=None, sa_type=JSON)
    quarantined: bool = False
    q_source: str | None = None
    q_actor: str | None = None
    q_reason: str | None = None
    q_since: datetime | None = Field(default=None, sa_type=UTCDateTime)
    q_evidence: list[int] = Field(default_factory=list, sa_type=JSON)
    updated_at: datetime = Field(default_factory=now, sa_type=UTCDateTime)


class QuarantineListing(SQLModel):
    """A quarantined environment as every reader shows it: the feed's list, the API (whose
    document builds on it), the CLI, the exports and the dashboard (``q_*`` columns of
    :class:`EnvStateRow`, named as the readers know them)."""

    model_config = FROZEN

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



class TransitionFields(SQLModel):
    """A change of state or quarantine, as every reader shows it (the API builds on it)."""

    model_config = FROZEN

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
    model_config = WRITABLE

