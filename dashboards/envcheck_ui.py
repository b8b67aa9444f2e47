"""What the dashboard's pages share: the store context, colours, links, tables, paging.

No data access of its own: numbers come from :mod:`envcheck.dashboard.cached`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import altair as alt
import pandas as pd
import streamlit as st

from envcheck.core.errors import StoreError
from envcheck.dashboard import cached as data
from envcheck.dashboard.environment import RolloutHour, TaintSpan, taint_layer
from envcheck.dashboard.fleet import HeatCell
from envcheck.store.database import redact
from envcheck.store.views.common import DataVersion

STATUS_COLOURS = {"fail": "#c62828", "flaky": "#ef8f00", "error": "#7b52ab", "pass": "#2e7d32",
                  "skip": "#b0b0b0"}
STATE_COLOURS = {"broken": "#c62828", "flaky": "#ef8f00", "degraded": "#e6c000",
                 "unknown": "#9e9e9e", "healthy": "#2e7d32"}
STATE_BADGE = {"broken": "red", "flaky": "orange", "degraded": "yellow", "unknown": "gray",
               "healthy": "green"}
STATUS_BADGE = {"fail": "red", "flaky": "orange", "error": "violet", "pass": "green",
                "skip": "gray"}
STATES = tuple(STATE_COLOURS)
WHOSE_COLOURS = {"environment's failure": "#c62828", "ok": "#2e7d32", "trainer's": "#9e9e9e"}
KINDS = ("terminal", "dependencies", "tests", "datasource")
PAGE_SIZES = (10, 25, 50, 100, 200)
ENV_PAGE = "environment"  # url paths of the pages (app.py registers them)
TIME = "%Y-%m-%d %H:%M UTC"


@dataclass(frozen=True, slots=True)
class Context:
    url: str
    version: DataVersion


def context() -> Context:
    """The store URL and the data version this run reads; stops the page with a message if
    the store cannot be opened."""
    url = data.database_url()
    try:
        return Context(url, data.data_version(url))
    except StoreError as exc:
        st.error(f"The result store at `{redact(url)}` cannot be read: {exc}")
        st.caption("Set ENVCHECK_DATABASE_URL (or `envcheck dashboard --database URL`) to the "
                   "store the daemon writes.")
        st.stop()
        raise  # unreachable: st.stop() raises


def when(at: datetime | None) -> str:
    return at.strftime(TIME) if at is not None else "—"


def short(digest: str | None, n: int = 19) -> str:
    if not digest:
        return "—"
    return digest if len(digest) <= n else digest[:n] + "…"


def pct(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{100 * value:.{digits}f}%"


def env_url(env_id: str, results: Iterable[int] = ()) -> str:
    """A link to the Environment page (relative: it works under any base URL path)."""
    url = f"{ENV_PAGE}?env={quote(env_id, safe='')}"
    ids = ",".join(str(i) for i in results)
    return url + (f"&results={ids}" if ids else "")


ENV_LINK = st.column_config.LinkColumn("environment", display_text=r"environment\?env=([^&]+)",
                                       help="open the Environment page")


def state_badge(state: str) -> str:
    """Markdown for a state, coloured."""
    return f":{STATE_BADGE.get(state, 'gray')}-badge[{state}]"


def status_badge(status: str) -> str:
    return f":{STATUS_BADGE.get(status, 'gray')}-badge[{status}]"


def pager(total: int, key: str, scope: str = "", default_size: int = 25,
          label: str = "environments") -> tuple[int, int]:
    """A page-size choice and a pager for ``total`` rows; returns (page, size). The pager
    starts again at page 1 when ``scope`` (the filters) or the size changes."""
    left, right = st.columns([3, 1], vertical_alignment="bottom")
    size = right.selectbox("Rows per page", PAGE_SIZES, index=PAGE_SIZES.index(default_size),
                           key=f"{key}-size")
    pages = max(1, math.ceil(total / size))
    digest = hashlib.blake2b(f"{scope}|{size}".encode(), digest_size=6).hexdigest()
    with left:
        page = st.pagination(pages, key=f"{key}-page-{digest}") if pages > 1 else 1
    first = (page - 1) * size + 1 if total else 0
    st.caption(f"{label.capitalize()} {first:,}-{min(page * size, total):,} of {total:,}")
    return page, size


def table(rows: Sequence[Mapping[str, Any]], *, key: str | None = None,
          column_config: Mapping[str, Any] | None = None, height: int | None = None,
          empty: str = "Nothing to show.") -> None:
    if not rows:
        st.caption(empty)
        return
    if height is None:  # every row up to 25, then a scrollbar (35 px a row, and the header)
        height = 35 * (min(len(rows), 25) + 1) + 3
    st.dataframe(pd.DataFrame(list(rows)), hide_index=True, key=key,
                 column_config=dict(column_config or {}), height=height)


def status_scale(domain: Sequence[str] = tuple(STATUS_COLOURS)) -> alt.Scale:
    return alt.Scale(domain=list(domain), range=[STATUS_COLOURS[s] for s in domain])


def heatmap_chart(cells: Sequence[HeatCell], order: Sequence[str]) -> alt.Chart:
    """Environments (rows, in ``order``) by bucket (columns), coloured by worst status."""
    frame = pd.DataFrame([{
        "environment": c.env_id, "bucket": c.label, "start": c.start, "status": c.status,
        "results": c.results,
        "counts": ", ".join(f"{s} {n}" for s, n in sorted(c.counts.items()))} for c in cells])
    columns = list(dict.fromkeys(frame.sort_values("start")["bucket"]))
    chart: alt.Chart = alt.Chart(frame).mark_rect(stroke="white", strokeWidth=1).encode(
        x=alt.X("bucket:O", sort=columns, title=None,
                axis=alt.Axis(labelAngle=-60, labelOverlap="greedy", labelLimit=200)),
        y=alt.Y("environment:N", sort=list(order), title=None,
                axis=alt.Axis(labelLimit=260, labelOverlap=False, labelFontSize=12)),
        color=alt.Color("status:N", scale=status_scale(), title="worst result",
                        legend=alt.Legend(orient="top")),
        tooltip=["environment", "bucket", "status", "results", "counts"],
    ).properties(height=alt.Step(22))
    return chart


def _shaded(chart: alt.Chart, taint: Sequence[TaintSpan], times: Sequence[datetime]
            ) -> alt.Chart | alt.LayerChart:
    """``chart`` over the tainted intervals within ``times``, shaded beneath it."""
    shade = taint_layer(taint, min(times), max(times)) if taint and times else None
    return chart if shade is None else alt.layer(shade, chart)


def timeline_chart(lines: Sequence[Any], taint: Sequence[TaintSpan] = ()
                   ) -> alt.Chart | alt.LayerChart:
    """One tick per result, a row per kind; the tainted intervals shaded beneath."""
    frame = pd.DataFrame([{
        "kind": line.kind, "at": line.started_at, "status": line.status, "reason": line.reason,
        "result": line.id, "summary": line.summary[:160],
        "digest": short(line.image_digest)} for line in lines])
    chart: alt.Chart = alt.Chart(frame).mark_tick(thickness=3, size=26).encode(
        x=alt.X("at:T", title=None, axis=alt.Axis(format="%m-%d %H:%M")),
        y=alt.Y("kind:N", title=None, sort=list(KINDS)),
        color=alt.Color("status:N", scale=status_scale(), legend=alt.Legend(orient="top")),
        tooltip=["result", alt.Tooltip("at:T", format="%Y-%m-%d %H:%M:%S"), "kind", "status",
                 "reason", "digest", "summary"],
    )
    return _shaded(chart, taint, [line.started_at for line in lines]).properties(
        height=alt.Step(34))


def rollout_chart(hours: Sequence[RolloutHour], taint: Sequence[TaintSpan] = ()
                  ) -> alt.Chart | alt.LayerChart:
    """Rollouts per hour, stacked by whose outcome: the environment's failures, ok, the
    trainer's; the tainted intervals shaded beneath."""
    frame = pd.DataFrame([{
        "at": h.hour, "whose": whose, "rollouts": n,
        "outcomes": ", ".join(f"{o} {k}" for o, k in h.by_outcome.items())}
        for h in hours for whose, n in (("environment's failure", h.environment), ("ok", h.ok),
                                        ("trainer's", h.trainer))])
    chart: alt.Chart = alt.Chart(frame).mark_bar().encode(
        x=alt.X("yearmonthdatehours(at):T", title=None, axis=alt.Axis(format="%m-%d %H:%M")),
        y=alt.Y("sum(rollouts):Q", title="rollouts per hour", stack="zero"),
        color=alt.Color("whose:N", scale=alt.Scale(domain=list(WHOSE_COLOURS),
                                                   range=list(WHOSE_COLOURS.values())),
                        legend=alt.Legend(orient="top", title=None)),
        order=alt.Order("whose:N", sort="ascending"),
        tooltip=[alt.Tooltip("yearmonthdatehours(at):T", title="hour"), "whose",
                 alt.Tooltip("sum(rollouts):Q", title="rollouts"), "outcomes"])
    return _shaded(chart, taint, [h.hour for h in hours]).properties(height=220)


