"""The Streamlit dashboard under ``streamlit.testing.v1.AppTest``, every page, over a store seeded
with two days of realistic history (``tests/dashboard_seed.py``): key numbers agree with the
feed, filters and pagination work, links carry result ids, the Quarantine page is read-only
without a token and changes quarantine through a real API server with one. Also the query
layer's store views on SQLite and PostgreSQL, and ``envcheck dashboard``'s guard rails."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from envcheck.api.app import create_app, serve_in_thread
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.dashboard.fleet import suite_stats
from envcheck.dashboard.quarantine import ApiSettings, api_settings
from envcheck.feed.allowlist import allowlist
from envcheck.feed.assess import evaluate
from envcheck.health.sprt import wilson_interval
from envcheck.store import open_store
from envcheck.store.views.fleet import EnvFilter
from tests import dashboard_seed as fleet
from tests.backends import new_pg_database
from tests.conftest import ROOT, envcheck_cmd

APP = ROOT / "dashboards" / "app.py"
TOKEN = "dashboard-test-token-" + "y" * 16


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, fleet.Seeded]:
    path = tmp_path_factory.getbasetemp() / "dashboard-template.db"
    return path, fleet.sqlite_template(path)


@pytest.fixture
def seeded(template: tuple[Path, fleet.Seeded]) -> fleet.Seeded:
    return template[1]


@pytest.fixture
def store_url(template: tuple[Path, fleet.Seeded], tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A private copy of the seeded store, which the dashboard process reads."""
    url = fleet.copy_sqlite(template[0], tmp_path / "envcheck.db")
    monkeypatch.setenv("ENVCHECK_DATABASE_URL", url)
    for name in ("ENVCHECK_API_URL", "ENVCHECK_API_TOKEN", "ENVCHECK_API_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    yield url
    st.cache_data.clear()
    st.cache_resource.clear()  # closes the stores the app opened


def app(**query: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update(query)
    return at


def page(name: str, **query: str) -> AppTest:
    """The app run on one page (its file under dashboards/views/)."""
    at = app(**query).run()
    if name != "fleet":
        at.switch_page(f"views/{name}.py")
        at.query_params.update(query)
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def frame(at: AppTest, column: str, nth: int = 0) -> pd.DataFrame:
    """The ``nth`` table on the page that has ``column``."""
    found = [d.value for d in at.dataframe if column in d.value.columns]
    assert len(found) > nth, f"no table with a {column!r} column: " \
                             f"{[list(d.value.columns) for d in at.dataframe]}"
    return found[nth]


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def charts(at: AppTest) -> list[tuple[dict[str, Any], list[pd.DataFrame]]]:
    """Every Altair chart: its Vega-Lite spec and its data sets."""
    out = []
    for chart in at.get("vega_lite_chart"):
        proto: Any = chart.proto
        data = [pa.ipc.open_stream(io.BytesIO(d.data.data)).read_pandas()
                for d in proto.datasets]
        out.append((json.loads(proto.spec), data))
    return out


def mark(spec: dict[str, Any]) -> str:
    value = spec.get("mark", "layer" if "layer" in spec else "")
    return str(value["type"] if isinstance(value, dict) else value)


def _layers(at: AppTest) -> list[tuple[dict[str, Any], pd.DataFrame]]:
    """Every chart, and every layer of a layered one (a timeline drawn over its taint
    spans), with the data set it draws."""
    out = []
    for element in at.get("vega_lite_chart"):
        proto: Any = element.proto
        named = {d.name: pa.ipc.open_stream(io.BytesIO(d.data.data)).read_pandas()
                 for d in proto.datasets}
        spec = json.loads(proto.spec)
        if named and "layer" in spec:
            out.append((spec, next(iter(named.values()))))
        for part in spec.get("layer", [spec]):
            name = (part.get("data") or spec.get("data") or {}).get("name")
            frame = named.get(name) if name else next(iter(named.values()), None)
            if frame is not None:
                out.append((part, frame))
    return out


def chart(at: AppTest, kind: str, field: str | None = None) -> pd.DataFrame:
    """The data set of the first chart (or layer) whose mark is ``kind`` (and that encodes
    ``field``)."""
    for spec, data in _layers(at):
        if mark(spec) == kind and (field is None or field in json.dumps(spec)):
            return data
    raise AssertionError(f"no {kind} chart with {field}: {[mark(s) for s, _ in charts(at)]}")


def text(at: AppTest) -> str:
    parts = [m.value for m in (*at.markdown, *at.caption, *at.info, *at.warning, *at.error,
                               *at.success, *at.header, *at.subheader, *at.code)]
    return "\n".join(str(p) for p in parts)


def env_ids(links: pd.Series) -> list[str]:
    return [str(u).split("env=")[1].split("&")[0] for u in links]


# --- Fleet --------------------------------------------------------------------------------------


def test_fleet_summarises_suites_as_the_feed_counts(store_url: str) -> None:
    at = page("fleet")
    assert [t.value for t in at.title] == ["Fleet"]
    assert metrics(at) == {"Environments": "21", "Allowed now": "12",
                           "Healthy fraction": "57.1%", "Quarantined": "7",
                           "Broken / flaky": "2 / 4", "Reward-hackable": "0"}
    suites = frame(at, "healthy fraction").set_index("suite")
    with open_store(store_url) as store:
        for suite in ("swe-train", "terminal-eval"):
            listing = allowlist(store, suite)
            row = suites.loc[suite]
            assert row["allowed"] == len(listing.allowed)
            assert row["environments"] == len(listing.allowed) + len(listing.excluded)
            assert row["healthy fraction"] == pytest.approx(listing.healthy_fraction)
    assert suites.loc["swe-train", ["broken", "flaky", "healthy", "quarantined", "by hand"]
                      ].tolist() == [1, 3, 8, 5, 1]
    assert suites.loc["terminal-eval", ["degraded", "unknown", "allows degraded"]].tolist() == \
        [1, 2, True]


def test_fleet_lists_worst_first_with_a_heatmap_by_hour(store_url: str) -> None:
    at = page("fleet")
    table = frame(at, "reason")
    assert list(table["state"][:2]) == ["broken", "broken"]
    assert list(table["state"][-1:]) == ["healthy"]
    assert env_ids(table["environment"][:2]) == ["swe-noop-reward", "term-tool-missing"]
    assert "Environments 1-21 of 21" in text(at)
    [(spec, [cells])] = charts(at)
    assert spec["mark"]["type"] == "rect"
    assert set(cells["environment"]) == set(env_ids(table["environment"])) - {"term-unchecked"}
    assert cells["bucket"].nunique() == 24  # the last 24 hours, one column each
    # the incident's hour is marked; its failures moved no state
    incident = cells[cells["bucket"].str.endswith("(incident)")]
    assert set(incident["bucket"]) == {"01-05 20:00 (incident)"}
    healthy = incident[incident["environment"] == "swe-healthy-1"]
    assert healthy["status"].tolist() == ["fail"]
    assert "term-engine-down" in set(cells[cells["status"] == "error"]["environment"])
    flaky = cells[cells["environment"] == "swe-flaky-tests"]
    assert {"flaky", "pass"} <= set(flaky["status"])


def test_fleet_heatmap_by_run(store_url: str, seeded: fleet.Seeded) -> None:
    at = page("fleet")
    at.segmented_control(key="bucketing").set_value("run").run()
    [(_, [cells])] = charts(at)
    assert cells["bucket"].nunique() == 12  # the newest 12 runs
    newest = seeded.runs[-1][:6]
    assert any(label.endswith(newest) for label in cells["bucket"])


@pytest.mark.parametrize(("widget", "value", "expected"), [
    ("suite", ["terminal-eval"], {f"term-ok-{i}" for i in range(1, 5)} | {
        "term-slow-shell", "term-tool-missing", "term-prices", "term-engine-down",
        "term-unchecked"}),
    ("state", ["broken"], {"swe-noop-reward", "term-tool-missing"}),
    ("kind", ["datasource"], {"swe-weather", "term-prices"}),
    ("reason", ["tool_missing", "schema_drift"], {"term-tool-missing", "swe-weather"}),
])
def test_fleet_filters(store_url: str, widget: str, value: list[str],
                       expected: set[str]) -> None:
    at = page("fleet")
    at.multiselect(key=widget).set_value(value).run()
    assert not at.exception
    assert set(env_ids(frame(at, "reason")["environment"])) == expected
    assert set(chart(at, "rect")["environment"]) <= expected


def test_fleet_filters_on_quarantine_and_id(store_url: str) -> None:
    at = page("fleet")
    at.selectbox(key="quarantined").set_value("quarantined").run()
    assert len(frame(at, "reason")) == 7
    at.text_input(key="search").set_value("healthy").run()
    assert at.info[0].value == "No environment matches these filters."
    at.selectbox(key="quarantined").set_value("not quarantined").run()
    assert env_ids(frame(at, "reason")["environment"]) == [f"swe-healthy-{i}"
                                                          for i in range(1, 7)]


def test_fleet_filters_come_from_the_url(store_url: str) -> None:
    at = app(state="flaky").run()
    assert not at.exception
    assert set(frame(at, "reason")["state"]) == {"flaky"}
    assert len(frame(at, "reason")) == 4


def test_fleet_pagination(store_url: str) -> None:
    at = page("fleet")
    at.selectbox(key="fleet-size").set_value(10).run()
    assert len(frame(at, "reason")) == 10
    assert "Environments 1-10 of 21" in text(at)
    [pager] = at.pagination
    pager.set_value(3).run()
    table = frame(at, "reason")
    assert len(table) == 1 and "Environments 21-21 of 21" in text(at)
    [(_, [cells])] = charts(at)
    assert set(cells["environment"]) == set(env_ids(table["environment"]))
    # a new filter starts again at page 1
    at.multiselect(key="state").set_value(["healthy"]).run()
    assert "Environments 1-10 of 12" in text(at)


def test_fleet_shows_new_transitions_at_once(store_url: str, seeded: fleet.Seeded) -> None:
    """Caches are keyed by the data version: no waiting for their TTL."""
    at = page("fleet")
    assert metrics(at)["Quarantined"] == "7"
    with open_store(store_url) as store:
        run_id = store.start_run("test", [])
        env = next(e for e in seeded.envs if e.id == "term-ok-1")
        at_time = fleet.T0 + timedelta(hours=fleet.CYCLES)
        for minute in (1, 2):
            store.record(run_id, ProbeResult(
                env.id, ProbeKind.TERMINAL, Status.FAIL, Reason.TOOL_MISSING, "git missing",
                0.5, "sha256:" + "f" * 64, env.spec_hash(ProbeKind.TERMINAL),  # a new image
                at_time + timedelta(minutes=minute)))
        store.finish_run(run_id)
        evaluate(store, [env], now=at_time + timedelta(minutes=5))
    at.run()
    assert metrics(at)["Quarantined"] == "8"
    assert metrics(at)["Broken / flaky"] == "3 / 4"


def test_fleet_lists_incidents(store_url: str) -> None:
    at = page("fleet")
    incidents = frame(at, "failing")
    assert incidents["kind"].tolist() == ["failure_storm"]
    assert incidents["failing"].tolist() == ["13/16"]


# --- Environment --------------------------------------------------------------------------------


def test_environment_state_why_and_wilson(store_url: str) -> None:
    at = page("environment", env="swe-flaky-tests")
    assert [h.value for h in at.header] == ["swe-flaky-tests"]
    got = metrics(at)
    assert (got["State"], got["Allowed now"], got["Quarantined"]) == ("flaky", "no", "auto")
    page_text = text(at)
    assert "**Why:** tests: nondeterministic — reruns of the same tests disagree" in page_text
    assert "**Quarantined** (auto) by envcheck since 2026-01-05 00:10 UTC" in at.error[0].value
    with open_store(store_url) as store:
        state = store.env_state("swe-flaky-tests")
        assert state is not None
        evidence = state.q_evidence
        health = state.kinds["tests"]
    assert f"environment?env=swe-flaky-tests&results={evidence[0]}" in at.error[0].value
    kinds = frame(at, "95% Wilson").set_index("kind")
    low, high = wilson_interval(health["failures"], health["passes"] + health["failures"])
    assert kinds.loc["tests", "95% Wilson"] == f"[{100 * low:.1f}%, {100 * high:.1f}%]"
    assert kinds.loc["tests", "failures"] == health["failures"] == 12
    assert kinds.loc["terminal", "state"] == "healthy"
    rate = chart(at, "layer", "Wilson")
    assert rate.set_index("kind").loc["tests", "low"] == pytest.approx(health["wilson"][0])


def test_environment_timeline_flaky_tests_and_pattern(store_url: str) -> None:
    at = page("environment", env="swe-flaky-tests")
    timeline = chart(at, "tick")
    assert set(timeline["kind"]) == {"terminal", "tests"}
    assert set(timeline["status"]) == {"pass", "flaky"}
    flaky = frame(at, "named flaky")
    assert flaky["test"].tolist() == [fleet.FLAKY_TEST]
    assert flaky["kind"].tolist() == ["random"]
    assert flaky["named flaky"].tolist() == ["12 of 36 probes"]
    pattern = chart(at, "rect", "outcome")
    assert set(pattern["test"]) == {fleet.FLAKY_TEST}
    assert {"pass", "fail"} <= set(pattern["outcome"])
    assert pattern["run"].iloc[0] == "negative"
    assert "positive 2/8 shuffled" in set(pattern["run"])


def test_environment_order_dependent_pattern(store_url: str) -> None:
    at = page("environment", env="swe-order-dependent")
    flaky = frame(at, "named flaky")
    assert flaky["kind"].tolist() == ["order"]
    pattern = chart(at, "rect", "outcome")
    assert {"confirm fail 1/4", "confirm pass 4/4"} <= set(pattern["run"])


def test_environment_evidence_of_linked_results(store_url: str, seeded: fleet.Seeded) -> None:
    ids = seeded.failing["term-tool-missing"][-2:]
    at = page("environment", env="term-tool-missing", results=",".join(map(str, ids)))
    assert f"Results #{ids[0]}, #{ids[1]} (from the link you followed)" in text(at)
    codes = [c.value for c in at.code]
    assert sum("command -v git python3" in c for c in codes) == 2
    assert "python3: /usr/bin/python3\ngit: not found" in codes
    assert any(f"**#{ids[1]}** · terminal" in m.value for m in at.markdown)
    # a result of another environment is not shown through this one
    other = seeded.failing["swe-noop-reward"][0]
    at = page("environment", env="term-tool-missing", results=f"{ids[0]},{other}")
    assert f"No result #{other} of term-tool-missing." in text(at)


def test_environment_latest_evidence_per_kind(store_url: str) -> None:
    at = page("environment", env="swe-noop-reward")
    assert [t.label for t in at.tabs] == ["tests · fail", "terminal · pass"]
    codes = "\n".join(c.value for c in at.code)
    assert "pytest -q -p no:cacheprovider" in codes
    assert "1 failed, 4 passed in 0.41s" in codes  # the output's tail
    assert "f2p_passes_before_oracle — a fail-to-pass test passes with no fix" in text(at)


def test_environment_image_digest_history(store_url: str) -> None:
    at = page("environment", env="swe-rebuilt")
    digests = frame(at, "digest", 0) if "first seen" in frame(at, "digest", 0) else \
        frame(at, "first seen")
    assert len(digests) == 2
    assert digests["digest"].tolist() == [fleet.digest("swe-rebuilt", 30),
                                          fleet.digest("swe-rebuilt", 0)]
    assert digests["failures"].tolist() == [0, 8]
    transitions = frame(at, "actor")
    assert "released" in transitions["quarantine"].tolist()


def test_environment_data_source_user(store_url: str) -> None:
    at = page("environment", env="swe-weather")
    assert metrics(at)["State"] == "flaky"
    assert "datasource: schema_drift — the response's structure changed" in text(at)
    assert not any(s.value == "Flaky tests" for s in at.subheader)


def test_environment_asks_and_suggests(store_url: str) -> None:
    at = page("environment")
    assert "Type an environment id" in at.info[0].value
    assert env_ids(frame(at, "state")["environment"])[:2] == ["swe-noop-reward",
                                                             "term-tool-missing"]
    at = page("environment", env="swe-healthy")
    assert "Unknown environment `swe-healthy`" in at.warning[0].value
    assert len(frame(at, "state")) == 6


# --- Quarantine ---------------------------------------------------------------------------------


def test_quarantine_list_read_only_without_api(store_url: str,
                                               seeded: fleet.Seeded) -> None:
    at = page("quarantine")
    assert "**Read-only.**" in at.info[0].value and "--api-url" in at.info[0].value
    assert metrics(at) == {"Quarantined": "7", "Automatically": "6", "By hand": "1"}
    listing = frame(at, "since")
    assert env_ids(listing["environment"])[0] == "swe-manual"  # newest first
    manual = listing.iloc[0]
    assert (manual["source"], manual["actor"], manual["reason"]) == (
        "manual", "alice", "reward hacking reported in run 4711")
    broken = listing[listing["environment"].str.contains("term-tool-missing")].iloc[0]
    assert broken["evidence"].startswith("environment?env=term-tool-missing&results=")
    ids = [int(i) for i in broken["evidence"].split("results=")[1].split(",")]
    assert set(ids) <= set(seeded.failing["term-tool-missing"])
    assert all(w.disabled for w in at.text_input if w.key and w.key.startswith("change-"))
    assert at.form_submit_button[0].disabled
    audit = frame(at, "generation")
    assert audit["change"].iloc[0] == "quarantined"
    assert env_ids(audit["environment"][:1]) == ["swe-manual"]


def test_quarantine_filters_and_audit(store_url: str) -> None:
    at = page("quarantine")
    at.selectbox(key="q-source").set_value("manual").run()
    assert env_ids(frame(at, "since")["environment"]) == ["swe-manual"]
    at.selectbox(key="q-source").set_value("any").run()
    at.multiselect(key="q-suite").set_value(["terminal-eval"]).run()
    assert set(env_ids(frame(at, "since")["environment"])) == {"term-tool-missing",
                                                               "term-prices"}
    at.toggle(key="audit-only").set_value(False).run()
    assert "Transitions 1-25 of" in text(at)
    at.text_input(key="audit-search").set_value("swe-rebuilt").run()
    audit = frame(at, "generation")
    assert set(env_ids(audit["environment"])) == {"swe-rebuilt"}
    assert "released" in audit["change"].tolist()


def test_quarantine_asks_for_a_token(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVCHECK_API_URL", "http://127.0.0.1:9")
    at = page("quarantine")
    assert at.text_input(key="api-token").proto.type == 1  # a password field
    assert "**Read-only** until you give the API token" in at.info[0].value
    assert at.form_submit_button[0].disabled


def test_quarantine_token_setting_unusable(store_url: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVCHECK_API_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("ENVCHECK_API_TOKEN", "short")
    at = page("quarantine")
    assert "unusable: the API token must have at least 16 characters" in at.error[0].value
    assert at.form_submit_button[0].disabled


@pytest.fixture
def api(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """envcheck's API over the same store, on 127.0.0.1, with a token."""
    with open_store(store_url) as store, \
            serve_in_thread(create_app(store, TOKEN, export_dir=tmp_path / "exports")) as url:
        monkeypatch.setenv("ENVCHECK_API_URL", url)
        yield url


def change(at: AppTest, env_id: str, action: str, reason: str, actor: str) -> None:
    at.text_input(key="change-env").set_value(env_id)
    at.radio(key="change-action").set_value(action)
    at.text_input(key="change-reason").set_value(reason)
    at.text_input(key="change-actor").set_value(actor)
    at.form_submit_button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]


def test_quarantine_add_and_release_through_the_api(
        api: str, store_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ENVCHECK_API_TOKEN", TOKEN)
    at = page("quarantine")
    assert "Read-only" not in text(at) and not at.form_submit_button[0].disabled
    change(at, "term-ok-1", "quarantine", "suspected reward leak", "bob")
    assert at.success[0].value.startswith("term-ok-1 quarantined (generation ")
    listing = frame(at, "since")
    assert env_ids(listing["environment"])[0] == "term-ok-1"
    assert listing.iloc[0][["source", "actor", "reason"]].tolist() == [
        "manual", "bob (dashboard)", "suspected reward leak"]
    assert metrics(at)["By hand"] == "2"
    audit = frame(at, "generation")
    assert audit.iloc[0][["change", "actor"]].tolist() == ["quarantined", "bob (dashboard)"]
    assert (tmp_path / "exports" / "quarantine.json").exists()  # the API rewrote the exports

    change(at, "term-ok-1", "release", "false alarm", "bob")
    assert at.success[0].value.startswith("term-ok-1 released (generation ")
    assert "term-ok-1" not in set(env_ids(frame(at, "since")["environment"]))
    change(at, "term-ok-1", "release", "again", "bob")
    assert at.success[0].value == "term-ok-1 was not quarantined: nothing changed"
    change(at, "no-such-env", "quarantine", "typo", "bob")
    assert "the API refused (404 unknown_environment)" in at.error[0].value
    with open_store(store_url) as store:
        [released, added] = store.transitions("term-ok-1", limit=2)
    assert (added.actor, added.quarantined, released.quarantined) == (
        "bob (dashboard)", True, False)


def test_quarantine_with_a_token_typed_in_the_session(api: str) -> None:
    at = page("quarantine")
    at.text_input(key="api-token").set_value("wrong-token-" + "z" * 16).run()
    change(at, "term-ok-2", "quarantine", "checking", "carol")
    assert "the API refused (401 invalid_token)" in at.error[0].value
    at.text_input(key="api-token").set_value(TOKEN).run()
    change(at, "term-ok-2", "quarantine", "checking", "carol")
    assert at.success[0].value.startswith("term-ok-2 quarantined")
    assert "swe-manual" in set(env_ids(frame(at, "since")["environment"]))


def test_quarantine_form_needs_every_field(api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVCHECK_API_TOKEN", TOKEN)
    at = page("quarantine")
    change(at, "term-ok-3", "quarantine", "", "dave")
    assert at.error[0].value == "Give the environment id, a reason and your name."


def test_quarantine_api_down(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVCHECK_API_URL", "http://127.0.0.1:9")  # discard port: refused
    monkeypatch.setenv("ENVCHECK_API_TOKEN", TOKEN)
    at = page("quarantine")
    change(at, "term-ok-3", "quarantine", "x", "dave")
    assert at.error[0].value.startswith("the API did not answer")


# --- Data sources -------------------------------------------------------------------------------


def test_data_sources_overview(store_url: str) -> None:
    at = page("data_sources")
    sources = frame(at, "accepted shape").set_index("source")
    assert sources.loc["weather-api", ["environments", "status", "reason", "shapes seen"]
                       ].tolist() == [1, "fail", "schema_drift", 2]
    assert sources.loc["prices-api", "status"] == "pass"


def test_data_source_drift_with_old_and_new_fingerprints(store_url: str) -> None:
    at = page("data_sources", source="weather-api")
    assert [h.value for h in at.header] == ["weather-api"]
    with open_store(store_url) as store:
        accepted = store.accepted_shape("weather-api")
        shapes = store.shapes("weather-api")
    assert accepted is not None
    new = next(s.fingerprint for s in shapes if s.fingerprint != accepted.fingerprint)
    drift = frame(at, "old fingerprint (accepted)")
    assert len(drift) == fleet.CYCLES - fleet.DRIFT_FROM
    assert set(drift["old fingerprint (accepted)"]) == {accepted.fingerprint}
    assert set(drift["new fingerprint"]) == {new}
    assert set(drift["changes"]) == {"$.temp: removed; $.temperature: added (number)"}
    assert drift["result"].iloc[0].startswith("environment?env=swe-weather&results=")
    shapes_table = frame(at, "accepted by")
    assert set(shapes_table["fingerprint"]) == {accepted.fingerprint, new}
    got = metrics(at)
    assert got["Availability (last report)"] == "0.0%"
    assert got["Drift events"] == str(fleet.CYCLES - fleet.DRIFT_FROM)
    failures = chart(at, "bar")
    assert failures.set_index("class").loc["schema_drift", "samples"] == \
        2 * (fleet.CYCLES - fleet.DRIFT_FROM)


def test_data_source_availability_latency_and_failure_classes(store_url: str) -> None:
    at = page("data_sources", source="prices-api")
    availability = chart(at, "line", "share of samples")
    assert len(availability) == fleet.CYCLES
    assert availability["availability"].min() == pytest.approx(0.5)  # 2 of 4 samples: 503
    assert availability["availability"].max() == 1.0
    latency = chart(at, "layer", "percentile")
    assert set(latency["percentile"]) == {"p50", "p95", "max"}
    assert (latency["ms"] > 0).all()
    failures = chart(at, "bar")
    flaky_cycles = sum(1 for c in range(fleet.CYCLES) if c % 5 in (1, 3))
    assert failures.set_index("class").loc["http_5xx", "samples"] == 2 * flaky_cycles
    assert "No drift in these reports." in text(at)


# --- the query layer on both backends -----------------------------------------------------------


@pytest.fixture(scope="module")
def pg_seeded() -> Iterator[str]:
    """The seeded fleet in a PostgreSQL database of its own (read-only for the tests)."""
    with new_pg_database("envcheck_dash") as name:
        url = f"postgresql://postgres@127.0.0.1:5432/{name}"
        with open_store(url) as store:
            fleet.seed(store)
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend_url(request: pytest.FixtureRequest, template: tuple[Path, fleet.Seeded],
                tmp_path: Path) -> str:
    if request.param == "sqlite":
        return fleet.copy_sqlite(template[0], tmp_path / "envcheck.db")
    url: str = request.getfixturevalue("pg_seeded")
    return url


def test_store_views_agree_on_both_backends(backend_url: str) -> None:
    with open_store(backend_url) as store:
        version = store.data_version()
        assert version.generation == store.generation()
        assert version.newest_result_at == fleet.T0 + timedelta(
            hours=fleet.CYCLES - 1, seconds=10 * (len(fleet.FLEET) - 2))  # term-engine-down
        overview = {s.suite: s for s in suite_stats(store)}
        assert overview["swe-train"].allowed == len(allowlist(store, "swe-train").allowed)
        page1 = store.environment_page(EnvFilter(), 0, 10)
        page3 = store.environment_page(EnvFilter(), 20, 10)
        assert (page1.total, len(page1.items), len(page3.items)) == (21, 10, 1)
        assert page1.items[0].state == "broken" and page3.items[0].state == "healthy"
        assert store.environment_page(EnvFilter(search="%"), 0, 10).total == 0  # a literal %
        ids = [e.env_id for e in page1.items]
        since = fleet.T0 + timedelta(hours=12)
        hourly = store.time_buckets(ids, since, since + timedelta(hours=24), 3600)
        assert {b.bucket for b in hourly} == {since + timedelta(hours=h) for h in range(24)}
        per_env: dict[str, int] = {}
        for b in hourly:
            per_env[b.env_id] = per_env.get(b.env_id, 0) + b.count
        assert per_env["term-tool-missing"] == 24  # one terminal result an hour
        assert per_env["swe-noop-reward"] == 48  # terminal and tests
        six = store.time_buckets(["swe-noop-reward"], since, since + timedelta(hours=24),
                                 6 * 3600, ["tests"])
        assert sorted((b.bucket, b.count) for b in six) == [
            (since + timedelta(hours=h), 6) for h in (0, 6, 12, 18)]
        runs = store.recent_runs(3)
        by_run = store.run_buckets(ids, [r for r, _ in runs])
        assert {b.bucket for b in by_run} == {r for r, _ in runs}
        assert store.quarantine_page(source="manual").items[0].env_id == "swe-manual"
        assert store.transition_page(quarantine_only=True).total == 9
        assert [u.source_id for u in store.data_source_uses()] == ["prices-api", "weather-api"]
        assert store.shape_source_ids() == ["prices-api", "weather-api"]
        assert len(store.source_results(["swe-weather"], 500)) == fleet.CYCLES
        assert [d.image_digest for d in store.digest_history("swe-rebuilt")] == [
            fleet.digest("swe-rebuilt", 30), fleet.digest("swe-rebuilt", 0)]


def test_every_page_renders_on_both_backends(backend_url: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVCHECK_DATABASE_URL", backend_url)
    monkeypatch.delenv("ENVCHECK_API_URL", raising=False)
    try:
        assert metrics(page("fleet"))["Healthy fraction"] == "57.1%"
        assert metrics(page("environment", env="swe-flaky-tests"))["State"] == "flaky"
        assert metrics(page("quarantine"))["Quarantined"] == "7"
        assert len(frame(page("data_sources", source="weather-api"),
                         "old fingerprint (accepted)")) == fleet.CYCLES - fleet.DRIFT_FROM
    finally:
        st.cache_data.clear()
        st.cache_resource.clear()


# --- the settings and the command ---------------------------------------------------------------


def test_api_settings_read_the_process_environment(tmp_path: Path) -> None:
    assert api_settings({}) == ApiSettings(None, None)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    got = api_settings({"ENVCHECK_API_URL": "http://127.0.0.1:8787/",
                                       "ENVCHECK_API_TOKEN_FILE": str(token_file)})
    assert (got.url, got.token, got.writable) == ("http://127.0.0.1:8787", TOKEN, True)
    assert TOKEN not in repr(got)


def test_the_daemon_and_the_cli_do_not_import_streamlit() -> None:
    code = ("import sys, envcheck.cli.app, envcheck.daemon, envcheck.api.app, envcheck.store; "
            "assert 'streamlit' not in sys.modules, 'streamlit imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=ROOT)


def test_dashboard_command_refuses_a_missing_app(tmp_path: Path) -> None:
    done = subprocess.run([*envcheck_cmd(), "dashboard", "--app", str(tmp_path / "nope.py"),
                           "--database", f"sqlite:///{tmp_path / 'x.db'}"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "the dashboard app is not found" in done.stderr


def test_dashboard_command_refuses_a_bad_store(tmp_path: Path) -> None:
    done = subprocess.run([*envcheck_cmd(), "dashboard", "--database", "mysql://x@y/z"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert "unsupported database 'mysql'" in done.stderr
