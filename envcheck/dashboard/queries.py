"""The dashboard's query layer: typed, cached reads over the store's API, and its one write path
(quarantine changes through the HTTP API).

The Streamlit pages in ``dashboards/`` get every number from here and run no SQL of their own;
the heavy lifting (grouping, paging, time buckets) happens in the store
(:mod:`envcheck.store.views`), so a page costs the same with 100 environments or 10,000.

**Caching.** Each read is an ``st.cache_data`` function whose first two arguments are the
store URL and the :class:`~envcheck.store.views.DataVersion` read at the top of the page run
(the feed generation and the newest result id: two primary-key lookups). A new transition or
a new result is a new key, so a page never mixes data older than what it announced; the TTL
bounds memory and what changes without either (a catalogue sync, an accepted shape). One
:class:`~envcheck.store.Store` per URL is shared by all sessions (``st.cache_resource``).

**Writes.** Quarantine and release go through the API (``POST``/``DELETE /v1/quarantine``)
with the bearer token, never straight into the store: one writer path, authenticated, that
also rewrites the export files schedulers fall back on and serialises changes. Without an API
URL (``ENVCHECK_API_URL``) or a token the dashboard is read-only and says so.

Only the dashboard imports this module: it imports streamlit, which the daemon must not.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Literal

import streamlit as st

from envcheck.client import ApiError, EnvcheckClient, EnvcheckUnavailable
from envcheck.core.errors import EnvcheckError
from envcheck.core.states import EnvState
from envcheck.health.quarantine import allowed, allowed_count
from envcheck.health.sprt import wilson_interval
from envcheck.net.apitoken import ApiConfigError, load_api_token
from envcheck.store import Store, default_database_url, open_store
from envcheck.store.shapes import DataSourceShape
from envcheck.store.views.common import DataVersion, Page, StoredResult
from envcheck.store.views.data_sources import SourceUse
from envcheck.store.views.environment import DigestSpan, ResultLine
from envcheck.store.views.fleet import EnvFilter, EnvListing, SuiteOverview
from envcheck.store.views.quarantine import QuarantineListing, TransitionLine

__all__ = [
    "API_URL_ENV",
    "STATUS_ORDER",
    "TTL_S",
    "ApiSettings",
    "Bucketing",
    "ChangeOutcome",
    "DriftEvent",
    "EnvironmentView",
    "FlakyReport",
    "HeatCell",
    "Incident",
    "KindStats",
    "SourceHistory",
    "SourcePoint",
    "SourceSummary",
    "SuiteStats",
    "api_settings",
    "change_quarantine",
    "data_sources",
    "data_version",
    "database_url",
    "digests",
    "environment",
    "environments",
    "flaky_tests",
    "fleet",
    "heatmap",
    "incidents",
    "latest_results",
    "quarantine",
    "reason_codes",
    "results",
    "source_history",
    "store_for",
    "suite_stats",
    "timeline",
    "transitions",
    "window_rates",
]

API_URL_ENV = "ENVCHECK_API_URL"
TTL_S = 60
_MAX_ENTRIES = 256
# The worst status in a bucket colours it; error (envcheck's own failure) outranks a pass so
# an incident stays visible, but never a failure of the environment.
STATUS_ORDER = ("fail", "flaky", "error", "pass", "skip")
Bucketing = Literal["hour", "run"]
# How many users of a data source are read to follow it: all users share one report per run.
_SOURCE_READERS = 3


# --- the store ----------------------------------------------------------------------------------


def database_url() -> str:
    """``$ENVCHECK_DATABASE_URL``, else envcheck's local SQLite file (as every command)."""
    return default_database_url()


@st.cache_resource(show_spinner=False, on_release=lambda store: store.close())
def store_for(url: str) -> Store:
    """The store at ``url``, opened (and migrated) once per process, shared by sessions."""
    return open_store(url)


def data_version(url: str) -> DataVersion:
    """What the store holds now; read on every page run (uncached), it keys every cache."""
    return store_for(url).data_version()


# --- the fleet ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SuiteStats(SuiteOverview):
    """A suite's overview with what the allowlist admits of it (the quarantine policy's rule)."""

    allowed: int

    @property
    def healthy_fraction(self) -> float:
        """The share of the suite a scheduler may use now (as the allowlist counts it)."""
        return self.allowed / self.environments if self.environments else 0.0