def rollout_rates_chart(hours: Sequence[RolloutHour]) -> alt.Chart:
    """Per hour: the environment's failure rate, the reward's mean and its shares of 0 and 1."""
    frame = pd.DataFrame([{"at": h.hour, "series": name, "value": value}
                          for h in hours for name, value in (
                              ("failure rate", h.failure_rate), ("reward mean", h.reward_mean),
                              ("share of reward 0", h.zero_share),
                              ("share of reward 1", h.one_share)) if value is not None])
    chart: alt.Chart = alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("yearmonthdatehours(at):T", title=None, axis=alt.Axis(format="%m-%d %H:%M")),
        y=alt.Y("value:Q", title=None, scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("series:N", legend=alt.Legend(orient="top", title=None), scale=alt.Scale(
            domain=["failure rate", "reward mean", "share of reward 0", "share of reward 1"],
            range=["#c62828", "#1565c0", "#ef8f00", "#2e7d32"])),
        tooltip=[alt.Tooltip("yearmonthdatehours(at):T", title="hour"), "series",
                 alt.Tooltip("value:Q", format=".3f")]).properties(height=200)
    return chart


def rate_chart(rows: Sequence[Mapping[str, Any]]) -> alt.LayerChart:
    """Failure rate per kind, a point with its Wilson 95% interval as a bar."""
    frame = pd.DataFrame(list(rows))
    base = alt.Chart(frame).encode(y=alt.Y("kind:N", title=None))
    bars = base.mark_rule(strokeWidth=3, color="#555").encode(
        x=alt.X("low:Q", title="failure rate (95% Wilson interval)",
                scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
        x2="high:Q")
    points = base.mark_point(filled=True, size=90).encode(
        x="rate:Q", color=alt.Color("state:N", scale=alt.Scale(
            domain=list(STATE_COLOURS), range=list(STATE_COLOURS.values())), legend=None),
        tooltip=["kind", "state", "failures", "runs",
                 alt.Tooltip("rate:Q", format=".1%"), alt.Tooltip("low:Q", format=".1%"),
                 alt.Tooltip("high:Q", format=".1%")])
    layered: alt.LayerChart = (bars + points).properties(height=alt.Step(32))
    return layered


def flash(key: str) -> None:
    """Show (once) a message a previous run left under ``key``."""
    message = st.session_state.pop(key, None)
    if message is not None:
        ok, text = message
        (st.success if ok else st.error)(text)
