"""The Grafana board (dashboards/grafana/envcheck.json) as the tests read it: its panels'
queries, with Grafana's variables expanded the way Grafana would before sending them to
Prometheus."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.conftest import ROOT

BOARD = ROOT / "dashboards" / "grafana" / "envcheck.json"
# What Grafana puts in for its own variables on a short range: "All" suites, a rate window of
# at least four scrape intervals.
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "5m", "suite": ".*"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


@dataclass(frozen=True)
class Query:
    panel: str
    ref_id: str
    expr: str


def board() -> dict[str, Any]:
    return dict(json.loads(BOARD.read_text(encoding="utf-8")))


def panels(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    for panel in doc.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def queries(doc: dict[str, Any]) -> list[Query]:
    return [Query(p["title"], t["refId"], t["expr"])
            for p in panels(doc) for t in p.get("targets", [])]


def expand(expr: str, values: dict[str, str] | None = None) -> str:
    """``expr`` with every ``$name``, ``${name}`` and ``[[name]]`` replaced; an unknown
    variable raises KeyError (a typo in the board)."""
    known = {**BUILTINS, **(values or {})}
    return _VARIABLE.sub(lambda m: known[next(g for g in m.groups() if g)], expr)