def suite_stats(store: Store) -> list[SuiteStats]:
    return [SuiteStats(**{f.name: getattr(o, f.name) for f in fields(o)},
                       allowed=allowed_count(o.open_by_state, o.allow_degraded))
            for o in store.suite_overview()]


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def fleet(url: str, version: DataVersion) -> list[SuiteStats]:
    return suite_stats(store_for(url))


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def reason_codes(url: str, version: DataVersion) -> list[tuple[str, int]]:
    return store_for(url).state_reasons()


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def environments(url: str, version: DataVersion, where: EnvFilter, page: int,
                 page_size: int) -> Page[EnvListing]:
    """Page ``page`` (1-based) of the environments matching ``where``, worst first."""
    return store_for(url).environment_page(where, (max(1, page) - 1) * page_size, page_size)


@dataclass(frozen=True, slots=True)
class HeatCell:
    """One cell of the fleet heatmap: an environment in a bucket (an hour or a run)."""

    env_id: str
    start: datetime  # the bucket's start (a run's: when it started)
    label: str  # what the axis shows
    status: str  # the worst status in the bucket (STATUS_ORDER)
    counts: dict[str, int]

    @property
    def results(self) -> int:
        return sum(self.counts.values())


def worst(statuses: Mapping[str, int]) -> str:
    present = [s for s in STATUS_ORDER if statuses.get(s)]
    return present[0] if present else "skip"


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def heatmap(url: str, version: DataVersion, env_ids: tuple[str, ...], bucketing: Bucketing,
            span: int, kinds: tuple[str, ...] = ()) -> list[HeatCell]:
    """Cells for ``env_ids``: the last ``span`` hours up to the newest result (``hour``), or
    the newest ``span`` runs (``run``). Buckets holding a cycle judged an infrastructure
    incident say so in their label: their failures moved no state."""
    store = store_for(url)
    counts: dict[tuple[str, datetime, str], Counter[str]] = {}
    incident_runs = {i.run_id for i in store.incidents(100)}
    if bucketing == "run":
        runs = store.recent_runs(span)
        started = dict(runs)
        for b in store.run_buckets(env_ids, [r for r, _ in runs], kinds):
            assert isinstance(b.bucket, str)
            at = started[b.bucket]
            label = f"{at:%m-%d %H:%M} {b.bucket[:6]}"
            if b.bucket in incident_runs:
                label += " (incident)"
            counts.setdefault((b.env_id, at, label), Counter())[b.status] += b.count
    else:
        newest = version.newest_result_at
        if newest is None:
            return []
        incident_hours = {run.started_at.replace(minute=0, second=0, microsecond=0)
                          for run in map(store.run, incident_runs) if run is not None}
        until = newest.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        for b in store.time_buckets(env_ids, until - timedelta(hours=span), until, 3600,
                                    kinds):
            assert isinstance(b.bucket, datetime)
            label = f"{b.bucket:%m-%d %H:00}" + (" (incident)" if b.bucket in incident_hours
                                                 else "")
            counts.setdefault((b.env_id, b.bucket, label), Counter())[b.status] += b.count
    return [HeatCell(env, at, label, worst(c), dict(c))
            for (env, at, label), c in sorted(counts.items(), key=lambda kv: kv[0][1])]


@dataclass(frozen=True, slots=True)
class Incident:
    id: int
    run_id: str
    at: datetime
    kind: str
    failing: int
    total: int
    detail: str


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def incidents(url: str, version: DataVersion, limit: int = 20) -> list[Incident]:
    return [Incident(r.id or 0, r.run_id, r.at, r.kind, r.failing, r.total, r.detail)
            for r in store_for(url).incidents(limit)]


# --- one environment ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KindStats:
    """The health model's view of one probe kind: the current identity's evidence."""

    kind: str
    state: str
    reason: str
    passes: int
    failures: int
    wilson: tuple[float, float]
    llr: float
    image_digest: str | None
    spec_hash: str | None

    @property
    def runs(self) -> int:
        return self.passes + self.failures

    @property
    def failure_rate(self) -> float | None:
        return self.failures / self.runs if self.runs else None


@dataclass(frozen=True, slots=True)
class EnvironmentView:
    env_id: str
    suite: str
    image: str
    state: str
    reason: str
    allowed: bool
    image_digest: str | None
    updated_at: datetime | None
    quarantined: bool
    q_source: str | None
    q_actor: str | None
    q_reason: str | None
    q_since: datetime | None
    q_evidence: tuple[int, ...]
    kinds: tuple[KindStats, ...]
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    data_sources: tuple[str, ...] = ()


