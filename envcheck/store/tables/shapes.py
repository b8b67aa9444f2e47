"""The shapes seen in data sources' answers, and which one is accepted."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, UniqueConstraint
from sqlmodel import Field, SQLModel

from envcheck.store.tables.columns import FROZEN, WRITABLE, UTCDateTime

__all__ = ["DataSourceShape", "DataSourceShapeRow"]


class DataSourceShape(SQLModel):
    """A structural fingerprint seen in a data source's answers (keys and value types, never
    values). The accepted shape is the one with the newest ``accepted_at``: the first shape
    ever seen is accepted by envcheck, later ones by a person (``envcheck accept-schema``)."""

    model_config = FROZEN

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
    model_config = WRITABLE

    id: int | None = Field(default=None, primary_key=True)

