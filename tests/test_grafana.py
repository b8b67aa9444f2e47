"""The Grafana board (dashboards/grafana/envcheck.json), checked offline as far as Grafana's
model can be without a Grafana: a JSON Schema of the documented dashboard model, a round trip
through Grafana's own generated models (grafana-foundation-sdk: every key the board holds is
one the model, or the panel plugin's options model, knows), and the layout on the 24-column
grid. That every panel's query returns series from a real Prometheus scraping a real envcheck
is tests/test_deploy_stack.py's."""

from __future__ import annotations

import copy
import itertools
import json
import re
from typing import Any

import jsonschema
import pytest
from grafana_foundation_sdk.cog import plugins
from grafana_foundation_sdk.cog import runtime as cog
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard, RowPanel
from grafana_foundation_sdk.models.prometheus import Dataquery

from tests.conftest import ROOT
from tests.grafana import BUILTINS, board, expand, panels, queries

SCHEMA = ROOT / "tests" / "grafana_model" / "dashboard.schema.json"
# What the board must show (the list), by the metrics that carry it.
COVERED = {
    "fleet health by suite": {"envcheck_suite_environments", "envcheck_suite_healthy_fraction"},
    "quarantine size and transitions": {"envcheck_suite_quarantined", "envcheck_feed_generation"},
    "probe results and durations by kind": {"envcheck_probe_results_total",
                                            "envcheck_probe_duration_seconds_bucket"},
    "data-source availability and latency": {"envcheck_datasource_availability_ratio",
                                             "envcheck_datasource_latency_seconds"},
    "incidents": {"envcheck_incidents_total"},
    "scheduler lag": {"envcheck_scheduler_lag_seconds"},
    "sandbox-seconds": {"envcheck_sandbox_seconds_total"},
    "the budget and what waits for it": {"envcheck_budget_spent_sandbox_seconds",
                                         "envcheck_budget_sandbox_seconds",
                                         "envcheck_budget_backlog"},
    "runs by depth": {"envcheck_probe_runs_total"},
    "the training run's rollouts: by outcome, failure ratio, flagged environments": {
        "envcheck_rollouts_total", "envcheck_rollouts_unknown_environment_total",
        "envcheck_suite_rollout_flagged_environments"},
    "tag looks by registry and outcome, and their latency": {
        "envcheck_registry_looks_total", "envcheck_registry_look_seconds_total"},
    "pulls: count, bytes, seconds by registry and outcome": {
        "envcheck_registry_pulls_total", "envcheck_registry_pull_bytes_total",
        "envcheck_registry_pull_seconds_total"},
    "the image cache: bytes against the budget, evictions, hit ratio": {
        "envcheck_image_cache_bytes", "envcheck_image_cache_budget_bytes",
        "envcheck_image_cache_evictions_total", "envcheck_image_cache_hits_total",
        "envcheck_image_cache_misses_total"},
    "a registry's rate limit remaining": {"envcheck_registry_rate_remaining"},
}

plugins.register_default_plugins()


def round_trip(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(JSONEncoder().encode(Dashboard.from_json(doc))))


def lost(original: Any, decoded: Any, path: str = "$") -> list[str]:
    """Where ``original`` is not part of ``decoded``: keys the model dropped, values it
    changed. The model may add its defaults; it may not lose or alter anything."""
    if isinstance(original, dict):
        if not isinstance(decoded, dict):
            return [f"{path}: became {type(decoded).__name__}"]
        return [problem for key, value in original.items()
                for problem in (lost(value, decoded[key], f"{path}.{key}") if key in decoded
                                else [f"{path}.{key}: not in the model"])]
    if isinstance(original, list):
        if not isinstance(decoded, list) or len(decoded) != len(original):
            return [f"{path}: list changed"]
        return [p for i, (a, b) in enumerate(zip(original, decoded, strict=True))
                for p in lost(a, b, f"{path}[{i}]")]
    return [] if original == decoded else [f"{path}: {original!r} became {decoded!r}"]


def test_the_board_validates_against_the_dashboard_schema() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in jsonschema.Draft202012Validator(schema).iter_errors(board())]
    assert errors == []


def test_grafanas_models_hold_every_key_and_value_of_the_board() -> None:
    doc = board()
    assert lost(doc, round_trip(doc)) == []
    decoded = Dashboard.from_json(doc)
    for panel in decoded.panels or []:
        if isinstance(panel, RowPanel):
            continue
        # the panel's options were read by its plugin's model, its queries by Prometheus's
        assert cog.panelcfg_config(panel.type_val) is not None, panel.type_val
        assert not isinstance(panel.options, dict), f"{panel.title}: options not decoded"
        assert all(isinstance(t, Dataquery) for t in panel.targets or []), panel.title


def test_the_round_trip_catches_a_misspelt_key() -> None:
    """The check above can fail: a key Grafana does not know is reported, wherever it is."""
    doc = board()
    bad = copy.deepcopy(doc)
    panel = next(p for p in bad["panels"] if p["type"] == "timeseries")
    panel["options"]["legend"]["displayMod"] = "list"
    panel["targets"][0]["exp"] = panel["targets"][0].pop("expr")
    panel["fieldConfig"]["defaults"]["custom"]["fillOpacitty"] = 10
    problems = lost(bad, round_trip(bad))
    assert len(problems) == 3 and all("not in the model" in p for p in problems), problems


def test_panels_tile_the_grid_without_overlap() -> None:
    doc = board()
    ids = [p["id"] for p in panels(doc)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells: dict[tuple[int, int], str] = {}
    for panel in panels(doc):
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, f"{panel['title']}: wider than the grid"
        for cell in itertools.product(range(pos["x"], pos["x"] + pos["w"]),
                                      range(pos["y"], pos["y"] + pos["h"])):
            assert cell not in cells, f"{panel['title']} overlaps {cells[cell]}"
            cells[cell] = panel["title"]
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs)), f"{panel['title']}: refIds repeat"


def test_every_query_uses_defined_variables_and_the_boards_data_source() -> None:
    doc = board()
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels(doc):
        if panel["type"] == "row":
            continue
        for ref in (panel["datasource"], *(t["datasource"] for t in panel["targets"])):
            assert ref == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    for query in queries(doc):
        names = {n for groups in re.findall(r"\$\{(\w+)|\$(\w+)|\[\[(\w+)", query.expr)
                 for n in groups if n}
        assert names <= set(variables) | set(BUILTINS), (query.panel, names)
        assert "$" not in expand(query.expr), query


@pytest.mark.parametrize("topic", sorted(COVERED))
def test_the_board_shows(topic: str) -> None:
    used = {name for q in queries(board())
            for name in re.findall(r"\benvcheck[:_][a-z_:]+\b", q.expr)}
    assert COVERED[topic] <= used, COVERED[topic] - used
