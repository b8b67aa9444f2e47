"""Store methods for readers that browse (mixed into ``Store``): the dashboard's aggregated and
paginated reads.

Every method answers one screen in one or two statements whose cost grows with the page, not
with the fleet: counts are grouped in the database, lists are filtered, sorted and cut there
(``LIMIT``/``OFFSET``, with the total), and time buckets are computed by the database
(``strftime`` on SQLite, ``extract(epoch ...)`` on PostgreSQL) over the rows of one page of
environments. Reads use Core statements and return frozen values, never ORM rows, so results
can be cached and pickled by callers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

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

from envcheck.core.results import ProbeKind, ProbeResult
from envcheck.core.states import EnvState
from envcheck.store.access import StoreAccess
from envcheck.store.tables import (
    CheckRun,
    DataSourceShapeRow,
    EnvironmentRow,
    EnvStateRow,
    ProbeResultRow,
    SuiteRow,
    TransitionRow,
    probe_result,
)

__all__ = [
    "MAX_PAGE",
    "BucketCount",
    "DataVersion",
    "DigestSpan",
    "EnvFilter",
    "EnvListing",
    "EnvironmentRecord",
    "Page",
    "QuarantineListing",
    "ResultLine",
    "SourceUse",
    "StoredResult",
    "SuiteOverview",
    "TransitionLine",
    "ViewRecords",
]

MAX_PAGE = 500  # rows per page, whatever a caller asks for
# Environments are listed worst first: what needs a person's attention leads.
_SEVERITY_ORDER = ("broken", "flaky", "degraded", "unknown", "healthy")

T = TypeVar("T")

_RESULTS: Any = ProbeResultRow.__table__  # type: ignore[attr-defined]
_ENVS: Any = EnvironmentRow.__table__  # type: ignore[attr-defined]
_STATES: Any = EnvStateRow.__table__  # type: ignore[attr-defined]
_SUITES: Any = SuiteRow.__table__  # type: ignore[attr-defined]
_TRANSITIONS: Any = TransitionRow.__table__  # type: ignore[attr-defined]
_RUNS: Any = CheckRun.__table__  # type: ignore[attr-defined]
_SHAPES: Any = DataSourceShapeRow.__table__  # type: ignore[attr-defined]


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
class EnvironmentRecord:
    """An environment as last synced from a catalogue."""

    env_id: str
    suite: str
    image: str
    spec: dict[str, Any]
    first_seen: datetime
    last_seen: datetime


@dataclass(frozen=True, slots=True)
class BucketCount:
    """How many results of one status an environment had in one bucket (a time span or a
    run); ``bucket`` is the span's start or the run's id."""

    env_id: str
    bucket: datetime | str
    status: str
    count: int


@dataclass(frozen=True, slots=True)
class ResultLine:
    """A stored result without its evidence and details: what a timeline needs."""

    id: int
    run_id: str
    env_id: str
    kind: str
    status: str
    reason: str
    summary: str
    started_at: datetime
    duration_s: float
    image_digest: str | None
    spec_hash: str


@dataclass(frozen=True, slots=True)
class StoredResult:
    """A stored result in full, with its id and run."""

    id: int
    run_id: str
    result: ProbeResult


@dataclass(frozen=True, slots=True)
class DigestSpan:
    image_digest: str | None
    first_seen: datetime
    last_seen: datetime
    results: int
    failures: int
    kinds: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class QuarantineListing:
    env_id: str
    suite: str
    state: str
    reason: str
    source: str
    actor: str
    q_reason: str
    since: datetime | None
    evidence: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TransitionLine:
    id: int
    env_id: str
    at: datetime
    old_state: str
    new_state: str
    was_quarantined: bool
    quarantined: bool
    actor: str
    reason: str
    evidence: tuple[int, ...]
    image_digest: str | None


@dataclass(frozen=True, slots=True)
class SourceUse:
    """A data source and the environments whose catalogue entries list it."""

    source_id: str
    env_ids: tuple[str, ...] = field(default_factory=tuple)


def _clamp(limit: int) -> int:
    return max(1, min(int(limit), MAX_PAGE))


def _like(text: str) -> str:
    """A LIKE pattern matching ``text`` anywhere, its own wildcards escaped (with ``\\``)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _result_line(row: Any) -> ResultLine:
    return ResultLine(row.id, row.run_id, row.env_id, row.kind, row.status, row.reason,
                      row.summary, row.started_at, row.duration_s, row.image_digest,
                      row.spec_hash)


