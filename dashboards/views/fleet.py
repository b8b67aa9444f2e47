"""Fleet: per suite how much is usable, then environments by time, worst first."""

from __future__ import annotations

import streamlit as st

from envcheck.dashboard import cached as data
from envcheck.dashboard.fleet import Bucketing
from envcheck.dashboards import envcheck_ui as ui
from envcheck.store.views.fleet import EnvFilter

ctx = ui.context()
st.title("Fleet")
st.caption(f"Generation {ctx.version.generation:,} · newest result "
           f"{ui.when(ctx.version.newest_result_at)} · states and quarantine as the feed "
           "serves them to schedulers")

# --- per suite ----------------------------------------------------------------------------------

suites = data.fleet(ctx.url, ctx.version)
total = sum(s.environments for s in suites)
usable = sum(s.allowed for s in suites)
hackable = dict(data.reason_codes(ctx.url, ctx.version)).get("reward_hackable", 0)
columns = st.columns(6)
columns[0].metric("Environments", f"{total:,}")
columns[1].metric("Allowed now", f"{usable:,}", help="what schedulers may use: healthy (or "
                  "degraded where the suite allows it) and not quarantined")
columns[2].metric("Healthy fraction", ui.pct(usable / total if total else None))
columns[3].metric("Quarantined", f"{sum(s.quarantined for s in suites):,}")
columns[4].metric("Broken / flaky", f"{sum(s.by_state.get('broken', 0) for s in suites):,} / "
                  f"{sum(s.by_state.get('flaky', 0) for s in suites):,}")
columns[5].metric("Reward-hackable", f"{hackable:,}", help="environments a known trick "
                  "cheats (reason reward_hackable: see the Reason filter and each "
                  "environment's adversarial controls)")

st.subheader("Suites")
ui.table([{
    "suite": s.suite, "environments": s.environments, "healthy fraction": s.healthy_fraction,
    "allowed": s.allowed, **{state: s.by_state.get(state, 0) for state in ui.STATES},
    "quarantined": s.quarantined, "by hand": s.quarantined_manual,
    "allows degraded": s.allow_degraded, "description": s.description} for s in suites],
    key="suites", empty="No suite yet: run `envcheck check` or the daemon on a catalogue.",
    column_config={"healthy fraction": st.column_config.ProgressColumn(
        "healthy fraction", format="percent", min_value=0.0, max_value=1.0, color="green",
        help="share of the suite its allowlist admits now")})

# --- filters ------------------------------------------------------------------------------------

with st.sidebar:
    st.header("Filters")
    chosen_suites = st.multiselect("Suite", [s.suite for s in suites], key="suite",
                                   bind="query-params")
    chosen_states = st.multiselect("State", ui.STATES, key="state", bind="query-params")
    chosen_kinds = st.multiselect("Probe kind", ui.KINDS, key="kind", bind="query-params",
                                  help="environments probed by these kinds; the heatmap "
                                  "shows only their results")
    reasons = data.reason_codes(ctx.url, ctx.version)
    chosen_reasons = st.multiselect(
        "Reason", [code for code, _ in reasons], key="reason", bind="query-params",
        format_func=lambda code: f"{code} ({dict(reasons).get(code, 0):,})",
        help="the reason code of the environment's state")
    quarantine_choice = st.selectbox("Quarantine", ["any", "quarantined", "not quarantined"],
                                     key="quarantined")
    search = st.text_input("Environment id contains", key="search").strip()

where = EnvFilter(suites=tuple(chosen_suites), states=tuple(chosen_states),
                  kinds=tuple(chosen_kinds), reasons=tuple(chosen_reasons),
                  quarantined={"any": None, "quarantined": True,
                               "not quarantined": False}[quarantine_choice],
                  search=search)

# --- environments by time -----------------------------------------------------------------------

st.subheader("Environments by time")
left, right = st.columns(2)
chosen_bucketing = left.segmented_control("Columns", ["hour", "run"], default="hour",
                                          key="bucketing", format_func=lambda b: f"by {b}")
bucketing: Bucketing = "run" if chosen_bucketing == "run" else "hour"
unit = "hours" if bucketing == "hour" else "runs"
span = right.select_slider("Span", [6, 12, 24, 48, 72, 168] if bucketing == "hour" else
                           [6, 12, 24, 48], value=24 if bucketing == "hour" else 12,
                           key=f"span-{bucketing}", format_func=lambda n: f"{n} {unit}")

count = data.environments(ctx.url, ctx.version, where, 1, 1).total
page, size = ui.pager(count, "fleet", repr(where))
listing = data.environments(ctx.url, ctx.version, where, page, size)
ids = tuple(e.env_id for e in listing.items)
if not ids:
    st.info("No environment matches these filters.")
else:
    cells = data.heatmap(ctx.url, ctx.version, ids, bucketing, span, where.kinds)
    if cells:
        st.altair_chart(ui.heatmap_chart(cells, ids), width="stretch")
        st.caption("Each cell is the worst result of the environment in that "
                   f"{'hour' if bucketing == 'hour' else 'run'} (fail > flaky > error > pass "
                   "> skip); empty: no result. `error` is envcheck's own failure and never "
                   "counts against an environment.")
    else:
        st.caption(f"No result of these environments in the last {span} {bucketing}s.")
    ui.table([{
        "environment": ui.env_url(e.env_id), "suite": e.suite, "state": e.state,
        "reason": e.reason, "quarantined": (e.q_source or "yes") if e.quarantined else "",
        "since": ui.when(e.q_since) if e.quarantined else "", "image": e.image,
        "assessed": ui.when(e.updated_at)} for e in listing.items], key="envs",
        column_config={"environment": ui.ENV_LINK})

# --- incidents ----------------------------------------------------------------------------------

recent = data.incidents(ctx.url, ctx.version, 20)
if recent:
    latest = recent[0]
    failed = ", ".join(f"{f['env_id']} ({f['kind']} {f['status']})"
                       for f in latest.held_back_failures[:5])
    st.warning(f"Latest infrastructure incident, {ui.when(latest.at)}: {latest.detail} "
               f"(cycle `{latest.run_id}`, {latest.kind}). {latest.held_back} result(s) held "
               "back from the health model" + (f"; failing: {failed}" if failed else "") + ".")
with st.expander(f"Infrastructure incidents ({len(recent)} recent)", expanded=False):
    st.caption("Cycles in which so many probes failed at once that the cause was judged to be "
               "shared infrastructure: their results move no environment's state.")
    ui.table([{"at": ui.when(i.at), "kind": i.kind, "failing": f"{i.failing}/{i.total}",
               "held back": i.held_back, "detail": i.detail, "run": i.run_id}
              for i in recent], key="incidents", empty="No incident recorded.")
