"""Data sources: availability and latency over time, failures by class, schema drift."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from envcheck.dashboard import cached as data
from envcheck.dashboards import envcheck_ui as ui

ctx = ui.context()
st.title("Data sources")
st.caption("Each source is sampled once per check cycle, however many environments call it; "
           "these are those reports, as the `datasource` probe stored them.")

sources = data.data_sources(ctx.url, ctx.version)
if not sources:
    st.info("No data source yet: no synced environment lists one and no answer was observed.")
    st.stop()

ui.table([{
    "source": s.source_id, "environments": s.users,
    "status": s.latest.status if s.latest else "—", "reason": s.latest.reason if s.latest else "",
    "availability": s.latest.availability if s.latest else None,
    "p95 ms": s.latest.p95_ms if s.latest else None,
    "last report": ui.when(s.latest.at if s.latest else None),
    "accepted shape": s.accepted or "—", "shapes seen": s.shapes} for s in sources],
    key="sources", column_config={"availability": st.column_config.NumberColumn(
        format="percent")})

names = [s.source_id for s in sources]
source_id = st.selectbox("Source", names, key="source", bind="query-params")
limit = st.select_slider("Reports", [25, 50, 100, 200, 500], value=200, key="reports")
history = data.source_history(ctx.url, ctx.version, source_id, limit)
points = history.points
st.header(source_id, divider="gray")
if not points:
    st.caption("No report of this source stored yet.")
else:
    newest = points[-1]
    columns = st.columns(4)
    columns[0].metric("Availability (last report)", ui.pct(newest.availability))
    columns[1].metric("p95 latency", f"{newest.p95_ms:.0f} ms" if newest.p95_ms is not None
                      else "—", help=f"budget {newest.budget_ms:.0f} ms"
                      if newest.budget_ms else None)
    mean = [p.availability for p in points if p.availability is not None]
    columns[2].metric(f"Availability (last {len(points)})",
                      ui.pct(sum(mean) / len(mean) if mean else None))
    columns[3].metric("Drift events", f"{len(history.drift)}")

    frame = pd.DataFrame([{"at": p.at, "availability": p.availability, "p50": p.p50_ms,
                           "p95": p.p95_ms, "max": p.max_ms, "status": p.status,
                           "reason": p.reason, "result": p.result_id} for p in points])
    st.subheader("Availability")
    availability = alt.Chart(frame).mark_line(
        color="#2e7d32", point=alt.OverlayMarkDef(color="#2e7d32")).encode(
        x=alt.X("at:T", title=None, axis=alt.Axis(format="%m-%d %H:%M")),
        y=alt.Y("availability:Q", title="share of samples answered well",
                scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
        tooltip=[alt.Tooltip("at:T", format="%Y-%m-%d %H:%M"),
                 alt.Tooltip("availability:Q", format=".0%"), "status", "reason", "result"],
    ).properties(height=220)
    st.altair_chart(availability, width="stretch")

    st.subheader("Latency")
    melted = frame.melt(id_vars=["at"], value_vars=["p50", "p95", "max"],
                        var_name="percentile", value_name="ms").dropna()
    latency = alt.Chart(melted).mark_line(point=True).encode(
        x=alt.X("at:T", title=None, axis=alt.Axis(format="%m-%d %H:%M")),
        y=alt.Y("ms:Q", title="latency of good samples (ms)"),
        color=alt.Color("percentile:N", sort=["p50", "p95", "max"],
                        scale=alt.Scale(range=["#1e88e5", "#ef8f00", "#c62828"]),
                        legend=alt.Legend(orient="top")),
        tooltip=[alt.Tooltip("at:T", format="%Y-%m-%d %H:%M"), "percentile",
                 alt.Tooltip("ms:Q", format=".1f")])
    layers: alt.Chart | alt.LayerChart = latency
    if newest.budget_ms:
        rule = alt.Chart(pd.DataFrame({"budget": [newest.budget_ms]})).mark_rule(
            strokeDash=[6, 4], color="#555").encode(y="budget:Q")
        layers = latency + rule
    st.altair_chart(layers.properties(height=240), width="stretch")
    if newest.budget_ms:
        st.caption(f"Dashed: the latency budget ({newest.budget_ms:.0f} ms); a p95 over it is "
                   "`slow_response`.")

    st.subheader("Failures by class")
    if history.failures:
        bars = alt.Chart(pd.DataFrame([{"class": k, "samples": v}
                                       for k, v in history.failures.items()])).mark_bar(
            color="#c62828").encode(
            x=alt.X("samples:Q", title=f"failed samples in the last {len(points)} reports",
                    axis=alt.Axis(tickMinStep=1, format="d")),
            y=alt.Y("class:N", sort="-x", title=None), tooltip=["class", "samples"])
        st.altair_chart(bars.properties(height=alt.Step(26)), width="stretch")
    else:
        st.caption(f"No failed sample in the last {len(points)} reports.")

st.subheader("Schema drift")
ui.table([{
    "at": ui.when(d.at), "old fingerprint (accepted)": d.old or "—",
    "new fingerprint": ", ".join(d.new) or "—", "changes": "; ".join(d.changes),
    "result": ui.env_url(d.env_id, [d.result_id])} for d in history.drift], key="drift",
    empty="No drift in these reports.",
    column_config={"result": st.column_config.LinkColumn("result",
                                                         display_text=r"results=([0-9]+)")})
st.caption("Drift is a change of the answer's structure (keys and types, never values) from "
           "the accepted fingerprint; `envcheck accept-schema` accepts the new one.")
st.markdown("**Shapes seen**")
ui.table([{
    "fingerprint": s.fingerprint, "accepted": ui.when(s.accepted_at) if s.accepted_at else "",
    "accepted by": s.accepted_by or "", "first seen": ui.when(s.first_seen),
    "last seen": ui.when(s.last_seen), "samples": s.seen} for s in history.shapes],
    key="shapes", empty="No shape observed.")