def _kind_stats(kind: str, doc: Mapping[str, Any]) -> KindStats:
    wilson = doc.get("wilson") or (0.0, 1.0)
    return KindStats(kind, str(doc.get("state", "unknown")), str(doc.get("reason", "")),
                     int(doc.get("passes", 0)), int(doc.get("failures", 0)),
                     (float(wilson[0]), float(wilson[1])), float(doc.get("llr", 0.0)),
                     doc.get("image_digest"), doc.get("spec_hash"))


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def environment(url: str, version: DataVersion, env_id: str) -> EnvironmentView | None:
    """An environment's state, why, quarantine and per-kind evidence; None if unknown."""
    store = store_for(url)
    record = store.environment_record(env_id)
    if record is None:
        return None
    row = store.env_state(env_id)
    suite = next((s for s in store.suites() if s.id == record.suite), None)
    tests = record.spec.get("tests") or {}
    state = EnvState(row.state) if row is not None else EnvState.UNKNOWN
    quarantined = row is not None and row.quarantined
    return EnvironmentView(
        env_id=env_id, suite=record.suite, image=record.image, state=str(state),
        reason=row.reason if row is not None else "never checked",
        allowed=allowed(state, quarantined, suite is not None and suite.allow_degraded),
        image_digest=row.image_digest if row is not None else None,
        updated_at=row.updated_at if row is not None else None, quarantined=quarantined,
        q_source=row.q_source if row is not None else None,
        q_actor=row.q_actor if row is not None else None,
        q_reason=row.q_reason if row is not None else None,
        q_since=row.q_since if row is not None else None,
        q_evidence=tuple(row.q_evidence) if row is not None else (),
        kinds=tuple(_kind_stats(k, v) for k, v in sorted((row.kinds if row else {}).items())),
        fail_to_pass=tuple(tests.get("fail_to_pass") or ()),
        pass_to_pass=tuple(tests.get("pass_to_pass") or ()),
        data_sources=tuple(record.spec.get("data_sources") or ()))


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def timeline(url: str, version: DataVersion, env_id: str, limit: int = 200,
             kinds: tuple[str, ...] = ()) -> list[ResultLine]:
    """The environment's newest results (without evidence), newest first."""
    return store_for(url).result_lines(env_id, kinds, limit)


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def results(url: str, version: DataVersion, env_id: str, ids: tuple[int, ...]
            ) -> list[StoredResult]:
    """These results of the environment, in full (evidence and details)."""
    return store_for(url).stored_results(ids, env_id)


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def latest_results(url: str, version: DataVersion, env_id: str) -> list[StoredResult]:
    return store_for(url).latest_stored(env_id)


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def digests(url: str, version: DataVersion, env_id: str) -> list[DigestSpan]:
    return store_for(url).digest_history(env_id)


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def transitions(url: str, version: DataVersion, env_id: str | None = None,
                quarantine_only: bool = False, search: str = "", page: int = 1,
                page_size: int = 50) -> Page[TransitionLine]:
    """The audit history, newest first (of ``env_id``, if given)."""
    return store_for(url).transition_page(env_id, quarantine_only, search,
                                          (max(1, page) - 1) * page_size, page_size)


def window_rates(lines: Sequence[ResultLine]) -> dict[str, tuple[int, int, float, float]]:
    """Per kind over ``lines``: (failures, counted runs, Wilson low, Wilson high). Counted as
    the health model counts: pass, fail and flaky; error and skip never count."""
    tally: dict[str, list[int]] = {}
    for line in lines:
        if line.status in ("pass", "fail", "flaky"):
            entry = tally.setdefault(line.kind, [0, 0])
            entry[0] += line.status != "pass"
            entry[1] += 1
    return {k: (f, n, *wilson_interval(f, n)) for k, (f, n) in sorted(tally.items())}


