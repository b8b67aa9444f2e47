"""The fleet page's reads: suites at a glance, the environment list, and result counts per
time bucket or per run for the heatmap.

Time buckets are computed by the database (``strftime`` on SQLite, ``extract(epoch ...)`` on
PostgreSQL) over the rows of one page of environments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    and_,
    case,
    cast,
    exists,
    extract,
    false,
    func,
    literal,
    or_,
    select,
    true,
)

from envcheck.core.results import ProbeKind
from envcheck.core.states import NEVER_CHECKED, EnvState
from envcheck.store.core_tables import ENVS, RESULTS, ROLLUPS, RUNS, STATES, SUITES, not_retired
from envcheck.store.rollups import hourly_from
from envcheck.store.tables.rollups import RollupPeriod
from envcheck.store.views.common import Page, PageViews, clamp, like_pattern

__all__ = ["BucketCount", "EnvFilter", "EnvListing", "FleetViews", "SuiteOverview"]

# Environments are listed worst first: what needs a person's attention leads.
_SEVERITY_ORDER = ("broken", "flaky", "degraded", "unknown", "healthy")


@dataclass(frozen=True, slots=True)
class SuiteOverview:
    suite: str
    description: str
    allow_degraded: bool
    environments: int
    by_state: dict[str, int]
    open_by_state: dict[str, int]  # the same, for environments not quarantined
    quarantined: int
    quarantined_manual: int


@dataclass(frozen=True, slots=True)
class EnvFilter:
    """Which environments a list shows; empty tuples mean "any"."""

    suites: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()  # environments with results of these probe kinds
    reasons: tuple[str, ...] = ()  # reason codes of the environment's state
    quarantined: bool | None = None
    search: str = ""  # a substring of the id


@dataclass(frozen=True, slots=True)
class EnvListing:
    env_id: str
    suite: str
    image: str
    state: str
    reason: str
    quarantined: bool
    q_source: str | None
    q_since: datetime | None
    updated_at: datetime | None


@dataclass(frozen=True, slots=True)
class BucketCount:
    """How many results of one status an environment had in one bucket (a time span or a
    run); ``bucket`` is the span's start or the run's id."""

    env_id: str
    bucket: datetime | str
    status: str
    count: int


class FleetViews(PageViews):
    """The fleet page: needs what :class:`PageViews` needs."""

    def suite_overview(self) -> list[SuiteOverview]:
        """Per suite: members, states and quarantine; one grouped query over environments and
        their states. What the allowlist admits of it is policy: see
        :func:`envcheck.health.quarantine.allowed_count`."""
        state = func.coalesce(STATES.c.state, EnvState.UNKNOWN.value)
        quarantined = func.coalesce(STATES.c.quarantined, false())
        query = (select(ENVS.c.suite, state, quarantined, STATES.c.q_source, func.count())
                 .select_from(ENVS.outerjoin(STATES, STATES.c.env_id == ENVS.c.id))
                 .where(ENVS.c.retired_at.is_(None))
                 .group_by(ENVS.c.suite, state, quarantined, STATES.c.q_source))
        with self._reading() as conn:
            groups = conn.execute(query).all()
            suites = {row.id: row for row in conn.execute(select(SUITES))}
        counts: dict[str, dict[str, Any]] = {}
        for suite, st, q, source, n in groups:
            entry = counts.setdefault(suite, {"n": 0, "open": {}, "by_state": {}, "q": 0,
                                              "manual": 0})
            entry["n"] += n
            entry["by_state"][st] = entry["by_state"].get(st, 0) + n
            if q:
                entry["q"] += n
                entry["manual"] += n if source == "manual" else 0
            else:
                entry["open"][st] = entry["open"].get(st, 0) + n
        out = []
        for suite in sorted(counts.keys() | suites.keys()):
            entry = counts.get(suite, {"n": 0, "open": {}, "by_state": {}, "q": 0,
                                       "manual": 0})
            row = suites.get(suite)
            out.append(SuiteOverview(
                suite, row.description if row is not None else "",
                bool(row.allow_degraded) if row is not None else False, entry["n"],
                {s: entry["by_state"].get(s, 0) for s in _SEVERITY_ORDER
                 if entry["by_state"].get(s)}, entry["open"], entry["q"], entry["manual"]))
        return out

    def state_reasons(self) -> list[tuple[str, int]]:
        """Reason codes of environment states with how many environments have each, most
        frequent first (``terminal: tool_missing`` counts as ``tool_missing``)."""
        query = (select(STATES.c.reason, func.count()).where(not_retired(STATES.c.env_id))
                 .group_by(STATES.c.reason))
        with self._reading() as conn:
            rows = conn.execute(query).all()
        codes: dict[str, int] = {}
        for reason, n in rows:
            code = _reason_code(reason)
            codes[code] = codes.get(code, 0) + n
        return sorted(codes.items(), key=lambda item: (-item[1], item[0]))

    def environment_page(self, where: EnvFilter | None = None, offset: int = 0,
                         limit: int = 50) -> Page[EnvListing]:
        """A page of environments matching ``where``, worst state first, then by id."""
        where = where or EnvFilter()
        state = func.coalesce(STATES.c.state, EnvState.UNKNOWN.value)
        conditions: list[ColumnElement[bool]] = [ENVS.c.retired_at.is_(None)]
        if where.suites:
            conditions.append(ENVS.c.suite.in_(where.suites))
        if where.states:
            conditions.append(state.in_(where.states))
        if where.quarantined is not None:
            conditions.append(func.coalesce(STATES.c.quarantined, false())
                              == (true() if where.quarantined else false()))
        if where.search:
            conditions.append(ENVS.c.id.like(like_pattern(where.search), escape="\\"))
        if where.reasons:
            conditions.append(or_(*(or_(STATES.c.reason == code,
                                        STATES.c.reason.like(f"%: {code}"))
                                    for code in where.reasons)))
        if where.kinds:
            # One index seek per candidate: (env_id, kind) lead the results' index.
            conditions.append(exists().where(RESULTS.c.env_id == ENVS.c.id,
                                             RESULTS.c.kind.in_(where.kinds)))
        joined = ENVS.outerjoin(STATES, STATES.c.env_id == ENVS.c.id)
        severity = case({s: i for i, s in enumerate(_SEVERITY_ORDER)}, value=state,
                        else_=len(_SEVERITY_ORDER))
        listing = (select(ENVS.c.id, ENVS.c.suite, ENVS.c.image, state.label("state"),
                          STATES.c.reason, STATES.c.quarantined, STATES.c.q_source,
                          STATES.c.q_since, STATES.c.updated_at)
                   .select_from(joined).where(and_(true(), *conditions))
                   .order_by(severity, ENVS.c.id).offset(max(0, offset)).limit(clamp(limit)))
        count = select(func.count()).select_from(joined).where(and_(true(), *conditions))
        with self._reading() as conn:
            total = int(conn.execute(count).scalar_one())
            rows = conn.execute(listing).all()
        items = tuple(EnvListing(r.id, r.suite, r.image, r.state,
                                 r.reason if r.reason is not None else NEVER_CHECKED,
                                 bool(r.quarantined), r.q_source, r.q_since, r.updated_at)
                      for r in rows)
        return Page(total, max(0, offset), items)

    def time_buckets(self, env_ids: Sequence[str], since: datetime, until: datetime,
                     bucket_s: int, kinds: Sequence[str] = ()) -> list[BucketCount]:
        """Results of ``env_ids`` in [since, until) counted per (environment, time bucket of
        ``bucket_s`` seconds, status); the buckets are aligned to the epoch. Pruned results
        count from the rollups, at the start of their hour (or day, before the hour rollups'
        horizon): buckets of whole hours come out the same before and after a prune."""
        if not env_ids:
            return []
        size = max(1, int(bucket_s))
        with self.snapshot() as conn:  # a prune running meanwhile: before or after, not half
            mark = hourly_from(conn)
            parts = [
                (RESULTS.c.started_at, func.count(), (RESULTS.c.started_at >= since,
                                                      RESULTS.c.started_at < until)),
                (ROLLUPS.c.start, func.sum(ROLLUPS.c.count),
                 (ROLLUPS.c.period == RollupPeriod.HOUR.value,
                  ROLLUPS.c.start >= max(since, mark), ROLLUPS.c.start < until)),
                (ROLLUPS.c.start, func.sum(ROLLUPS.c.count),
                 (ROLLUPS.c.period == RollupPeriod.DAY.value, ROLLUPS.c.start >= since,
                  ROLLUPS.c.start < min(until, mark)))]
            counts: dict[tuple[str, int, str], int] = {}
            for at, n, window in parts:
                table = at.table
                bucket = self._epoch_bucket(at, size)
                query = (select(table.c.env_id, bucket.label("bucket"), table.c.status,
                                n.label("n"))
                         .where(table.c.env_id.in_(list(env_ids)), *window)
                         .group_by(table.c.env_id, bucket, table.c.status))
                if kinds:
                    query = query.where(table.c.kind.in_(list(kinds)))
                for r in conn.execute(query):
                    key = (r.env_id, int(r.bucket), r.status)
                    counts[key] = counts.get(key, 0) + int(r.n)
        return [BucketCount(env_id, datetime.fromtimestamp(at, UTC), status, n)
                for (env_id, at, status), n in counts.items()]

    def _epoch_bucket(self, started: Any, size: int) -> ColumnElement[Any]:
        if self._engine.dialect.name == "sqlite":
            # Stored as 'YYYY-MM-DD HH:MM:SS.ffffff' in UTC: strftime reads it as UTC.
            seconds: ColumnElement[Any] = cast(func.strftime("%s", started), Integer)
            return (seconds // literal(size)) * literal(size)  # floor division
        epoch = extract("epoch", started)
        return cast(func.floor(epoch / literal(size)) * literal(size), BigInteger)

    def run_buckets(self, env_ids: Sequence[str], run_ids: Sequence[str],
                    kinds: Sequence[str] = ()) -> list[BucketCount]:
        """Results of ``env_ids`` in the runs ``run_ids``, counted per (environment, run,
        status)."""
        if not env_ids or not run_ids:
            return []
        query = (select(RESULTS.c.env_id, RESULTS.c.run_id, RESULTS.c.status,
                        func.count().label("n"))
                 .where(RESULTS.c.env_id.in_(list(env_ids)),
                        RESULTS.c.run_id.in_(list(run_ids)))
                 .group_by(RESULTS.c.env_id, RESULTS.c.run_id, RESULTS.c.status))
        if kinds:
            query = query.where(RESULTS.c.kind.in_(list(kinds)))
        with self._reading() as conn:
            rows = conn.execute(query).all()
        return [BucketCount(r.env_id, r.run_id, r.status, int(r.n)) for r in rows]

    def recent_runs(self, limit: int = 24) -> list[tuple[str, datetime]]:
        """(run id, start) of the newest runs, oldest of them first."""
        query = (select(RUNS.c.id, RUNS.c.started_at)
                 .order_by(RUNS.c.started_at.desc()).limit(clamp(limit)))
        with self._reading() as conn:
            rows = conn.execute(query).all()
        return [(r.id, r.started_at) for r in reversed(rows)]

def _reason_code(reason: str | None) -> str:
    """``terminal: tool_missing`` -> ``tool_missing``; other texts as they are."""
    if not reason:
        return NEVER_CHECKED
    head, sep, tail = reason.partition(": ")
    return tail if sep and head in {k.value for k in ProbeKind} else reason
