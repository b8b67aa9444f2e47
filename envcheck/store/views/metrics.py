"""The metrics' reads: what changed since the last scrape, by cursors on indexed columns.

A scrape reads results and transitions after the ids it has seen (primary keys), states of
the environments those transitions name, and two cheap marks (a count, a newest timestamp)
that say whether a full read is due: a catalogue sync, a state row added without a
transition, a row deleted. The full reads (every state, every environment's suite, the
newest result per environment and kind) run at start and on those marks only.

Rollouts are counters per hour, updated in place, so they have no id to follow: a scrape
reads the hours still open (by the hour index) grouped in the database, and the ids of the
environments rollouts flag (a scan of the state rows that returns only those).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from sys import intern
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, case, func, or_, select, true

from envcheck.store.core_tables import (
    ENVS,
    INCIDENTS,
    RESULTS,
    ROLLOUTS,
    STATES,
    SUITES,
    TRANSITIONS,
    UNKNOWN_ROLLOUTS,
    not_retired,
)
from envcheck.store.tables.rollups import RollupPeriod
from envcheck.store.views.common import PageViews

__all__ = ["MetricsViews", "NewestResult", "ResultTick", "StateMark", "Touched"]

_IN_BATCH = 500  # ids per IN (...): well under every backend's bound-parameter limit

# The metrics hold ids, kinds and suites as keys for as long as the daemon runs, several
# times each: read from the store they are interned, so 100,000 environments keep one copy
# of each string (the driver makes a new one per row and column).


class ResultTick(NamedTuple):
    """A stored result as the metrics count it: no summary, evidence or details."""

    id: int
    env_id: str
    kind: str
    status: str
    reason: str
    duration_s: float
    started_at: datetime
    runs: int | None = None  # the runs it holds (core.depth.RunCount; NULL: one)
    failed_runs: int | None = None
    depth: str | None = None


class StateMark(NamedTuple):
    """What the metrics show of an environment's state row."""

    env_id: str
    suite: str
    state: str
    quarantined: bool
    q_source: str | None


@dataclass(frozen=True, slots=True)
class Touched:
    """The newest result of an environment and kind, and its newest pass (None: none)."""

    env_id: str
    kind: str
    newest_at: datetime
    pass_at: datetime | None


@dataclass(frozen=True, slots=True)
class NewestResult:
    """The newest result of an environment and kind, with its details."""

    tick: ResultTick
    details: dict[str, Any]


def _tick(row: Sequence[Any]) -> ResultTick:
    rid, env_id, kind, status, reason, duration_s, started_at, runs, failed, depth = row
    return ResultTick(rid, intern(env_id), intern(kind), intern(status), intern(reason),
                      duration_s, started_at, runs, failed,
                      intern(depth) if depth is not None else None)


def _batches(ids: Sequence[Any]) -> Iterator[list[Any]]:
    for start in range(0, len(ids), _IN_BATCH):
        yield list(ids[start:start + _IN_BATCH])


def _after(column: Any, after_id: int, also: Sequence[int]) -> ColumnElement[bool]:
    """Ids above ``after_id``, and the few in ``also`` (a cursor's holes)."""
    above: ColumnElement[bool] = column > after_id
    return or_(above, column.in_(list(also))) if also else above


