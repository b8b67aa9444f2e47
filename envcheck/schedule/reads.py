"""The scheduler's reads of the store: a few columns over the whole fleet, as plain rows."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func
from sqlalchemy import select as sa_select
from sqlalchemy.exc import SQLAlchemyError

from envcheck.store import Store
from envcheck.store.core_tables import RESULTS, RUNS, STATES
from envcheck.store.database import redact
from envcheck.store.sql import operation_failed
from envcheck.store.tables.runs import RunState

__all__ = ["latest_outcomes", "states", "unassessed_env_ids"]


def _rows(store: Store, query: Any) -> list[Any]:
    """A read of a few columns over the whole fleet as plain rows: 10,000 ORM objects with
    their JSON columns would take most of a second, at start and at every window."""
    try:
        with store.engine.connect() as conn:
            return list(conn.execute(query))
    except SQLAlchemyError as exc:
        raise operation_failed(exc, redact(store.engine.url)) from exc


def unassessed_env_ids(store: Store) -> set[str]:
    """Environments with results in interrupted runs: nobody assessed those runs.

    A superset over time (assessing again changes nothing), bounded by the fleet.
    """
    query = (sa_select(RESULTS.c.env_id).distinct()
             .join(RUNS, RUNS.c.id == RESULTS.c.run_id)
             .where(RUNS.c.state == RunState.INTERRUPTED.value))
    return {row[0] for row in _rows(store, query)}


def latest_outcomes(store: Store) -> list[Any]:
    """(env_id, kind, status, started_at, image_digest) of the latest result of every
    environment and kind (by started_at, then id)."""
    rank = func.row_number().over(partition_by=(RESULTS.c.env_id, RESULTS.c.kind),
                                  order_by=(RESULTS.c.started_at.desc(), RESULTS.c.id.desc()))
    names = ("env_id", "kind", "status", "started_at", "image_digest")
    ranked = sa_select(*(RESULTS.c[n] for n in names), rank.label("rank")).subquery()
    return _rows(store, sa_select(*(ranked.c[n] for n in names)).where(ranked.c.rank == 1))


def states(store: Store) -> tuple[set[str], set[str]]:
    """The environments quarantined, and those suspect, by their stored states."""
    rows = _rows(store, sa_select(STATES.c.env_id, STATES.c.state, STATES.c.quarantined))
    quarantined = {env_id for env_id, _, q in rows if q}
    suspect = {env_id for env_id, state, _ in rows if state in ("degraded", "flaky",
                                                                 "broken")}
    return quarantined, suspect
