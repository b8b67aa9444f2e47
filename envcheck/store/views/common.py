"""What every page's reads share: the read connection, the data version that keys every
cache, pages of a list and a stored result in full.

The base class :class:`PageViews` holds the one way the views reach the database (under the
store's lock, errors as :class:`~envcheck.core.errors.StoreError`); each page's mixin builds
on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import func, select

from envcheck.core.results import ProbeResult
from envcheck.store.access import StoreAccess
from envcheck.store.core_tables import RESULTS, TRANSITIONS
from envcheck.store.tables.results import probe_result

__all__ = [
    "FULL_COLUMNS",
    "LINE_COLUMNS",
    "MAX_PAGE",
    "DataVersion",
    "Page",
    "PageViews",
    "StoredResult",
    "clamp",
    "like_pattern",
    "stored_result",
]

MAX_PAGE = 500  # rows per page, whatever a caller asks for

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a filtered list, with the size of the whole list."""

    total: int
    offset: int
    items: tuple[T, ...]


@dataclass(frozen=True, slots=True)
class DataVersion:
    """What the store holds now, in two numbers: a reader that saw the same two saw the same
    data (transitions change states and quarantine; results change everything else)."""

    generation: int  # the newest transition id
    newest_result_id: int
    newest_result_at: datetime | None


@dataclass(frozen=True, slots=True)
class StoredResult:
    """A stored result in full, with its id and run."""

    id: int
    run_id: str
    result: ProbeResult


def clamp(limit: int) -> int:
    return max(1, min(int(limit), MAX_PAGE))


def like_pattern(text: str) -> str:
    """A LIKE pattern matching ``text`` anywhere, its own wildcards escaped (with ``\\``)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"



def stored_result(row: Any) -> StoredResult:
    return StoredResult(row.id, row.run_id, probe_result(row))


LINE_COLUMNS = ("id", "run_id", "env_id", "kind", "status", "reason", "summary", "started_at",
                "duration_s", "image_digest", "spec_hash", "runs", "failed_runs", "depth")
FULL_COLUMNS = (*LINE_COLUMNS, "evidence", "details")


class PageViews(StoreAccess):
    """The reads every page shares, over :class:`~envcheck.store.access.StoreAccess`."""

    # --- what changed: read at the top of every page run ------------------------------

    def data_version(self) -> DataVersion:
        """The newest transition and result: two primary-key lookups."""
        with self._reading() as conn:
            generation = conn.execute(select(func.max(TRANSITIONS.c.id))).scalar()
            newest = conn.execute(select(func.max(RESULTS.c.id))).scalar()
            at = None
            if newest is not None:
                at = conn.execute(select(RESULTS.c.started_at)
                                  .where(RESULTS.c.id == newest)).scalar()
        return DataVersion(int(generation or 0), int(newest or 0), at)
