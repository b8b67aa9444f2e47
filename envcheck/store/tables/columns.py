"""What the store's tables share: the UTC datetime column type and the records' configs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import ConfigDict
from sqlalchemy import DateTime, Dialect
from sqlalchemy.types import TypeDecorator

__all__ = ["FROZEN", "WRITABLE", "UTCDateTime", "now"]


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


def now() -> datetime:
    return datetime.now(UTC)


# A table that readers get frozen values of is declared as a frozen record of its columns,
# which the table class extends: each column is declared once, for the writes and the reads
# (and the API documents that build on the same records).
# (Typed Any: SQLModel types its config as its own subclass of pydantic's ConfigDict.)
FROZEN: Any = ConfigDict(frozen=True)
WRITABLE: Any = ConfigDict(frozen=False)  # rows are ORM objects, written field by field
