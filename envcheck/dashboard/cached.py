"""The Streamlit pages' reads: thin ``st.cache_data`` wrappers over the store's views and the
plain analytics of :mod:`~envcheck.dashboard.fleet`, :mod:`~envcheck.dashboard.environment`
and :mod:`~envcheck.dashboard.data_sources`.

The pages in ``dashboards/`` get every number from here and run no SQL of their own; the
heavy lifting (grouping, paging, time buckets) happens in the store
(:mod:`envcheck.store.views`), so a page costs the same with 100 environments or 10,000.

**Caching.** Each read's first two arguments are the store URL and the
:class:`~envcheck.store.views.common.DataVersion` read at the top of the page run (the feed
generation and the newest result id: two primary-key lookups). A new transition or a new
result is a new key, so a page never mixes data older than what it announced; the TTL bounds
memory and what changes without either (a catalogue sync, an accepted shape). One
:class:`~envcheck.store.Store` per URL is shared by all sessions (``st.cache_resource``).

Only the dashboard imports this module: it imports streamlit, which the daemon must not.
"""

from __future__ import annotations

import streamlit as st

from envcheck.dashboard.data_sources import SourceHistory, SourceSummary, source_summaries
from envcheck.dashboard.data_sources import source_history as read_source_history
from envcheck.dashboard.environment import (
    EnvironmentView,
    FlakyReport,
    RolloutHour,
    environment_view,
    flaky_report,
)
from envcheck.dashboard.environment import rollout_hours as fold_rollout_hours
from envcheck.dashboard.fleet import (
    Bucketing,
    HeatCell,
    Incident,
    SuiteStats,
    heat_cells,
    incident_list,
    suite_stats,
)
from envcheck.store import Store, default_database_url, open_store
from envcheck.store.tables.results import ResultLine
from envcheck.store.tables.states import QuarantineListing, Transition
from envcheck.store.views.common import DataVersion, Page, StoredResult
from envcheck.store.views.data_sources import SourceUse
from envcheck.store.views.environment import DigestKind, DigestSpan
from envcheck.store.views.fleet import EnvFilter, EnvListing

__all__ = [
    "TTL_S",
    "data_sources",
    "data_version",
    "database_url",
    "digest_kinds",
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
    "rollout_hours",
    "source_history",
    "store_for",
    "timeline",
    "transitions",
]

TTL_S = 60
_MAX_ENTRIES = 256


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


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def heatmap(url: str, version: DataVersion, env_ids: tuple[str, ...], bucketing: Bucketing,
            span: int, kinds: tuple[str, ...] = ()) -> list[HeatCell]:
    """The heatmap's cells up to the newest result the page announced (see :func:`heat_cells`)."""
    return heat_cells(store_for(url), version.newest_result_at, env_ids, bucketing, span, kinds)


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def incidents(url: str, version: DataVersion, limit: int = 20) -> list[Incident]:
    return incident_list(store_for(url), limit)


# --- one environment ----------------------------------------------------------------------------


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def environment(url: str, version: DataVersion, env_id: str) -> EnvironmentView | None:
    """An environment's state, why, quarantine and per-kind evidence; None if unknown."""
    return environment_view(store_for(url), env_id)


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
def digest_kinds(url: str, version: DataVersion, env_id: str) -> list[DigestKind]:
    """Per image digest and probe kind, the stored results' count and newest."""
    return store_for(url).digest_kinds(env_id)


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def transitions(url: str, version: DataVersion, env_id: str | None = None,
                quarantine_only: bool = False, search: str = "", page: int = 1,
                page_size: int = 50) -> Page[Transition]:
    """The audit history, newest first (of ``env_id``, if given)."""
    return store_for(url).transition_page(env_id, quarantine_only, search,
                                          (max(1, page) - 1) * page_size, page_size)


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def rollout_hours(url: str, version: DataVersion, env_id: str, hours: int = 168
                  ) -> list[RolloutHour]:
    """The training run's rollouts of the environment per hour, oldest first: the ``hours``
    hours up to its newest. A new batch moves no data version: it shows within the TTL."""
    return fold_rollout_hours(store_for(url).rollout_counts(env_id, hours))


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def flaky_tests(url: str, version: DataVersion, env_id: str, limit: int = 50) -> FlakyReport:
    return flaky_report(store_for(url), env_id, limit)


# --- quarantine ---------------------------------------------------------------------------------


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def quarantine(url: str, version: DataVersion, suites: tuple[str, ...] = (),
               source: str | None = None, search: str = "", page: int = 1,
               page_size: int = 50) -> Page[QuarantineListing]:
    return store_for(url).quarantine_page(suites, source, search,
                                          (max(1, page) - 1) * page_size, page_size)


# --- data sources -------------------------------------------------------------------------------


def _uses(url: str, version: DataVersion) -> dict[str, tuple[str, ...]]:
    return {u.source_id: u.env_ids for u in _source_uses(url, version)}


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def _source_uses(url: str, version: DataVersion) -> list[SourceUse]:
    return list(store_for(url).data_source_uses())


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def data_sources(url: str, version: DataVersion) -> list[SourceSummary]:
    """Every data source the catalogue's environments list or the store has shapes of."""
    return source_summaries(store_for(url), _uses(url, version))


@st.cache_data(ttl=TTL_S, max_entries=_MAX_ENTRIES, show_spinner=False)
def source_history(url: str, version: DataVersion, source_id: str, limit: int = 200
                   ) -> SourceHistory:
    """A data source's newest ``limit`` reports, failures by class, drift events, shapes."""
    return read_source_history(store_for(url), source_id,
                               _uses(url, version).get(source_id, ()), limit)
