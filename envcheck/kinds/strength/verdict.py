"""What the wrong-fix controls found, and the probe's verdict with it (pure: no sandbox).

Each mutant of the gold patch ends in one :class:`Outcome`: ``killed`` (a fail-to-pass test
failed), ``killed_p2p`` (they passed, a pass-to-pass test failed), ``survived`` (every test
passed: the verifier pays for that wrong fix), ``incompetent`` (it did not apply, broke the
import, or no test was collected: it proves nothing) or ``timeout``. A survivor is then
classified (:class:`Survivor`): ``uncovered_hunk`` when every line it changes lies in a hunk
or file whose partial patch the tests reward (:mod:`.uncovered`: the tests do not need that
part of the fix; it tells about the record, not the assertions); else by infection
(:mod:`.survivors`), ``confirmed`` when its recorded behaviour on the tests' inputs differs
from the gold patch's in a value (a wrong fix the assertions let through),
``not_distinguished`` when it is the same there (nothing the tests could have refused), or
``unclassified`` when the recorder could not say.

The **score** is ``killed / (killed + confirmed)``, both kinds of kill: only confirmed
survivors lower it, the others are listed apart. Below ``min_score`` it is ``weak_verifier``
(a degraded pass, a ``fail`` where strength is required). With fewer than ``min_competent``
mutants told apart from the fix (killed or confirmed), with no control played at all, or when
survivors that could not be classified would decide it, the score is **not measurable**: a
degraded pass of its own, ``strength_not_measurable``, whether strength is required or not (a
task is not failed for what envcheck could not measure). Partial patches are reported beside
the score, not in it (a hunk left out may be a refactor). Outcomes the time budget cut short,
or played under other rules (:data:`RULES`: the operator set and the survivor
classification), are never reused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from envcheck.catalogue.probe_specs import Strength
from envcheck.core.results import Reason, Status
from envcheck.kinds.adversarial.ledger import STRENGTH_KEY
from envcheck.kinds.base import Verdict
from envcheck.kinds.strength.infection import CLASSIFICATION_VERSION
from envcheck.kinds.strength.operators import OPERATORS_VERSION
from envcheck.kinds.strength.played import (
    DIFF_MAX,
    MIN_COMPETENT,
    OUTPUTS,
    PATCH,
    Outcome,
    Played,
    StrengthOutcome,
    Survivor,
)
from envcheck.kinds.strength.report import details, tally

__all__ = ["DETAIL_KEY", "DIFF_MAX", "MIN_COMPETENT", "OUTPUTS", "PATCH", "RULES", "Outcome",
           "Played", "StrengthOutcome", "Survivor", "judge", "stored_outcome"]

DETAIL_KEY = STRENGTH_KEY
SHOWN = 3  # survivors named in the summary
EVIDENCE_MAX = 4  # commands of surviving mutants' runs kept as evidence
# the rules an outcome was played under, part of its identity (as the spec is): another
# operator set or another classification of survivors plays the controls again
RULES = f"operators {OPERATORS_VERSION}; survivors {CLASSIFICATION_VERSION}"


def _headline(what: str, outcome: StrengthOutcome, plan: Strength) -> str | None:
    """Why the score is not measurable, or None if it is."""
    if outcome.not_played is not None:
        return f"strength not measurable: {what} controls not played: {outcome.not_played}"
    generated = outcome.generated.get("mutants", len(outcome.mutants))
    if outcome.score(plan.min_competent) is None:
        fix = "the oracle's output" if what == "wrong-output" else "the fix"
        return (f"strength not measurable: {tally(outcome, plan)}; fewer than "
                f"{plan.min_competent} told apart from {fix} ({generated} generated)")
    if outcome.undecided(plan.min_score, plan.min_competent):
        unclassified = outcome.survivors(Survivor.UNCLASSIFIED)
        return (f"strength not measurable: {tally(outcome, plan)}; "
                f"{len(unclassified)} survivor(s) could not be classified and would decide "
                f"({unclassified[0].why})")
    return None


def judge(verdict: Verdict, outcome: StrengthOutcome, plan: Strength, *,
          reused: dict[str, Any] | None = None) -> Verdict:
    """``verdict`` (a pass of the probe's own controls, maybe degraded already) with the
    wrong-fix controls' outcome in ``details.strength``."""
    info = details(outcome, plan)
    if reused is not None:
        info["reused"] = reused
    found = {**verdict.details, DETAIL_KEY: info}
    what = "wrong-output" if outcome.generated.get("of") == OUTPUTS else "wrong-fix"
    unmeasured = _headline(what, outcome, plan)
    if unmeasured is not None:
        evidence = outcome.evidence if outcome.not_played is not None else ()
        if verdict.reason is not Reason.OK:  # degraded already: it stands
            return Verdict(verdict.status, verdict.reason, f"{verdict.summary}; {unmeasured}",
                           found, evidence + verdict.evidence)
        return Verdict(Status.PASS, Reason.STRENGTH_NOT_MEASURABLE,
                       f"{unmeasured}; {verdict.summary}", found, evidence + verdict.evidence)
    if not outcome.weak(plan.min_score, plan.min_competent):
        return replace(verdict, summary=f"{verdict.summary}; {what} controls: "
                       f"{tally(outcome, plan)}", details=found)
    survivors = [m for m in outcome.mutants if m.confirmed]
    shown = "; ".join(f"{m.file}:{m.line} {m.description}" for m in survivors[:SHOWN])
    more = f" (+{len(survivors) - SHOWN} more)" if len(survivors) > SHOWN else ""
    headline = (f"weak verifier: {tally(outcome, plan)}, below {plan.min_score:g}; "
                f"confirmed surviving: {shown}{more}")
    evidence = tuple(e for m in survivors for e in m.evidence[-1:])[:EVIDENCE_MAX]
    if verdict.reason is not Reason.OK and not plan.require:  # degraded already: it stands
        return Verdict(verdict.status, verdict.reason, f"{verdict.summary}; {headline} too",
                       found, evidence + verdict.evidence)
    return Verdict(Status.FAIL if plan.require else Status.PASS, Reason.WEAK_VERIFIER,
                   f"{headline}; {verdict.summary}", found, evidence + verdict.evidence)


def _key(played: Played) -> tuple[str, str, int | None, str | None]:
    return played.description, played.file, played.line, played.operator


def stored_outcome(info: Mapping[str, Any], seed: str, cap: int, partial: bool
                   ) -> StrengthOutcome | None:
    """An earlier outcome, if it is whole and was played for the same sample (``seed``, the
    cap, partial patches or not) under the same :data:`RULES`; None: play again."""
    if info.get("played") is not True or info.get("partial") or info.get("unplayed"):
        return None
    generated = info.get("generated")
    if not isinstance(generated, Mapping) or generated.get("seed") != seed \
            or generated.get("cap") != cap or generated.get("partial") != partial \
            or generated.get("rules") != RULES:
        return None
    found: list[list[Played]] = []
    for key in ("mutants", "partial_patches", "survivors", "survivors_apart"):
        rows = info.get(key)
        if not isinstance(rows, list):
            return None
        played = [Played.from_json(r) for r in rows if isinstance(r, Mapping)]
        if len(played) != len(rows) or any(p is None for p in played):
            return None
        found.append([p for p in played if p is not None])
    mutants, partials, *survivors = found
    diffs = {_key(s): s for listed in survivors for s in listed}  # each survivor's diff
    mutants = [replace(m, diff=diffs[_key(m)].diff, diff_cut=diffs[_key(m)].diff_cut)
               if _key(m) in diffs else m for m in mutants]
    return StrengthOutcome(mutants, partials, generated=dict(generated))
