"""The Environment page's rollout evidence under ``streamlit.testing.v1.AppTest``, over the
seeded store (``tests/dashboard_seed.py``: a training run's last twelve hours of rollouts and
their evidence as the health model writes it): per hour by whose outcome, the failure rate and
the reward, the evidence's state, reason, notes and confirmation; and the tainted intervals
drawn as shaded spans on the page's timelines when the view carries them.

The expectations come from the store's own reads (``rollout_rows``, ``env_state``)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import pytest

from envcheck.core.rollouts import ENVIRONMENT_OUTCOMES
from envcheck.dashboard import cached
from envcheck.dashboard.environment import TaintSpan, environment_view, taint_layer
from envcheck.store import open_store
from tests import dashboard_seed as fleet
from tests.test_dashboard import (  # noqa: F401  (fixtures)
    charts,
    frame,
    mark,
    metrics,
    page,
    store_url,
    template,
    text,
)

FLAGGED, SOLVED = fleet.ROLLOUT_FLAGGED, fleet.ROLLOUT_SOLVED


def stored_hours(url: str, env_id: str) -> dict[datetime, Counter[str]]:
    """hour -> outcome -> rollouts, as the store holds them."""
    with open_store(url) as store:
        rows = store.rollout_rows([env_id])
    out: dict[datetime, Counter[str]] = {}
    for row in rows:
        out.setdefault(row.hour, Counter())[row.outcome] += row.count
    return out


def bars(at: Any) -> pd.DataFrame:
    """The data of the rollouts-per-hour chart (stacked bars, maybe over shaded spans)."""
    for spec, data in charts(at):
        if "rollouts per hour" in str(spec):
            return data[-1] if mark(spec) == "layer" else data[0]
    raise AssertionError("no rollouts-per-hour chart")


def test_environment_shows_rollout_evidence_beside_the_probes(
        store_url: str) -> None:  # noqa: F811
    at = page("environment", env=FLAGGED)
    with open_store(store_url) as store:
        state = store.env_state(FLAGGED)
        assert state is not None and state.rollouts is not None
        evidence = state.rollouts
    got = metrics(at)
    assert (got["Rollout state"], got["Flagged by rollouts"]) == ("degraded", "yes")
    assert got["Rollout failure rate"] == f"{100 * evidence['failure_rate']:.1f}%"
    assert got["Environment's failures"] == \
        f"{evidence['env_failures']} of {evidence['rollouts']}"
    assert got["State"] == "degraded"  # the probes' view stays beside it
    page_text = text(at)
    assert f"**Rollouts say:** rollout_failures — {evidence['detail']}" in page_text
    assert any("Fails on the cluster, passes here" in i.value for i in at.info)
    assert "SPRT LLR 3.40" in page_text

    hours = stored_hours(store_url, FLAGGED)
    assert len(hours) == fleet.ROLLOUT_HOURS
    drawn = bars(at)
    per_hour = drawn.groupby(["whose"])["rollouts"].sum().to_dict()
    assert per_hour == {
        "environment's failure": sum(n for c in hours.values() for o, n in c.items()
                                     if o in ENVIRONMENT_OUTCOMES),
        "ok": sum(c["ok"] for c in hours.values()),
        "trainer's": sum(c["agent_timeout"] for c in hours.values())}
    table = frame(at, "environment's").set_index("hour")
    newest = max(hours)
    row, counts = table.loc[newest.strftime("%Y-%m-%d %H:%M UTC")], hours[newest]
    failed = counts["sandbox_lost"] + counts["verifier_timeout"]
    assert (row["rollouts"], row["ok"], row["environment's"], row["trainer's"]) == (
        sum(counts.values()), counts["ok"], failed, counts["agent_timeout"])
    assert row["failure rate"] == f"{100 * failed / (failed + counts['ok']):.1f}%"
    assert table.index[0] == newest.strftime("%Y-%m-%d %H:%M UTC")  # newest first
    rates = next(data[0] for spec, data in charts(at) if "share of reward 1" in str(spec))
    assert set(rates["series"]) == {"failure rate", "reward mean", "share of reward 0",
                                    "share of reward 1"}


def test_environment_rollout_notes_and_none(store_url: str) -> None:  # noqa: F811
    at = page("environment", env=SOLVED)
    assert metrics(at)["Flagged by rollouts"] == "no"
    assert any("always_solved" in w.value and "verifier-strength controls" in w.value
               for w in at.warning)
    assert set(bars(at)["whose"][bars(at)["rollouts"] > 0]) == {"ok"}
    quiet = page("environment", env="term-ok-1")
    assert "Rollout state" not in metrics(quiet)
    assert "No rollout of it reported by a training run" in text(quiet)


def test_taint_intervals_are_shaded_on_the_timelines(store_url: str,  # noqa: F811
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The view's taint intervals, given as plain values, drawn beneath the probes' timeline
    and the rollouts per hour, clipped to what each chart shows."""
    first = fleet.T0 + timedelta(hours=fleet.CYCLES - fleet.ROLLOUT_HOURS // 2)
    spans = (TaintSpan(first, first + timedelta(hours=2), "rollout_failures", "sha256:x"),
             TaintSpan.of({"start": (first + timedelta(hours=4)).isoformat(), "end": None,
                           "reason": "rollout_failures"}),
             TaintSpan(fleet.T0 - timedelta(days=9), fleet.T0 - timedelta(days=8)))  # before

    def tainted(store: Any, env_id: str) -> Any:
        view = environment_view(store, env_id)
        return dataclasses.replace(view, taint=spans) if view is not None else None

    monkeypatch.setattr(cached, "environment_view", tainted)
    at = page("environment", env=FLAGGED)
    layered = [(spec, data) for spec, data in charts(at) if mark(spec) == "layer"
               and "rewards tainted" in str(spec)]
    assert len(layered) == 2  # the rollouts per hour and the timeline
    for _, data in layered:
        shaded = data[0].sort_values("from")
        assert shaded["taint"].tolist() == ["rollout_failures", "rollout_failures"]
        assert pd.Timestamp(shaded["from"].iloc[0]) == pd.Timestamp(first)
        assert shaded["until"].isna().tolist() == [False, True]  # the second is open
    assert "Shaded red on the timelines" in text(at)


def test_taint_layer_clips_and_leaves_out() -> None:
    lo, hi = fleet.T0, fleet.T0 + timedelta(hours=10)
    assert taint_layer([TaintSpan(lo - timedelta(hours=5), lo - timedelta(hours=1))], lo,
                       hi) is None
    layer = taint_layer([{"since": (lo - timedelta(hours=1)).isoformat(), "until": None}], lo,
                        hi)
    assert layer is not None
    data = layer.to_dict()["datasets"]
    [rows] = data.values()
    assert (pd.Timestamp(rows[0]["from"]), pd.Timestamp(rows[0]["to"])) == (
        pd.Timestamp(lo), pd.Timestamp(hi))
    with pytest.raises(ValueError, match="needs a start"):
        taint_layer([{"end": hi.isoformat()}], lo, hi)


def test_the_page_draws_the_taint_feed(store_url: str) -> None:  # noqa: F811
    """Wired: the view's intervals are the taint feed's (a quarantine by hand taints from the
    moment it was set, still open), not handed in."""
    with open_store(store_url) as store:
        view = environment_view(store, "swe-manual")
    assert view is not None
    [span] = view.taint
    assert span.start == fleet.T0 + timedelta(hours=fleet.CYCLES, minutes=5)
    assert span.end is None and "reward hacking reported in run 4711" in span.reason