def _stored(row: Any) -> StoredResult:
    return StoredResult(row.id, row.run_id, probe_result(row))


_LINE_COLUMNS = ("id", "run_id", "env_id", "kind", "status", "reason", "summary", "started_at",
                 "duration_s", "image_digest", "spec_hash")
_FULL_COLUMNS = (*_LINE_COLUMNS, "evidence", "details")


class ViewRecords(StoreAccess):
    # --- what changed ---------------------------------------------------------------------

    def data_version(self) -> DataVersion:
        """The newest transition and result: two primary-key lookups."""
        with self._reading() as conn:
            generation = conn.execute(select(func.max(_TRANSITIONS.c.id))).scalar()
            newest = conn.execute(select(func.max(_RESULTS.c.id))).scalar()
            at = None
            if newest is not None:
                at = conn.execute(select(_RESULTS.c.started_at)
                                  .where(_RESULTS.c.id == newest)).scalar()
        return DataVersion(int(generation or 0), int(newest or 0), at)

    # --- the fleet ------------------------------------------------------------------------

    def suite_overview(self) -> list[SuiteOverview]:
        """Per suite: members, states and quarantine; one grouped query over environments and
        their states. What the allowlist admits of it is policy: see
        :func:`envcheck.health.quarantine.allowed_count`."""
        state = func.coalesce(_STATES.c.state, EnvState.UNKNOWN.value)
        quarantined = func.coalesce(_STATES.c.quarantined, false())
        query = (select(_ENVS.c.suite, state, quarantined, _STATES.c.q_source, func.count())
                 .select_from(_ENVS.outerjoin(_STATES, _STATES.c.env_id == _ENVS.c.id))
                 .group_by(_ENVS.c.suite, state, quarantined, _STATES.c.q_source))
        with self._reading() as conn:
            groups = conn.execute(query).all()
            suites = {row.id: row for row in conn.execute(select(_SUITES))}
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
        query = (select(_STATES.c.reason, func.count()).group_by(_STATES.c.reason))
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
        state = func.coalesce(_STATES.c.state, EnvState.UNKNOWN.value)
        conditions: list[ColumnElement[bool]] = []
        if where.suites:
            conditions.append(_ENVS.c.suite.in_(where.suites))
        if where.states:
            conditions.append(state.in_(where.states))
        if where.quarantined is not None:
            conditions.append(func.coalesce(_STATES.c.quarantined, false())
                              == (true() if where.quarantined else false()))
        if where.search:
            conditions.append(_ENVS.c.id.like(_like(where.search), escape="\\"))
        if where.reasons:
            conditions.append(or_(*(or_(_STATES.c.reason == code,
                                        _STATES.c.reason.like(f"%: {code}"))
                                    for code in where.reasons)))
        if where.kinds:
            # One index seek per candidate: (env_id, kind) lead the results' index.
            conditions.append(exists().where(_RESULTS.c.env_id == _ENVS.c.id,
                                             _RESULTS.c.kind.in_(where.kinds)))
        joined = _ENVS.outerjoin(_STATES, _STATES.c.env_id == _ENVS.c.id)
        severity = case({s: i for i, s in enumerate(_SEVERITY_ORDER)}, value=state,
                        else_=len(_SEVERITY_ORDER))
        listing = (select(_ENVS.c.id, _ENVS.c.suite, _ENVS.c.image, state.label("state"),
                          _STATES.c.reason, _STATES.c.quarantined, _STATES.c.q_source,
                          _STATES.c.q_since, _STATES.c.updated_at)
                   .select_from(joined).where(and_(true(), *conditions))
                   .order_by(severity, _ENVS.c.id).offset(max(0, offset)).limit(_clamp(limit)))
        count = select(func.count()).select_from(joined).where(and_(true(), *conditions))
        with self._reading() as conn:
            total = int(conn.execute(count).scalar_one())
            rows = conn.execute(listing).all()
        items = tuple(EnvListing(r.id, r.suite, r.image, r.state,
                                 r.reason if r.reason is not None else "never checked",
                                 bool(r.quarantined), r.q_source, r.q_since, r.updated_at)
                      for r in rows)
        return Page(total, max(0, offset), items)

    def time_buckets(self, env_ids: Sequence[str], since: datetime, until: datetime,
                     bucket_s: int, kinds: Sequence[str] = ()) -> list[BucketCount]:
        """Results of ``env_ids`` in [since, until) counted per (environment, time bucket of
        ``bucket_s`` seconds, status); the buckets are aligned to the epoch."""
        if not env_ids:
            return []
        size = max(1, int(bucket_s))
        bucket = self._epoch_bucket(size)
        query = (select(_RESULTS.c.env_id, bucket.label("bucket"), _RESULTS.c.status,
                        func.count().label("n"))
                 .where(_RESULTS.c.env_id.in_(list(env_ids)), _RESULTS.c.started_at >= since,
                        _RESULTS.c.started_at < until)
                 .group_by(_RESULTS.c.env_id, bucket, _RESULTS.c.status))
        if kinds:
            query = query.where(_RESULTS.c.kind.in_(list(kinds)))
        with self._reading() as conn:
            rows = conn.execute(query).all()
        return [BucketCount(r.env_id, datetime.fromtimestamp(int(r.bucket), UTC), r.status,
                            int(r.n)) for r in rows]

    def _epoch_bucket(self, size: int) -> ColumnElement[Any]:
        started = _RESULTS.c.started_at
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
        query = (select(_RESULTS.c.env_id, _RESULTS.c.run_id, _RESULTS.c.status,
                        func.count().label("n"))
                 .where(_RESULTS.c.env_id.in_(list(env_ids)),
                        _RESULTS.c.run_id.in_(list(run_ids)))
                 .group_by(_RESULTS.c.env_id, _RESULTS.c.run_id, _RESULTS.c.status))
        if kinds:
            query = query.where(_RESULTS.c.kind.in_(list(kinds)))
        with self._reading() as conn:
            rows = conn.execute(query).all()
        return [BucketCount(r.env_id, r.run_id, r.status, int(r.n)) for r in rows]

    def recent_runs(self, limit: int = 24) -> list[tuple[str, datetime]]:
        """(run id, start) of the newest runs, oldest of them first."""
        query = (select(_RUNS.c.id, _RUNS.c.started_at)
                 .order_by(_RUNS.c.started_at.desc()).limit(_clamp(limit)))
        with self._reading() as conn:
            rows = conn.execute(query).all()
        return [(r.id, r.started_at) for r in reversed(rows)]

    # --- one environment ------------------------------------------------------------------

    def environment_record(self, env_id: str) -> EnvironmentRecord | None:
        query = select(_ENVS).where(_ENVS.c.id == env_id)
        with self._reading() as conn:
            row = conn.execute(query).first()
        if row is None:
            return None
        return EnvironmentRecord(row.id, row.suite, row.image, dict(row.spec or {}),
                                 row.first_seen, row.last_seen)

    def result_lines(self, env_id: str, kinds: Sequence[str] = (), limit: int = 200,
                     before_id: int | None = None) -> list[ResultLine]:
        """An environment's results without evidence or details, newest first."""
        columns = [_RESULTS.c[n] for n in _LINE_COLUMNS]
        query = select(*columns).where(_RESULTS.c.env_id == env_id)
        if kinds:
            query = query.where(_RESULTS.c.kind.in_(list(kinds)))
        if before_id is not None:
            query = query.where(_RESULTS.c.id < before_id)
        query = query.order_by(_RESULTS.c.started_at.desc(), _RESULTS.c.id.desc()) \
            .limit(_clamp(limit))
        with self._reading() as conn:
            return [_result_line(r) for r in conn.execute(query)]

    def stored_results(self, result_ids: Sequence[int], env_id: str | None = None
                       ) -> list[StoredResult]:
        """The results with these ids (of ``env_id``, if given), in full, newest first."""
        ids = [int(i) for i in result_ids][:MAX_PAGE]
        if not ids:
            return []
        query = select(*(_RESULTS.c[n] for n in _FULL_COLUMNS)).where(_RESULTS.c.id.in_(ids))
        if env_id is not None:
            query = query.where(_RESULTS.c.env_id == env_id)
        query = query.order_by(_RESULTS.c.started_at.desc(), _RESULTS.c.id.desc())
        with self._reading() as conn:
            return [_stored(r) for r in conn.execute(query)]

    def latest_stored(self, env_id: str) -> list[StoredResult]:
        """The newest result of each probe kind of an environment, in full, by kind."""
        rank = func.row_number().over(
            partition_by=_RESULTS.c.kind,
            order_by=(_RESULTS.c.started_at.desc(), _RESULTS.c.id.desc())).label("rank")
        inner = (select(*(_RESULTS.c[n] for n in _FULL_COLUMNS), rank)
                 .where(_RESULTS.c.env_id == env_id).subquery())
        query = (select(*(inner.c[n] for n in _FULL_COLUMNS)).where(inner.c.rank == 1)
                 .order_by(inner.c.kind))
        with self._reading() as conn:
            return [_stored(r) for r in conn.execute(query)]

    def stored_history(self, env_id: str, kind: str, limit: int = 50) -> list[StoredResult]:
        """An environment's newest results of one kind, in full, newest first."""
        query = (select(*(_RESULTS.c[n] for n in _FULL_COLUMNS))
                 .where(_RESULTS.c.env_id == env_id, _RESULTS.c.kind == kind)
                 .order_by(_RESULTS.c.started_at.desc(), _RESULTS.c.id.desc())
                 .limit(_clamp(limit)))
        with self._reading() as conn:
            return [_stored(r) for r in conn.execute(query)]

    def digest_history(self, env_id: str) -> list[DigestSpan]:
        """Each image digest the environment's results saw, newest first."""
        failing = func.sum(case((_RESULTS.c.status.in_(["fail", "flaky"]), 1), else_=0))
        query = (select(_RESULTS.c.image_digest, func.min(_RESULTS.c.started_at),
                        func.max(_RESULTS.c.started_at), func.count(), failing,
                        _RESULTS.c.kind)
                 .where(_RESULTS.c.env_id == env_id)
                 .group_by(_RESULTS.c.image_digest, _RESULTS.c.kind))
        with self._reading() as conn:
            rows = conn.execute(query).all()
        spans: dict[str | None, list[Any]] = {}
        for digest, first, last, n, bad, kind in rows:
            span = spans.setdefault(digest, [first, last, 0, 0, set()])
            span[0], span[1] = min(span[0], first), max(span[1], last)
            span[2] += int(n)
            span[3] += int(bad or 0)
            span[4].add(kind)
        out = [DigestSpan(d, s[0], s[1], s[2], s[3], tuple(sorted(s[4])))
               for d, s in spans.items()]
        return sorted(out, key=lambda s: s.last_seen, reverse=True)

    # --- quarantine and audit -------------------------------------------------------------

    def quarantine_page(self, suites: Sequence[str] = (), source: str | None = None,
                        search: str = "", offset: int = 0, limit: int = 50
                        ) -> Page[QuarantineListing]:
        """Quarantined environments, the most recently quarantined first."""
        conditions: list[ColumnElement[bool]] = [_STATES.c.quarantined == true()]
        if suites:
            conditions.append(_STATES.c.suite.in_(list(suites)))
        if source:
            conditions.append(_STATES.c.q_source == source)
        if search:
            conditions.append(_STATES.c.env_id.like(_like(search), escape="\\"))
        columns = (_STATES.c.env_id, _STATES.c.suite, _STATES.c.state, _STATES.c.reason,
                   _STATES.c.q_source, _STATES.c.q_actor, _STATES.c.q_reason,
                   _STATES.c.q_since, _STATES.c.q_evidence)
        query = (select(*columns).where(*conditions)
                 .order_by(_STATES.c.q_since.desc(), _STATES.c.env_id)
                 .offset(max(0, offset)).limit(_clamp(limit)))
        count = select(func.count()).select_from(_STATES).where(*conditions)
        with self._reading() as conn:
            total = int(conn.execute(count).scalar_one())
            rows = conn.execute(query).all()
        return Page(total, max(0, offset), tuple(
            QuarantineListing(r.env_id, r.suite, r.state, r.reason, r.q_source or "",
                              r.q_actor or "", r.q_reason or "", r.q_since,
                              tuple(r.q_evidence or ())) for r in rows))

    def transition_page(self, env_id: str | None = None, quarantine_only: bool = False,
                        search: str = "", offset: int = 0, limit: int = 50
                        ) -> Page[TransitionLine]:
        """Transitions, newest first: the audit history (``quarantine_only``: only those that
        quarantined or released)."""
        conditions: list[ColumnElement[bool]] = []
        if env_id is not None:
            conditions.append(_TRANSITIONS.c.env_id == env_id)
        if quarantine_only:
            conditions.append(_TRANSITIONS.c.was_quarantined != _TRANSITIONS.c.quarantined)
        if search:
            conditions.append(_TRANSITIONS.c.env_id.like(_like(search), escape="\\"))
        query = (select(_TRANSITIONS).where(and_(true(), *conditions))
                 .order_by(_TRANSITIONS.c.id.desc())
                 .offset(max(0, offset)).limit(_clamp(limit)))
        count = select(func.count()).select_from(_TRANSITIONS).where(and_(true(), *conditions))
        with self._reading() as conn:
            total = int(conn.execute(count).scalar_one())
            rows = conn.execute(query).all()
        return Page(total, max(0, offset), tuple(
            TransitionLine(r.id, r.env_id, r.at, r.old_state, r.new_state,
                           bool(r.was_quarantined), bool(r.quarantined), r.actor, r.reason,
                           tuple(r.evidence or ()), r.image_digest) for r in rows))

    # --- data sources ---------------------------------------------------------------------

    def data_source_uses(self) -> list[SourceUse]:
        """Every data source a synced environment lists, with those environments."""
        users: dict[str, list[str]] = {}
        query = select(_ENVS.c.id, _ENVS.c.spec).order_by(_ENVS.c.id)
        with self._reading() as conn:
            for env_id, spec in conn.execute(query):
                for source in (spec or {}).get("data_sources") or ():
                    users.setdefault(str(source), []).append(env_id)
        return [SourceUse(s, tuple(ids)) for s, ids in sorted(users.items())]

    def shape_source_ids(self) -> list[str]:
        """Data sources with at least one observed response shape."""
        query = select(_SHAPES.c.source_id).distinct().order_by(_SHAPES.c.source_id)
        with self._reading() as conn:
            return [str(r) for r in conn.execute(query).scalars()]

    def source_results(self, env_ids: Sequence[str], limit: int = 200) -> list[StoredResult]:
        """The newest ``datasource`` results of ``env_ids``, in full, at most one per run
        (environments sharing a source share its report within a run), newest first."""
        if not env_ids:
            return []
        query = (select(*(_RESULTS.c[n] for n in _FULL_COLUMNS))
                 .where(_RESULTS.c.env_id.in_(list(env_ids)),
                        _RESULTS.c.kind == ProbeKind.DATASOURCE.value)
                 .order_by(_RESULTS.c.started_at.desc(), _RESULTS.c.id.desc())
                 .limit(_clamp(limit) * len(env_ids)))
        seen: set[str] = set()
        out: list[StoredResult] = []
        with self._reading() as conn:
            for row in conn.execute(query):
                if row.run_id in seen:
                    continue
                seen.add(row.run_id)
                out.append(_stored(row))
                if len(out) >= _clamp(limit):
                    break
        return out


def _reason_code(reason: str | None) -> str:
    """``terminal: tool_missing`` -> ``tool_missing``; other texts as they are."""
    if not reason:
        return "never checked"
    head, sep, tail = reason.partition(": ")
    return tail if sep and head in {k.value for k in ProbeKind} else reason