@dataclass(frozen=True, slots=True)
class FlakyReport:
    """The tests probe's flaky tests over an environment's recent results.

    ``tests``: test id -> (times named flaky, probes read, kind of the newest verdict,
    passed/runs of the newest verdict). ``pattern``: the newest probe that named flaky tests,
    one (test, run label, phase, outcome) per cell, outcome one of ``pass``, ``fail``,
    ``fail (expected)`` (a fail-to-pass test before the oracle) or ``invalid run``.
    """

    probes: int
    tests: dict[str, tuple[int, str, str]] = field(default_factory=dict)
    pattern: tuple[tuple[str, str, str, str], ...] = ()
    pattern_result_id: int | None = None
    pattern_at: datetime | None = None


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def flaky_tests(url: str, version: DataVersion, env_id: str, limit: int = 50) -> FlakyReport:
    store = store_for(url)
    history = store.stored_history(env_id, "tests", limit)
    record = store.environment_record(env_id)
    spec_f2p = set(((record.spec if record else {}).get("tests") or {}).get("fail_to_pass") or ())
    named: Counter[str] = Counter()
    newest: dict[str, tuple[str, str]] = {}
    pattern: list[tuple[str, str, str, str]] = []
    pattern_id: int | None = None
    pattern_at: datetime | None = None
    for stored in history:  # newest first
        details = stored.result.details
        flaky = details.get("flaky") or {}
        for test_id in details.get("flaky_tests") or ():
            named[test_id] += 1
            if test_id not in newest:
                info = flaky.get(test_id) or {}
                newest[test_id] = (str(info.get("kind", "?")),
                                   f"{info.get('passed', '?')}/{info.get('runs', '?')}")
        if not pattern and details.get("flaky_tests"):
            pattern_id, pattern_at = stored.id, stored.result.started_at
            pattern = _pattern(details, list(details["flaky_tests"]), spec_f2p)
    tests = {t: (n, *newest[t]) for t, n in sorted(named.items(), key=lambda kv: (-kv[1], kv[0]))}
    return FlakyReport(len(history), tests, tuple(pattern), pattern_id, pattern_at)


def _pattern(details: Mapping[str, Any], tests: list[str], f2p: set[str]
             ) -> list[tuple[str, str, str, str]]:
    cells = []
    for run in details.get("runs") or ():
        label, phase = str(run.get("label", "?")), str(run.get("phase", "?"))
        failed = set(run.get("not_passed") or ())
        for test_id in tests:
            if run.get("problem"):
                outcome = "invalid run"
            elif test_id not in failed:
                outcome = "pass"
            elif phase == "negative" and test_id in f2p:
                outcome = "fail (expected)"
            else:
                outcome = "fail"
            cells.append((test_id, label, phase, outcome))
    return cells


# --- quarantine ---------------------------------------------------------------------------------


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def quarantine(url: str, version: DataVersion, suites: tuple[str, ...] = (),
               source: str | None = None, search: str = "", page: int = 1,
               page_size: int = 50) -> Page[QuarantineListing]:
    return store_for(url).quarantine_page(suites, source, search,
                                          (max(1, page) - 1) * page_size, page_size)


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """Where quarantine changes go, and whether this process holds a token for them."""

    url: str | None
    token: str | None = field(default=None, repr=False)
    problem: str | None = None  # why the token setting is unusable, if it is

    @property
    def writable(self) -> bool:
        return self.url is not None and self.token is not None


def api_settings(environ: Mapping[str, str] | None = None) -> ApiSettings:
    """The API URL (``$ENVCHECK_API_URL``) and the token of this process
    (``$ENVCHECK_API_TOKEN`` or ``$ENVCHECK_API_TOKEN_FILE``, as the API reads them)."""
    environ = os.environ if environ is None else environ
    url = environ.get(API_URL_ENV, "").strip().rstrip("/") or None
    try:
        token = load_api_token(environ)
    except ApiConfigError as exc:
        return ApiSettings(url, None, str(exc))
    return ApiSettings(url, token)


@dataclass(frozen=True, slots=True)
class ChangeOutcome:
    ok: bool
    message: str
    changed: bool = False
    generation: int | None = None


def change_quarantine(api_url: str, token: str, env_id: str, *, add: bool, reason: str,
                      actor: str, timeout: tuple[float, float] = (3.05, 15.0)
                      ) -> ChangeOutcome:
    """Quarantine (``add``) or release ``env_id`` through the API; never raises for what the
    API or the network answers: the outcome says it, in words for a person."""
    verb = "quarantined" if add else "released"
    try:
        with EnvcheckClient(api_url, token, timeout=timeout, retries=1) as client:
            answer = (client.quarantine_add if add else client.quarantine_release)(
                env_id, reason, actor)
    except ApiError as exc:
        return ChangeOutcome(False, f"the API refused ({exc.status} {exc.error}): {exc.reason}")
    except EnvcheckUnavailable as exc:
        return ChangeOutcome(False, f"the API did not answer: {exc}")
    except EnvcheckError as exc:  # pragma: no cover - the client raises only the two above
        return ChangeOutcome(False, str(exc))
    generation = answer.get("generation")
    if not answer.get("changed"):
        state = "already quarantined by hand" if add else "not quarantined"
        return ChangeOutcome(True, f"{env_id} was {state}: nothing changed", False, generation)
    note = "" if answer.get("exports_written", True) else \
        " (the API could not rewrite the export files: see its log)"
    return ChangeOutcome(True, f"{env_id} {verb} (generation {generation}){note}", True,
                         generation)


