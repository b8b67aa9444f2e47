"""The feed's reads as plain SQL, and the settings every connection to the store uses.

Free of SQLAlchemy on purpose: the :class:`~envcheck.store.Store` runs these texts through
SQLAlchemy, and :mod:`envcheck.store.direct` runs the very same texts through the DB-API driver
for ``envcheck gate``, which must start fast. One text per read, so both answer alike.
Parameters are named ``:name`` (SQLAlchemy's ``text()`` and sqlite3 take that style as is).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from envcheck.core.errors import StoreError, StoreUnavailable

__all__ = ["GENERATION_SQL", "PG_CONNECT_TIMEOUT_S", "SCHEMA_HEAD", "SCHEMA_REVISION_SQL",
           "SQLITE_BUSY_TIMEOUT_MS", "SUITES_SQL", "SUITE_FEED_SQL", "FeedRow", "SuiteRef",
           "error_line", "operation_failed"]

# The newest revision in migrations/versions: bump it with every new migration (a test fails
# until it matches). A database at this revision is opened without loading Alembic.
SCHEMA_HEAD = "0008"
SQLITE_BUSY_TIMEOUT_MS = 5000
PG_CONNECT_TIMEOUT_S = 5

SCHEMA_REVISION_SQL = "SELECT version_num FROM alembic_version"
# The feed's generation: the newest transition id (NULL, i.e. 0, before any).
GENERATION_SQL = "SELECT max(id) FROM transition"
SUITES_SQL = "SELECT id, allow_degraded FROM suite ORDER BY id"
# Each current member of a suite (retired ones left out) with its state and quarantine, by id:
# what an allowlist needs, in one query of plain rows (no JSON columns), free of bound-parameter
# limits.
SUITE_FEED_SQL = """
SELECT e.id, s.state, s.reason, s.quarantined, s.q_source, s.q_reason
FROM environment AS e LEFT OUTER JOIN env_state AS s ON s.env_id = e.id
WHERE e.suite = :suite AND e.retired_at IS NULL
ORDER BY e.id
"""


class SuiteRef(NamedTuple):
    """A suite as the feed needs it."""

    id: str
    allow_degraded: bool


class FeedRow(NamedTuple):
    """A suite member as the feed sees it; ``state`` is None if it was never assessed."""

    env_id: str
    state: str | None
    reason: str | None
    quarantined: bool
    q_source: str | None
    q_reason: str | None

    @classmethod
    def of(cls, row: Sequence[Any]) -> FeedRow:
        """A row of :data:`SUITE_FEED_SQL` (SQLite returns booleans as 0/1)."""
        env_id, state, reason, quarantined, source, why = row
        return cls(env_id, state, reason, bool(quarantined), source, why)


# PEP 249's errors "related to the database's operation and not necessarily under the control
# of the programmer" (a refused or dropped connection, a full disk, a lock held past its
# timeout), and SQLAlchemy's pool giving up on a connection, by the names every driver and
# SQLAlchemy's wrappers give them: this module imports neither.
_UNAVAILABLE = frozenset({"OperationalError", "InterfaceError", "DisconnectionError",
                          "TimeoutError"})


def error_line(exc: BaseException) -> str:
    """The database's own words, one line: 'database or disk is full', not the SQL."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def operation_failed(exc: Exception, where: str = "") -> StoreError:
    """A read or write the store refused, as the one error every caller handles:
    :class:`StoreUnavailable` when the store's state refused it (``where``: the store, its
    password masked), else a :class:`StoreError` (the operation itself is at fault)."""
    message = f"store operation failed: {exc}"
    if any(cls.__name__ in _UNAVAILABLE for cls in type(exc).__mro__):
        return StoreUnavailable(message, error_line(exc), where)
    return StoreError(message)
