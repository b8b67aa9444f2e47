"""Environments and suites as a catalogue last defined them, and the environments that left it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON
from sqlmodel import Field, SQLModel

from envcheck.store.tables.columns import FROZEN, UTCDateTime, now

__all__ = ["EnvironmentRow", "RetiredListing", "SuiteRow"]


class EnvironmentRow(SQLModel, table=True):
    """The last catalogue definition seen for an environment, so history outlives the YAML."""

    __tablename__ = "environment"

    id: str = Field(primary_key=True)
    suite: str
    image: str
    spec: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    first_seen: datetime = Field(default_factory=now, sa_type=UTCDateTime)
    last_seen: datetime = Field(default_factory=now, sa_type=UTCDateTime)
    # Set when the environment left the daemon's catalogue: it leaves allowlists, counts and
    # metrics, keeps its history, and is cleared when the environment comes back.
    retired_at: datetime | None = Field(default=None, sa_type=UTCDateTime)



class SuiteRow(SQLModel, table=True):
    """A suite as last seen in a catalogue, so the feed can answer without the YAML."""

    __tablename__ = "suite"

    id: str = Field(primary_key=True)
    description: str = ""
    allow_degraded: bool = False
    file: str = ""
    updated_at: datetime = Field(default_factory=now, sa_type=UTCDateTime)



class RetiredListing(SQLModel):
    """An environment that left the daemon's catalogue, as ``envcheck retired`` and the API
    show it: when, and what it was when it left (its history stays readable)."""

    model_config = FROZEN

    env_id: str
    suite: str
    image: str
    retired_at: datetime
    last_seen: datetime = Field(description="when a catalogue last held it")
    state: str = Field(description="its health state when it left")
    quarantined: bool

