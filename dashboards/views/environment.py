"""Environment: its state and why, per-kind evidence with Wilson intervals, the training run's
rollouts per hour, the timeline (tainted intervals shaded on both), flaky tests, evidence of
results, image digests and transitions."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from envcheck.core.results import REASON_DOCS, Reason
from envcheck.dashboard import cached as data
from envcheck.dashboard.environment import adversarial_rows, digest_rows, window_rates
from envcheck.dashboard.strength import strength_view
from envcheck.dashboards import envcheck_ui as ui
from envcheck.store.views.common import StoredResult
from envcheck.store.views.fleet import EnvFilter

ctx = ui.context()
st.title("Environment")

env_id = st.text_input("Environment id", key="env", bind="query-params",
                       placeholder="e.g. swe-django-1234").strip()
if not env_id:
    st.info("Type an environment id, or open one from the Fleet or Quarantine page. The worst "
            "environments now:")
    worst = data.environments(ctx.url, ctx.version, EnvFilter(), 1, 10).items
    ui.table([{"environment": ui.env_url(e.env_id), "state": e.state, "reason": e.reason}
              for e in worst], key="worst", column_config={"environment": ui.ENV_LINK})
    st.stop()

view = data.environment(ctx.url, ctx.version, env_id)
if view is None:
    st.warning(f"Unknown environment `{env_id}`: never synced from a catalogue.")
    close = data.environments(ctx.url, ctx.version, EnvFilter(search=env_id), 1, 10)
    if close.items:
        st.write("Environments whose id contains it:")
        ui.table([{"environment": ui.env_url(e.env_id), "state": e.state}
                  for e in close.items], key="close", column_config={"environment": ui.ENV_LINK})
    st.stop()


def short_run(label: str) -> str:
    """Axis labels that fit: ``positive run 3/8 (shuffled)`` -> ``positive 3/8 shuffled``,
    ``confirm failing positive run 2/8 (shuffled) (1/4)`` -> ``confirm fail 1/4``."""
    confirm = re.match(r"confirm (fail|pass)ing .*\((\d+/\d+)\)$", label)
    if confirm:
        return f"confirm {confirm[1]} {confirm[2]}"
    return label.replace("negative control", "negative").replace(" run ", " ").replace(
        " (shuffled)", " shuffled")


def seconds(value: float | None) -> str:
    """A duration: three significant digits (0.0123, 1.23), whole seconds from 100 on."""
    if value is None:
        return "—"
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _at(value: Any) -> datetime | None:
    """A time as ``env_state.rollouts`` holds it (ISO 8601, or None)."""
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _mean(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def explain(reason: str) -> str:
    """``terminal: tool_missing`` with what the code means."""
    code = reason.rpartition(": ")[2]
    try:
        return f"{reason} — {REASON_DOCS[Reason(code)]}"
    except ValueError:
        return reason


# --- state and why ------------------------------------------------------------------------------

st.header(view.env_id, divider="gray")
st.markdown(f"{ui.state_badge(view.state)} &nbsp; suite **{view.suite}** · image "
            f"`{view.image}` · digest `{ui.short(view.image_digest, 30)}`")
columns = st.columns(4)
columns[0].metric("State", view.state)
columns[1].metric("Allowed now", "yes" if view.allowed else "no",
                  help="may a scheduler use it (the suite's allowlist)")
columns[2].metric("Quarantined", view.quarantine.source if view.quarantine else "no")
columns[3].metric("Probe kinds", len(view.kinds))
st.markdown(f"**Why:** {explain(view.reason)}")
st.caption(f"Assessed {ui.when(view.updated_at)}")
if view.retired_at is not None:
    st.info(f"**Retired** {ui.when(view.retired_at)}: it left the daemon's catalogue, so it is "
            "in no allowlist, count or metric. Its history below stays; it comes back with it "
            "if the catalogue names it again.", icon=":material/archive:")
if (q := view.quarantine) is not None:
    links = ", ".join(f"[#{i}]({ui.env_url(view.env_id, [i])})" for i in q.evidence)
    st.error(f"**Quarantined** ({q.source}) by {q.actor} since "
             f"{ui.when(q.since)}: {q.reason}"
             + (f"  \nEvidence: {links}" if links else ""), icon=":material/block:")

# --- per probe kind: the health model's evidence ------------------------------------------------

st.subheader("Failure rate per probe kind")
lines = data.timeline(ctx.url, ctx.version, env_id, 500)
window = window_rates(lines)
rows: list[dict[str, Any]] = []
for k in view.kinds:
    failures, runs, low, high = window.get(k.kind, (0, 0, 0.0, 1.0))
    rows.append({
        "kind": str(k.kind), "state": str(k.state), "reason": k.reason, "failures": k.failures,
        "runs": k.runs, "rate": k.failure_rate if k.failure_rate is not None else 0.0,
        "low": k.wilson[0], "high": k.wilson[1], "window (failed/runs)": f"{failures}/{runs}",
        "window interval": f"[{ui.pct(low)}, {ui.pct(high)}]", "SPRT LLR": round(k.llr, 3),
        "digest": ui.short(k.image_digest)})
if rows:
    ui.table([{**r, "rate": ui.pct(r["rate"] if r["runs"] else None),
               "95% Wilson": f"[{ui.pct(r['low'])}, {ui.pct(r['high'])}]"}
              for r in rows], key="kinds",
             column_config={"low": None, "high": None})
    st.caption("Counts are runs, not probes (a tests probe holds its negative control and "
               "reruns; a light check 2), of the current image digest and spec only (what the "
               "health model decides on); `window` counts the runs of the last 500 results of "
               "any identity. The interval is honest with few runs: 5 clean runs only prove a "
               "failure rate under ~45%.")
    charted = [r for r in rows if r["runs"]]
    if charted:  # every kind may have errors only (a registry's): no rate to draw
        st.altair_chart(ui.rate_chart(charted), width="stretch")
else:
    st.caption("Not assessed yet.")

# --- the training run's rollouts ----------------------------------------------------------------

NOTES = {
    "never_solved": "every one of many rollouts scored 0 while its oracle passes: the task may "
                    "be unsolvable as posed, or its verifier rejects right answers",
    "always_solved": "every one of many rollouts scored 1: a verifier that accepts anything? "
                     "Run the adversarial and verifier-strength controls now",
}
CONFIRMED = {
    "cluster_only": "**Fails on the cluster, passes here**: the full active probe passed after "
                    "the flag, so the failures come from the cluster (its nodes or container "
                    "runtime), not from the environment.",
    "here_too": "**Broken here too**: the full active probe failed as well.",
}

st.subheader("Rollouts")
hours = data.rollout_hours(ctx.url, ctx.version, env_id, 168)
evidence = view.rollouts or {}
if not evidence and not hours:
    st.caption("No rollout of it reported by a training run (`POST /v1/rollouts`, or the "
               "client's rollout reporter).")
if evidence:
    columns = st.columns(4)
    columns[0].metric("Rollout state", str(evidence.get("state", "unknown")))
    columns[1].metric("Flagged by rollouts", "yes" if evidence.get("flagged") else "no",
                      help="failing well above the fleet: degraded at once, and probed in "
                           "full ahead of the queue")
    columns[2].metric("Rollout failure rate", ui.pct(evidence.get("failure_rate")),
                      help=f"the environment's failures over the rollouts that judge it; the "
                           f"fleet's: {ui.pct(evidence.get('fleet_rate'))}")
    columns[3].metric("Environment's failures",
                      f"{evidence.get('env_failures', 0):,} of {evidence.get('rollouts', 0):,}")
    detail = evidence.get("detail")
    st.markdown(f"**Rollouts say:** {evidence.get('reason', 'ok')}"
                + (f" — {detail}" if detail else ""))
    if (confirmed := CONFIRMED.get(str(evidence.get("confirmed")))) is not None:
        (st.info if evidence.get("confirmed") == "cluster_only" else st.error)(confirmed)
    for note in evidence.get("notes") or ():
        st.warning(f"**{note}**: {NOTES.get(note, note)}", icon=":material/flag:")
    reward = evidence.get("reward") or {}
    facts = [f"digest `{ui.short(evidence.get('image_digest'), 30)}`",
             f"since {ui.when(_at(evidence.get('window_start')))}",
             f"first failure {ui.when(_at(evidence.get('first_failure_at')))}",
             f"flagged {ui.when(_at(evidence.get('flagged_at')))}",
             f"SPRT LLR {float(evidence.get('llr') or 0):.2f}"]
    if reward:
        facts.append(f"reward mean {float(reward.get('mean') or 0):.3f} over {reward.get('n')}"
                     f", 0 in {ui.pct(reward.get('zero_share'))}, 1 in "
                     f"{ui.pct(reward.get('one_share'))}")
    st.caption(" · ".join(facts))
if hours:
    st.altair_chart(ui.rollout_chart(hours, view.taint), width="stretch")
    st.altair_chart(ui.rollout_rates_chart(hours), width="stretch")
    ui.table([{"hour": ui.when(h.hour), "rollouts": h.rollouts, "ok": h.ok,
               "environment's": h.environment, "trainer's": h.trainer,
               "failure rate": ui.pct(h.failure_rate), "reward mean": _mean(h.reward_mean),
               "reward 0": ui.pct(h.zero_share), "reward 1": ui.pct(h.one_share),
               "outcomes": ", ".join(f"{o} {n}" for o, n in h.by_outcome.items()),
               "digest": ", ".join(ui.short(d) for d in h.digests)} for h in reversed(hours)],
             key="rollout-hours")
    st.caption("Per hour, the rollouts a training run reported: the environment's failures "
               "(its sandbox did not start or died, its verifier crashed, hung or wrote no "
               "readable reward), ok, and the trainer's (the policy's own time budget, left out "
               "of the failure rate). The reward's mean and shares are over the rollouts that "
               "carried one.")

# --- timeline -----------------------------------------------------------------------------------

st.subheader("Timeline")
limit = st.select_slider("Results", [50, 100, 200, 500], value=200, key="timeline-limit")
shown = lines[:limit]
if shown:
    st.altair_chart(ui.timeline_chart(shown, view.taint), width="stretch")
else:
    st.caption("No result stored yet.")
if view.taint:
    st.caption("Shaded red on the timelines: the intervals in which its rewards cannot be "
               f"trusted ({len(view.taint)}; hover for why), the samples a trainer should drop, "
               "relabel or replay.")

# --- evidence -----------------------------------------------------------------------------------


def show_result(stored: StoredResult) -> None:
    r = stored.result
    st.markdown(f"**#{stored.id}** · {r.kind} · {ui.status_badge(str(r.status))} "
                f"`{r.reason}` · {ui.when(r.started_at)} · {r.duration_s:.2f} s"
                f" · digest `{ui.short(r.image_digest, 30)}`")
    st.write(r.summary)
    for n, e in enumerate(r.evidence, 1):
        flags = ", ".join(f for f, on in (("timed out", e.timed_out),
                                           ("truncated", e.truncated)) if on)
        title = (f"{n}. `{e.command[:90]}` → exit {e.exit_code if e.exit_code is not None else '—'}"
                 f" · {e.duration_s:.2f} s" + (f" · {flags}" if flags else ""))
        with st.expander(title, expanded=n == 1 and r.status != "pass"):
            st.code(e.command, language="bash")
            st.caption(f"exit code {e.exit_code} · {e.output_bytes:,} bytes of output"
                       + (" (head and tail kept)" if e.truncated else ""))
            if e.output_head:
                st.text("output (head)")
                st.code(e.output_head, language=None)
            if e.output_tail:
                st.text("output (tail)")
                st.code(e.output_tail, language=None)
    if r.details:
        with st.expander("details"):
            st.json(r.details, expanded=1)


st.subheader("Evidence")
raw_ids = st.query_params.get("results", "")
wanted = tuple(int(x) for x in raw_ids.split(",") if x.strip().isdigit())
if wanted:
    chosen = data.results(ctx.url, ctx.version, env_id, wanted)
    st.caption(f"Results {', '.join(f'#{i}' for i in wanted)} (from the link you followed)")
    for stored in chosen:
        with st.container(border=True):
            show_result(stored)
    missing = set(wanted) - {s.id for s in chosen}
    if missing:
        st.warning(f"No result {', '.join(f'#{i}' for i in sorted(missing))} of {env_id}.")
else:
    # what went wrong first: the tab a person opens the page for
    latest = sorted(data.latest_results(ctx.url, ctx.version, env_id),
                    key=lambda s: (s.result.status == "pass", s.result.kind))
    if latest:
        tabs = st.tabs([f"{s.result.kind} · {s.result.status}" for s in latest])
        for tab, stored in zip(tabs, latest, strict=True):
            with tab:
                show_result(stored)
    else:
        st.caption("No result stored yet.")
if lines:
    options = {f"#{x.id} · {ui.when(x.started_at)} · {x.kind} · {x.status} ({x.reason})": x.id
               for x in shown}
    pick = st.selectbox("Inspect another result", list(options), index=None,
                        placeholder="choose a result of the timeline")
    if pick is not None:
        for stored in data.results(ctx.url, ctx.version, env_id, (options[pick],)):
            with st.container(border=True):
                show_result(stored)

# --- flaky tests --------------------------------------------------------------------------------

if view.fail_to_pass or view.pass_to_pass or any(x.kind == "tests" for x in lines):
    st.subheader("Flaky tests")
    report = data.flaky_tests(ctx.url, ctx.version, env_id, 50)
    if not report.tests:
        st.caption(f"No test named flaky in the last {report.probes} tests probes.")
    else:
        ui.table([{"test": t, "named flaky": f"{n} of {report.probes} probes", "kind": kind,
                   "passed (newest)": passed} for t, (n, kind, passed) in report.tests.items()],
                 key="flaky")
        st.caption("kind `random`: reruns in the same order disagree; `order`: the outcome "
                   "follows the test order. `passed` counts the runs in which the test had "
                   "to pass.")
        if report.pattern:
            frame = pd.DataFrame([{"test": t, "run": short_run(label), "label": label,
                                   "phase": phase, "outcome": o}
                                  for t, label, phase, o in report.pattern])
            outcomes = ["pass", "fail", "fail (expected)", "invalid run"]
            chart = alt.Chart(frame).mark_rect(stroke="white").encode(
                x=alt.X("run:N", sort=list(dict.fromkeys(frame["run"])), title=None,
                        axis=alt.Axis(labelAngle=-45, labelLimit=200, labelOverlap=False)),
                y=alt.Y("test:N", title=None, axis=alt.Axis(labelLimit=360)),
                color=alt.Color("outcome:N", scale=alt.Scale(
                    domain=outcomes, range=["#2e7d32", "#c62828", "#90a4ae", "#7b52ab"]),
                    legend=alt.Legend(orient="top")),
                tooltip=["test", "label", "phase", "outcome"],
            ).properties(height=alt.Step(28))
            st.markdown(f"Pass/fail pattern of result [#{report.pattern_result_id}]"
                        f"({ui.env_url(env_id, [report.pattern_result_id or 0])}) "
                        f"({ui.when(report.pattern_at)}), run by run:")
            st.altair_chart(chart, width="stretch")

# --- adversarial controls -----------------------------------------------------------------------

tricks = adversarial_rows(data.latest_results(ctx.url, ctx.version, env_id))
if tricks:
    st.subheader("Adversarial controls")
    ui.table(tricks, key="adversarial")
    st.caption("Each trick played by a do-nothing agent in a fresh container, then the "
               "environment's own verification: `rewarded` is a hole (reason "
               "`reward_hackable`); `could not act` proves nothing either way; see the "
               "documentation's \"Is my verifier hack-resistant?\".")

# --- verifier strength ----------------------------------------------------------------------------

strength = strength_view(data.latest_results(ctx.url, ctx.version, env_id))
if strength is not None:
    st.subheader("Verifier strength")
    if strength.score is not None:
        st.markdown(f"Score **{strength.score:.2f}** (`{strength.reason}`): the share of the "
                    "mutants told apart from the fix that the tests refuse.")
        if strength.new_case_score is not None:
            st.markdown(f"New case **{strength.new_case_score:.2f}**: the same share over the "
                        "`new_case_value` mutants alone (the value the fix newly returns, made "
                        "wrong); either score below `min_score` is a weak verifier.")
    else:
        st.markdown(f"**Not measurable** (`{strength.reason}`): {strength.not_measurable}")
    ui.table(strength.operators, key="strength-operators", empty="No mutant was generated.")
    if strength.survivors:
        ui.table(strength.survivors, key="strength-survivors")
    st.caption("Per operator: candidates generated, dropped as the same program or for not "
               "compiling, then incompetent, killed, and survivors by class: `confirmed` "
               "(its recorded behaviour differs from the fix's while every test passes: lowers "
               "the score) or `not_distinguished` (the same behaviour on the tests' inputs: "
               "listed apart); see the README's \"Do the tests refuse a wrong fix?\".")

# --- image digests and transitions ---------------------------------------------------------------

st.subheader("Image digest history")
if view.watched:
    st.markdown(f"`{view.image}` is followed in its registry (`pull: watch`): each row is a "
                "digest its tag pointed at, newest first. A new row is a move of the tag, "
                "validated in full from there: every kind the environment declares on the new "
                "digest.")
ui.table([{"now": row["now"], "first seen": ui.when(row["first seen"]),
           "last seen": ui.when(row["last seen"]), "results": row["results"],
           "failures": row["failures"], "newest by kind": row["newest by kind"],
           "p50 s": seconds(row["p50"]), "p95 s": seconds(row["p95"]),
           "max s": seconds(row["max"]), "digest": row["digest"]}
          for row in digest_rows(data.digests(ctx.url, ctx.version, env_id),
                                 data.digest_kinds(ctx.url, ctx.version, env_id))],
         key="digests", empty="No result stored yet.")
st.caption("◀ the digest of the newest result. A new digest starts the evidence afresh: the "
           "health model counts only results of the current digest and spec. The same list "
           f"as JSON: `GET /v1/environments/{env_id}/digests`.")

st.subheader("Transitions")
history = data.transitions(ctx.url, ctx.version, env_id, page_size=50)
ui.table([{"at": ui.when(t.at), "state": f"{t.old_state} → {t.new_state}",
           "quarantine": ("added" if t.quarantined and not t.was_quarantined else
                          "released" if t.was_quarantined and not t.quarantined else ""),
           "actor": t.actor, "reason": t.reason,
           "evidence": ui.env_url(env_id, t.evidence) if t.evidence else None,
           "digest": ui.short(t.image_digest)} for t in history.items], key="transitions",
         empty="No transition yet.",
         column_config={"evidence": st.column_config.LinkColumn(
             "evidence", display_text=r"results=([0-9,]+)")})
if history.total > len(history.items):
    st.caption(f"The newest {len(history.items)} of {history.total} transitions; the "
               "Quarantine page has the full audit history.")
