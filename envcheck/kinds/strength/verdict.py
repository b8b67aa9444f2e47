"""What the wrong-fix controls found, and the probe's verdict with it (pure: no sandbox).

Each mutant of the gold patch ends in one :class:`Outcome`: ``killed`` (a fail-to-pass test
failed), ``killed_p2p`` (they passed, a pass-to-pass test failed), ``survived`` (every test
passed: the verifier pays for that wrong fix), ``incompetent`` (it did not apply, broke the
import, or no test was collected: it proves nothing) or ``timeout``. The **score** is
``killed / (killed + survived)``, both kinds of kill; below ``min_score`` with at least
:data:`MIN_COMPETENT` competent mutants it is ``weak_verifier`` (a degraded pass, a ``fail``
where strength is required); with fewer the score is "not measurable", said in the details,
never a verdict. Partial patches are reported beside the score, not in it (a hunk left out
may be a refactor). Controls that could not be played at all (the gold patch's files could
not be read back, the generator refused the patch) are "not played, with why", never a score,
and never reused; nor is an outcome the time budget cut short.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from envcheck.catalogue.probe_specs import Strength
from envcheck.core.results import CommandEvidence, Reason, Status
from envcheck.kinds.adversarial.ledger import STRENGTH_KEY
from envcheck.kinds.base import Verdict

__all__ = ["DETAIL_KEY", "DIFF_MAX", "MIN_COMPETENT", "OUTPUTS", "PATCH", "Outcome", "Played",
           "StrengthOutcome", "judge", "stored_outcome"]

DETAIL_KEY = STRENGTH_KEY
MIN_COMPETENT = 3  # fewer competent mutants than this: the score is not measurable
DIFF_MAX = 4096  # characters of a survivor's diff kept
SHOWN = 3  # survivors named in the summary
EVIDENCE_MAX = 4  # commands of surviving mutants' runs kept as evidence
# ``generated["of"]``, set on every path: what the controls change, a gold patch (wrong-fix
# controls) or a script oracle's outputs (wrong-output controls); the summary names it
PATCH, OUTPUTS = "patch", "outputs"


class Outcome(StrEnum):
    KILLED = "killed"  # a fail-to-pass test failed
    KILLED_P2P = "killed_p2p"  # they passed; a pass-to-pass test failed
    SURVIVED = "survived"  # every declared test passed: the wrong fix earns the reward
    INCOMPETENT = "incompetent"  # did not apply, import, or collect: proves nothing
    TIMEOUT = "timeout"  # the tests ran past timeout_s (a loop the mutant made endless)

    @property
    def killed(self) -> bool:
        return self in (Outcome.KILLED, Outcome.KILLED_P2P)


@dataclass(frozen=True)
class Played:
    """One control played: a mutant (``operator`` set) or a partial patch (None), what it
    is, and what the tests did with it."""

    description: str
    outcome: Outcome
    detail: str
    file: str = ""
    line: int | None = None
    operator: str | None = None
    diff: str = ""
    evidence: tuple[CommandEvidence, ...] = field(default=(), compare=False)
    diff_cut: bool = False  # ``diff`` was cut to DIFF_MAX already (a stored one)

    def to_json(self, diff: bool = False) -> dict[str, Any]:
        """``diff``: with the change (a survivor's, bounded)."""
        data: dict[str, Any] = {"description": self.description, "file": self.file,
                                "outcome": str(self.outcome), "detail": self.detail}
        if self.operator is not None:
            data.update(operator=self.operator, line=self.line)
        if diff and self.diff:
            data["diff"] = self.diff[:DIFF_MAX]
            if len(self.diff) > DIFF_MAX or self.diff_cut:
                data["diff_truncated"] = True
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Played | None:
        try:
            outcome = Outcome(data["outcome"])
        except (KeyError, ValueError, TypeError):
            return None
        line = data.get("line")
        operator = data.get("operator")
        return cls(str(data.get("description", "")), outcome, str(data.get("detail", "")),
                   str(data.get("file", "")), line if isinstance(line, int) else None,
                   str(operator) if operator is not None else None, str(data.get("diff", "")),
                   diff_cut=bool(data.get("diff_truncated")))


@dataclass
class StrengthOutcome:
    mutants: list[Played] = field(default_factory=list)
    partials: list[Played] = field(default_factory=list)
    unplayed: list[str] = field(default_factory=list)  # what probe_s left out
    not_played: str | None = None  # why no control could be played at all
    generated: dict[str, Any] = field(default_factory=dict)  # what the generator made
    evidence: tuple[CommandEvidence, ...] = ()  # of a control that could not be played
    seconds: float | None = None  # None: reused
    runs: int = 0  # container runs of the controls

    @property
    def partial(self) -> bool:
        return bool(self.unplayed)

    def counts(self) -> Counter[Outcome]:
        return Counter(m.outcome for m in self.mutants)

    def score(self) -> float | None:
        """killed / (killed + survived), or None when fewer than MIN_COMPETENT count."""
        counts = self.counts()
        killed = counts[Outcome.KILLED] + counts[Outcome.KILLED_P2P]
        competent = killed + counts[Outcome.SURVIVED]
        return killed / competent if competent >= MIN_COMPETENT else None

    def weak(self, min_score: float) -> bool:
        """The score is below ``min_score`` even if every unplayed mutant were killed."""
        counts = self.counts()
        killed = counts[Outcome.KILLED] + counts[Outcome.KILLED_P2P] + len(self.unplayed)
        competent = killed + counts[Outcome.SURVIVED]
        return (self.score() is not None and competent > 0
                and killed / competent < min_score)


def _per_operator(mutants: Sequence[Played]) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    for m in mutants:
        row = table.setdefault(m.operator or "", {str(o): 0 for o in Outcome})
        row[str(m.outcome)] += 1
    return dict(sorted(table.items()))


def _info(outcome: StrengthOutcome, plan: Strength) -> dict[str, Any]:
    counts = outcome.counts()
    score = outcome.score()
    info: dict[str, Any] = {
        "played": outcome.not_played is None, "require": plan.require,
        "min_score": plan.min_score, "score": None if score is None else round(score, 4),
        "counts": {str(o): counts[o] for o in Outcome},
        "per_operator": _per_operator(outcome.mutants),
        "survivors": [m.to_json(diff=True) for m in outcome.mutants
                      if m.outcome is Outcome.SURVIVED],
        "mutants": [m.to_json() for m in outcome.mutants],
        "partial_patches": [p.to_json() for p in outcome.partials],
        "generated": outcome.generated, "runs": outcome.runs}
    if outcome.not_played is not None:
        info["why"] = outcome.not_played
    elif score is None:
        competent = sum(counts[o] for o in Outcome if o.killed or o is Outcome.SURVIVED)
        info["not_measurable"] = (f"{competent} competent mutant(s), fewer than "
                                  f"{MIN_COMPETENT}: no score")
    if outcome.unplayed:
        info["unplayed"] = list(outcome.unplayed)
        info["partial"] = True
    if outcome.seconds is not None:
        info["seconds"] = round(outcome.seconds, 3)
    return info


def _tally(outcome: StrengthOutcome) -> str:
    counts = outcome.counts()
    killed = counts[Outcome.KILLED] + counts[Outcome.KILLED_P2P]
    score = outcome.score()
    what = (f"{killed} of {killed + counts[Outcome.SURVIVED]} competent mutant(s) killed"
            + (f" (score {score:.2f})" if score is not None else " (not measurable: fewer "
               f"than {MIN_COMPETENT} competent)"))
    aside = [f"{counts[o]} {o}" for o in (Outcome.INCOMPETENT, Outcome.TIMEOUT) if counts[o]]
    rewarded = [p for p in outcome.partials if p.outcome is Outcome.SURVIVED]
    if outcome.partials:
        aside.append(f"{len(rewarded)} of {len(outcome.partials)} partial patch(es) rewarded")
    if outcome.unplayed:
        aside.append(f"{len(outcome.unplayed)} not played: probe_s reached")
    return what + (f" ({', '.join(aside)})" if aside else "")


def judge(verdict: Verdict, outcome: StrengthOutcome, plan: Strength, *,
          reused: dict[str, Any] | None = None) -> Verdict:
    """``verdict`` (a pass of the probe's own controls, maybe degraded already) with the
    wrong-fix controls' outcome in ``details.strength``."""
    info = _info(outcome, plan)
    if reused is not None:
        info["reused"] = reused
    details = {**verdict.details, DETAIL_KEY: info}
    what = "wrong-output" if outcome.generated.get("of") == OUTPUTS else "wrong-fix"
    if outcome.not_played is not None:
        return replace(verdict, summary=f"{verdict.summary}; {what} controls not played: "
                       f"{outcome.not_played}", details=details,
                       evidence=outcome.evidence + verdict.evidence)
    if not outcome.weak(plan.min_score):
        return replace(verdict, summary=f"{verdict.summary}; {what} controls: "
                       f"{_tally(outcome)}", details=details)
    survivors = [m for m in outcome.mutants if m.outcome is Outcome.SURVIVED]
    shown = "; ".join(f"{m.file}:{m.line} {m.description}" for m in survivors[:SHOWN])
    more = f" (+{len(survivors) - SHOWN} more)" if len(survivors) > SHOWN else ""
    headline = (f"weak verifier: {_tally(outcome)}, below {plan.min_score:g}; surviving: "
                f"{shown}{more}")
    evidence = tuple(e for m in survivors for e in m.evidence[-1:])[:EVIDENCE_MAX]
    if verdict.reason is not Reason.OK and not plan.require:  # degraded already: it stands
        return Verdict(verdict.status, verdict.reason, f"{verdict.summary}; {headline} too",
                       details, evidence + verdict.evidence)
    return Verdict(Status.FAIL if plan.require else Status.PASS, Reason.WEAK_VERIFIER,
                   f"{headline}; {verdict.summary}", details, evidence + verdict.evidence)


def _with_diff(played: Played, survivor: Played | None) -> Played:
    if survivor is None:
        return played
    return replace(played, diff=survivor.diff, diff_cut=survivor.diff_cut)


def stored_outcome(info: Mapping[str, Any], seed: str, cap: int, partial: bool
                   ) -> StrengthOutcome | None:
    """An earlier outcome, if it is whole and was played for the same sample (``seed``, the
    cap, partial patches or not); None: play again."""
    if info.get("played") is not True or info.get("partial") or info.get("unplayed"):
        return None
    generated = info.get("generated")
    if not isinstance(generated, Mapping) or generated.get("seed") != seed \
            or generated.get("cap") != cap or generated.get("partial") != partial:
        return None
    found: list[list[Played]] = []
    for key in ("mutants", "partial_patches", "survivors"):
        rows = info.get(key)
        if not isinstance(rows, list):
            return None
        played = [Played.from_json(r) for r in rows if isinstance(r, Mapping)]
        if len(played) != len(rows) or any(p is None for p in played):
            return None
        found.append([p for p in played if p is not None])
    mutants, partials, survivors = found
    cut = iter(survivors)  # the survivors' diffs, in the mutants' order
    mutants = [_with_diff(m, next(cut, None)) if m.outcome is Outcome.SURVIVED else m
               for m in mutants]
    return StrengthOutcome(mutants, partials, generated=dict(generated))