class MetricsViews(PageViews):
    """The metrics' reads: needs what :class:`PageViews` needs."""

    # --- results ---------------------------------------------------------------------------

    def newest_result_id(self) -> int:
        """The newest result id (0 before any): where counting from now on starts."""
        with self._reading() as conn:
            return int(conn.execute(select(func.max(RESULTS.c.id))).scalar() or 0)

    def result_ticks(self, after_id: int, limit: int, also: Sequence[int] = ()
                     ) -> list[ResultTick]:
        """Up to ``limit`` results with ids above ``after_id`` or in ``also``, by id."""
        query = (select(*(RESULTS.c[n] for n in ResultTick._fields))
                 .where(_after(RESULTS.c.id, after_id, also))
                 .order_by(RESULTS.c.id).limit(limit))
        with self._reading() as conn:
            return [_tick(row) for row in conn.execute(query)]

    def result_details(self, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The details of the results with these ids."""
        out: dict[int, dict[str, Any]] = {}
        with self._reading() as conn:
            for batch in _batches(ids):
                query = select(RESULTS.c.id, RESULTS.c.details).where(RESULTS.c.id.in_(batch))
                out.update((int(rid), dict(details or {})) for rid, details in conn.execute(query))
        return out

    def touched(self) -> list[Touched]:
        """Per environment and kind, its newest result's and newest pass's start: one grouped
        scan, run when the metrics start."""
        passed = func.max(RESULTS.c.started_at).filter(RESULTS.c.status == "pass")
        query = (select(RESULTS.c.env_id, RESULTS.c.kind, func.max(RESULTS.c.started_at),
                        passed)
                 .group_by(RESULTS.c.env_id, RESULTS.c.kind))
        with self._reading() as conn:
            return [Touched(intern(env_id), intern(kind), newest, passed)
                    for env_id, kind, newest, passed in conn.execute(query)]

    def newest_results(self, kinds: Sequence[str]) -> list[NewestResult]:
        """The newest result (by start, then id) per environment of each of ``kinds``, with
        its details: run when the metrics start."""
        rank = func.row_number().over(
            partition_by=(RESULTS.c.env_id, RESULTS.c.kind),
            order_by=(RESULTS.c.started_at.desc(), RESULTS.c.id.desc())).label("rank")
        names = (*ResultTick._fields, "details")
        inner = (select(*(RESULTS.c[n] for n in names), rank)
                 .where(RESULTS.c.kind.in_(list(kinds))).subquery())
        query = select(*(inner.c[n] for n in names)).where(inner.c.rank == 1)
        with self._reading() as conn:
            return [NewestResult(_tick(row[:-1]), dict(row[-1] or {}))
                    for row in conn.execute(query)]

    # --- states ----------------------------------------------------------------------------

    def transitions_after(self, after_id: int, also: Sequence[int] = ()
                          ) -> list[tuple[int, str]]:
        """(id, environment) of the transitions with ids above ``after_id`` or in ``also``,
        by id."""
        query = (select(TRANSITIONS.c.id, TRANSITIONS.c.env_id)
                 .where(_after(TRANSITIONS.c.id, after_id, also)).order_by(TRANSITIONS.c.id))
        with self._reading() as conn:
            return [(int(tid), intern(env_id)) for tid, env_id in conn.execute(query)]

    def state_marks(self, env_ids: Sequence[str] | None = None) -> list[StateMark]:
        """The state rows of ``env_ids`` (all of them: None); a retired environment has none
        here (its series go)."""
        columns = [STATES.c[n] for n in StateMark._fields]
        current = not_retired(STATES.c.env_id)
        with self._reading() as conn:
            if env_ids is None:
                rows = list(conn.execute(select(*columns).where(current)))
            else:
                rows = [row for batch in _batches(env_ids)
                        for row in conn.execute(select(*columns)
                                                .where(STATES.c.env_id.in_(batch), current))]
        return [StateMark(intern(env_id), intern(suite), intern(state), bool(q), source)
                for env_id, suite, state, q, source in rows]

    def state_ids(self) -> set[str]:
        with self._reading() as conn:
            return {intern(env_id) for env_id in conn.execute(
                select(STATES.c.env_id).where(not_retired(STATES.c.env_id))).scalars()}

    def state_count(self) -> int:
        with self._reading() as conn:
            return int(conn.execute(select(func.count()).select_from(STATES)
                                    .where(not_retired(STATES.c.env_id))).scalar_one())

    # --- environments and incidents --------------------------------------------------------

    def catalogue_mark(self) -> tuple[int, datetime | None]:
        """(count of environments, newest suite sync): cheap, moved by most catalogue
        syncs (the daemon's and ``envcheck check`` sync the suites too)."""
        with self._reading() as conn:
            count = conn.execute(select(func.count()).select_from(ENVS)).scalar_one()
            newest = conn.execute(select(func.max(SUITES.c.updated_at))).scalar()
        return int(count), newest

    def environments_mark(self) -> tuple[int, datetime | None]:
        """(count of current environments, newest ``last_seen``): every catalogue sync and
        every retirement or return moves it, at the cost of a scan of the table."""
        current = func.coalesce(func.sum(case((ENVS.c.retired_at.is_(None), 1), else_=0)), 0)
        query = select(current, func.max(ENVS.c.last_seen))
        with self._reading() as conn:
            count, newest = conn.execute(query).one()
        return int(count), newest

    def environment_suites(self) -> dict[str, str]:
        """Each current (not retired) environment's suite."""
        with self._reading() as conn:
            return {intern(i): intern(s) for i, s in conn.execute(
                select(ENVS.c.id, ENVS.c.suite).where(ENVS.c.retired_at.is_(None)))}

    def incident_counts(self) -> dict[str, int]:
        """Stored incidents per kind."""
        query = select(INCIDENTS.c.kind, func.count()).group_by(INCIDENTS.c.kind)
        with self._reading() as conn:
            return {str(kind): int(n) for kind, n in conn.execute(query)}

    # --- rollouts ---------------------------------------------------------------------------

    def rollout_hour_counts(self, hours: Sequence[datetime], per_environment: bool
                            ) -> dict[datetime, dict[tuple[str, str], int]]:
        """Rollouts by outcome of each of ``hours`` and of any hour after the last of them
        (a trainer's clock ahead), summed over image digests: per (environment, outcome), or
        per (suite, outcome) of the current environments' suites ('' for the others) through
        the environments table, summed in the database. Hour rows only (a day row holds
        hours long closed). One statement an hour: the key, which leads with the hour, finds
        its rows, and no time is read back per row."""
        if per_environment:
            keys: list[Any] = [ROLLOUTS.c.env_id, ROLLOUTS.c.outcome, ROLLOUTS.c["count"]]
            query = select(*keys)
        else:
            current = (ENVS.c.id == ROLLOUTS.c.env_id) & ENVS.c.retired_at.is_(None)
            suite = func.coalesce(ENVS.c.suite, "")
            query = (select(suite, ROLLOUTS.c.outcome, func.sum(ROLLOUTS.c["count"]))
                     .select_from(ROLLOUTS.outerjoin(ENVS, current))
                     .group_by(suite, ROLLOUTS.c.outcome))
        out: dict[datetime, dict[tuple[str, str], int]] = {}

        def add(hour: datetime, key: str, outcome: str, n: int) -> None:
            counts = out.setdefault(hour, {})
            key_outcome = (intern(key), intern(outcome))
            counts[key_outcome] = counts.get(key_outcome, 0) + int(n)

        query = query.where(ROLLOUTS.c.period == RollupPeriod.HOUR.value)  # not day rows
        with self._reading() as conn:
            for hour in hours:
                for key, outcome, n in conn.execute(query.where(ROLLOUTS.c.hour == hour)):
                    add(hour, key, outcome, n)
            if hours:
                later = query.add_columns(ROLLOUTS.c.hour).where(ROLLOUTS.c.hour > max(hours))
                if not per_environment:
                    later = later.group_by(ROLLOUTS.c.hour)
                for key, outcome, n, hour in conn.execute(later):
                    add(hour, key, outcome, n)
        return out

    def unknown_rollout_hours(self, since: datetime) -> list[tuple[datetime, int]]:
        """Rollouts that named no environment of the catalogue, per hour from ``since`` on."""
        query = (select(UNKNOWN_ROLLOUTS.c.hour, UNKNOWN_ROLLOUTS.c["count"])
                 .where(UNKNOWN_ROLLOUTS.c.hour >= since))
        with self._reading() as conn:
            return [(hour, int(n)) for hour, n in conn.execute(query)]

    def rollout_flagged(self) -> list[tuple[str, str]]:
        """(environment, its state row's suite) of the current environments whose rollout
        evidence flags them (``env_state.rollouts.flagged``)."""
        flagged = STATES.c.rollouts["flagged"].as_boolean()
        query = select(STATES.c.env_id, STATES.c.suite).where(
            STATES.c.rollouts.is_not(None), flagged == true(), not_retired(STATES.c.env_id))
        with self._reading() as conn:
            return [(intern(env_id), intern(suite)) for env_id, suite in conn.execute(query)]