# --- data sources -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourcePoint:
    """One report of a data source (one probe in one run), as a result's details hold it."""

    at: datetime
    run_id: str
    result_id: int
    env_id: str
    status: str
    reason: str
    samples: int
    ok: int
    availability: float | None
    p50_ms: float | None
    p95_ms: float | None
    max_ms: float | None
    budget_ms: float | None
    retries: int
    failures: dict[str, int]
    accepted: str | None
    observed: tuple[str, ...]
    drift: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DriftEvent:
    at: datetime
    result_id: int
    env_id: str
    old: str | None  # the accepted fingerprint
    new: tuple[str, ...]  # what was observed instead
    changes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SourceSummary:
    source_id: str
    users: int
    latest: SourcePoint | None
    accepted: str | None
    shapes: int


@dataclass(frozen=True, slots=True)
class SourceHistory:
    source_id: str
    users: tuple[str, ...]
    points: tuple[SourcePoint, ...]  # oldest first
    failures: dict[str, int]  # by class, summed over the points
    drift: tuple[DriftEvent, ...]  # newest first
    shapes: tuple[DataSourceShape, ...]


def _point(stored: StoredResult, source_id: str) -> SourcePoint | None:
    doc = (stored.result.details.get("sources") or {}).get(source_id)
    if not isinstance(doc, dict):
        return None
    latency = doc.get("latency_ms") or {}
    prints = doc.get("fingerprint") or {}
    availability = doc.get("availability")
    return SourcePoint(
        at=stored.result.started_at, run_id=stored.run_id, result_id=stored.id,
        env_id=stored.result.env_id, status=str(doc.get("status", stored.result.status)),
        reason=str(doc.get("reason", stored.result.reason)), samples=int(doc.get("samples", 0)),
        ok=int(doc.get("ok", 0)),
        availability=float(availability) if availability is not None else None,
        p50_ms=latency.get("p50"), p95_ms=latency.get("p95"), max_ms=latency.get("max"),
        budget_ms=doc.get("latency_budget_ms"), retries=int(doc.get("retries", 0)),
        failures={str(k): int(v) for k, v in (doc.get("failures") or {}).items()},
        accepted=prints.get("accepted"), observed=tuple(prints.get("observed") or ()),
        drift=tuple(doc.get("drift") or ()))


def _uses(url: str, version: DataVersion) -> dict[str, tuple[str, ...]]:
    return {u.source_id: u.env_ids for u in _source_uses(url, version)}


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def _source_uses(url: str, version: DataVersion) -> list[SourceUse]:
    return list(store_for(url).data_source_uses())


def _points(store: Store, source_id: str, users: Sequence[str], limit: int
            ) -> list[SourcePoint]:
    readers = list(users[:_SOURCE_READERS])
    points = (_point(r, source_id) for r in store.source_results(readers, limit))
    return [p for p in points if p is not None]


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def data_sources(url: str, version: DataVersion) -> list[SourceSummary]:
    """Every data source the catalogue's environments list or the store has shapes of."""
    store = store_for(url)
    uses = _uses(url, version)
    out = []
    for source_id in sorted(uses.keys() | set(store.shape_source_ids())):
        users = uses.get(source_id, ())
        latest = _points(store, source_id, users, 1)
        accepted = store.accepted_shape(source_id)
        out.append(SourceSummary(source_id, len(users), latest[0] if latest else None,
                                 accepted.fingerprint if accepted is not None else None,
                                 len(store.shapes(source_id))))
    return out


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def source_history(url: str, version: DataVersion, source_id: str, limit: int = 200
                   ) -> SourceHistory:
    """A data source's newest ``limit`` reports, failures by class, drift events, shapes."""
    store = store_for(url)
    users = _uses(url, version).get(source_id, ())
    points = _points(store, source_id, users, limit)
    failures: Counter[str] = Counter()
    for p in points:
        failures.update(p.failures)
    drift = tuple(DriftEvent(p.at, p.result_id, p.env_id, p.accepted,
                             tuple(f for f in p.observed if f != p.accepted), p.drift)
                  for p in points if p.drift or p.reason == "schema_drift")
    return SourceHistory(source_id, users, tuple(reversed(points)), dict(failures.most_common()),
                         drift, tuple(store.shapes(source_id)))
