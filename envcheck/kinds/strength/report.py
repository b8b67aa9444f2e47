"""The wrong-fix controls' outcome as the probe reports it: ``details.strength`` (what the JSON
and the dashboard show: the score, the counts, per operator what was generated and what became
of it, the confirmed survivors and, apart, the others) and the summary's tally (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envcheck.catalogue.probe_specs import Strength
from envcheck.kinds.strength.played import (
    NEW_CASE,
    OUTPUTS,
    Outcome,
    Played,
    StrengthOutcome,
    Survivor,
)
from envcheck.kinds.strength.sampling import Rejection

__all__ = ["OPERATOR_COLUMNS", "details", "tally"]

# one row per operator: candidates generated for the sample; dropped before any run as the
# same program (as the gold patch, another mutant, or the base) or for not compiling; then
# what the played ones ended in, survivors by class
OPERATOR_COLUMNS = ("generated", "same_program", "not_compiling", "incompetent", "timeout",
                    "killed", "confirmed", "not_distinguished", "uncovered_hunk",
                    "unclassified")
_SAME = tuple(str(r) for r in (Rejection.SAME_AS_ORIGINAL, Rejection.DUPLICATE,
                               Rejection.SAME_AS_BASE))


def _per_operator(outcome: StrengthOutcome) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}

    def row(operator: str) -> dict[str, int]:
        return table.setdefault(operator, dict.fromkeys(OPERATOR_COLUMNS, 0))

    tried = outcome.generated.get("tried")
    for operator, n in (tried.items() if isinstance(tried, dict) else ()):
        row(str(operator))["generated"] += int(n)
    rejected = outcome.generated.get("rejected")
    for key, n in (rejected.items() if isinstance(rejected, dict) else ()):
        operator, _, why = str(key).partition(": ")
        column = "same_program" if why in _SAME else "not_compiling" \
            if why == str(Rejection.NOT_COMPILING) else None
        if column is not None:
            row(operator)[column] += int(n)
    for m in outcome.mutants:
        cells = row(m.operator or "")
        if not isinstance(tried, dict):  # an outcome stored before the counts were kept
            cells["generated"] += 1
        if m.outcome.killed:
            cells["killed"] += 1
        elif m.outcome is Outcome.SURVIVED:
            cells[str(m.survivor or Survivor.CONFIRMED)] += 1
        else:
            cells[str(m.outcome)] += 1
    return dict(sorted(table.items()))


def _listed(mutants: Sequence[Played]) -> list[dict[str, Any]]:
    return [m.to_json(diff=True) for m in mutants]


def details(outcome: StrengthOutcome, plan: Strength) -> dict[str, Any]:
    counts = outcome.counts()
    score = outcome.score(plan.min_competent)
    new_case = outcome.new_case_score()
    apart = outcome.survivors(Survivor.NOT_DISTINGUISHED, Survivor.UNCOVERED,
                              Survivor.UNCLASSIFIED)
    info: dict[str, Any] = {
        "played": outcome.not_played is None, "require": plan.require,
        "min_score": plan.min_score, "min_competent": plan.min_competent,
        "score": None if score is None else round(score, 4),
        "new_case_score": None if new_case is None else round(new_case, 4),
        "counts": {**{str(o): counts[o] for o in Outcome},
                   **{str(s): len(outcome.survivors(s)) for s in Survivor}},
        "per_operator": _per_operator(outcome),
        "survivors": _listed([m for m in outcome.mutants if m.confirmed]),
        "survivors_apart": _listed(apart),
        "mutants": [m.to_json() for m in outcome.mutants],
        "partial_patches": [p.to_json() for p in outcome.partials],
        "generated": outcome.generated, "runs": outcome.runs}
    info["counts"][str(Survivor.CONFIRMED)] = outcome.confirmed()
    if outcome.not_played is not None:
        info["why"] = outcome.not_played
    elif score is None:
        info["not_measurable"] = (f"{outcome.killed() + outcome.confirmed()} mutant(s) told "
                                  f"apart from the fix (killed or confirmed survivors), fewer "
                                  f"than {plan.min_competent}: no score")
    if outcome.partial:
        info["partial"] = True
    if outcome.unplayed:
        info["unplayed"] = list(outcome.unplayed)
    if outcome.seconds is not None:
        info["seconds"] = round(outcome.seconds, 3)
    return info


def tally(outcome: StrengthOutcome, plan: Strength) -> str:
    counts = outcome.counts()
    killed, confirmed = outcome.killed(), outcome.confirmed()
    score = outcome.score(plan.min_competent)
    generated = outcome.generated.get("mutants", len(outcome.mutants) + len(outcome.unplayed))
    fix = "the oracle's output" if outcome.generated.get("of") == OUTPUTS else "the fix"
    what = (f"{generated} generated: {killed} of {killed + confirmed} mutant(s) told apart from "
            f"{fix} killed" + (f" (score {score:.2f})" if score is not None else ""))
    told = [m for m in outcome.mutants if m.operator == NEW_CASE
            and (m.outcome.killed or m.confirmed)]
    new_score = outcome.new_case_score()
    if told and new_score is not None:
        what += (f"; the value the fix newly returns, made wrong: "
                 f"{sum(m.outcome.killed for m in told)} of {len(told)} killed "
                 f"(score {new_score:.2f})")
    aside = []
    for kind, said in ((Survivor.NOT_DISTINGUISHED, "not distinguished from the fix on the "
                        "tests' inputs"), (Survivor.UNCOVERED, "in a hunk the tests pass "
                                           "without"), (Survivor.UNCLASSIFIED, "not classified")):
        if outcome.survivors(kind):
            aside.append(f"{len(outcome.survivors(kind))} survivor(s) {said}")
    aside += [f"{counts[o]} {o}" for o in (Outcome.INCOMPETENT, Outcome.TIMEOUT) if counts[o]]
    rewarded = [p for p in outcome.partials if p.outcome is Outcome.SURVIVED]
    if outcome.partials:
        aside.append(f"{len(rewarded)} of {len(outcome.partials)} partial patch(es) rewarded")
    if outcome.unplayed:
        aside.append(f"{len(outcome.unplayed)} not played: probe_s reached")
    if outcome.cut_short:
        aside.append("probe_s reached while survivors were classified")
    return what + (f" ({', '.join(aside)})" if aside else "")
