"""The environment page's verifier strength: the newest tests result's wrong-fix (or
wrong-output) controls as tables, one row per operator (generated, incompetent, filtered as
the same program, killed, confirmed survivors, not-distinguished survivors) and one per
survivor (confirmed first, with what told it apart from the fix)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from envcheck.store.views.common import StoredResult

__all__ = ["StrengthView", "strength_view"]


@dataclass(frozen=True, slots=True)
class StrengthView:
    """What the page shows: the score (None: not measurable) and why not, the verdict's
    reason, the rows per operator and per survivor, and the new case's own score."""

    reason: str
    score: float | None
    not_measurable: str | None
    operators: list[dict[str, Any]] = field(default_factory=list)
    survivors: list[dict[str, Any]] = field(default_factory=list)
    new_case_score: float | None = None  # the new_case_value mutants' own score, if any


def _survivor(row: dict[str, Any], kind: str) -> dict[str, Any]:
    return {"class": row.get("class", kind), "operator": row.get("operator"),
            "where": f"{row.get('file')}:{row.get('line')}",
            "wrong fix": row.get("description"), "why": row.get("class_why")}


def strength_view(latest: Sequence[StoredResult]) -> StrengthView | None:
    """The newest tests result's controls, or None when it has none (not declared, or the
    probe stopped before them)."""
    tests = [s.result for s in latest if s.result.kind == "tests"]
    info = tests[0].details.get("strength") if tests else None
    if not isinstance(info, dict):
        return None
    table = info.get("per_operator")
    operators = [{"operator": name, **{k: v for k, v in row.items() if isinstance(v, int)}}
                 for name, row in (table.items() if isinstance(table, dict) else ())
                 if isinstance(row, dict)]
    survivors = [_survivor(r, "confirmed") for r in info.get("survivors") or ()
                 if isinstance(r, dict)]
    survivors += [_survivor(r, "not_distinguished") for r in info.get("survivors_apart") or ()
                  if isinstance(r, dict)]
    score, new_case = info.get("score"), info.get("new_case_score")
    why = info.get("not_measurable") or info.get("why")
    return StrengthView(tests[0].reason, score if isinstance(score, float | int) else None,
                        str(why) if why else None, operators, survivors,
                        new_case if isinstance(new_case, float | int) else None)
