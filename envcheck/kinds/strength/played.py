"""The wrong-fix controls' outcome as values: what each control ended in, a survivor's class,
and the tallies the score is made of (pure). :mod:`.verdict` turns them into the probe's
verdict, :mod:`.report` into its details and summary."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from envcheck.catalogue.probe_specs import MIN_COMPETENT
from envcheck.core.results import CommandEvidence

__all__ = ["DIFF_MAX", "MIN_COMPETENT", "NEW_CASE", "OUTPUTS", "PATCH", "Outcome", "Played",
           "StrengthOutcome", "Survivor"]

DIFF_MAX = 4096  # characters of a survivor's diff kept
# ``generated["of"]``, set on every path: what the controls change, a gold patch (wrong-fix
# controls) or a script oracle's outputs (wrong-output controls); the summary names it
PATCH, OUTPUTS = "patch", "outputs"
NEW_CASE = "new_case_value"  # the operator whose mutants are also scored on their own


class Outcome(StrEnum):
    KILLED = "killed"  # a fail-to-pass test failed
    KILLED_P2P = "killed_p2p"  # they passed; a pass-to-pass test failed
    SURVIVED = "survived"  # every declared test passed: the wrong fix earns the reward
    INCOMPETENT = "incompetent"  # did not apply, import, or collect: proves nothing
    TIMEOUT = "timeout"  # the tests ran past timeout_s (a loop the mutant made endless)

    @property
    def killed(self) -> bool:
        return self in (Outcome.KILLED, Outcome.KILLED_P2P)


class Survivor(StrEnum):
    CONFIRMED = "confirmed"  # behaves otherwise than the gold patch, and the tests pass
    NOT_DISTINGUISHED = "not_distinguished"  # behaves as the gold patch on the tests' inputs
    UNCOVERED = "uncovered_hunk"  # in a hunk the tests pass without (its partial patch survives)
    UNCLASSIFIED = "unclassified"  # the recorder could not say (why in ``Played.why``)


@dataclass(frozen=True)
class Played:
    """One control played: a mutant (``operator`` set) or a partial patch (None), what it
    is, and what the tests did with it; a survivor's class and why (``survivor``, ``why``)."""

    description: str
    outcome: Outcome
    detail: str
    file: str = ""
    line: int | None = None
    operator: str | None = None
    diff: str = ""
    evidence: tuple[CommandEvidence, ...] = field(default=(), compare=False)
    diff_cut: bool = False  # ``diff`` was cut to DIFF_MAX already (a stored one)
    survivor: Survivor | None = None  # None: not classified (a confirmed one, for the score)
    why: str = ""

    @property
    def confirmed(self) -> bool:
        return self.outcome is Outcome.SURVIVED and self.survivor in (None, Survivor.CONFIRMED)

    def to_json(self, diff: bool = False) -> dict[str, Any]:
        """``diff``: with the change (a survivor's, bounded)."""
        data: dict[str, Any] = {"description": self.description, "file": self.file,
                                "outcome": str(self.outcome), "detail": self.detail}
        if self.operator is not None:
            data.update(operator=self.operator, line=self.line)
        if self.survivor is not None:
            data.update({"class": str(self.survivor), "class_why": self.why})
        if diff and self.diff:
            data["diff"] = self.diff[:DIFF_MAX]
            if len(self.diff) > DIFF_MAX or self.diff_cut:
                data["diff_truncated"] = True
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Played | None:
        try:
            outcome = Outcome(data["outcome"])
            survivor = Survivor(data["class"]) if "class" in data else None
        except (KeyError, ValueError, TypeError):
            return None
        line = data.get("line")
        operator = data.get("operator")
        return cls(str(data.get("description", "")), outcome, str(data.get("detail", "")),
                   str(data.get("file", "")), line if isinstance(line, int) else None,
                   str(operator) if operator is not None else None, str(data.get("diff", "")),
                   diff_cut=bool(data.get("diff_truncated")), survivor=survivor,
                   why=str(data.get("class_why", "")))


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
    cut_short: bool = False  # probe_s reached while survivors were being classified

    @property
    def partial(self) -> bool:
        return bool(self.unplayed) or self.cut_short

    def counts(self) -> Counter[Outcome]:
        return Counter(m.outcome for m in self.mutants)

    def survivors(self, *kinds: Survivor | None) -> list[Played]:
        return [m for m in self.mutants if m.outcome is Outcome.SURVIVED
                and (not kinds or m.survivor in kinds)]

    def killed(self) -> int:
        return sum(m.outcome.killed for m in self.mutants)

    def confirmed(self) -> int:
        return sum(m.confirmed for m in self.mutants)

    def score(self, min_competent: int = MIN_COMPETENT) -> float | None:
        """killed / (killed + confirmed survivors), or None when fewer than
        ``min_competent`` count."""
        told = self.killed() + self.confirmed()
        return self.killed() / told if told >= max(min_competent, 1) else None

    def new_case_score(self) -> float | None:
        """The score of the ``new_case_value`` mutants alone (the value the fix newly
        returns, made wrong), or None when none of them was told apart from the fix."""
        rows = [m for m in self.mutants if m.operator == NEW_CASE]
        killed = sum(m.outcome.killed for m in rows)
        told = killed + sum(m.confirmed for m in rows)
        return killed / told if told else None

    def _below(self, min_score: float, min_competent: int, unclassified: bool) -> bool:
        """The score, or the new case's alone, below ``min_score`` (a verifier that never
        checks the value the fix newly returns is weak however many edits it refuses: those
        are most often refused by the assertions on the inputs that worked before)."""
        if self.score(min_competent) is None:
            return False
        for rows in (self.mutants, [m for m in self.mutants if m.operator == NEW_CASE]):
            # as if every unplayed one were killed
            killed = sum(m.outcome.killed for m in rows) + (
                len(self.unplayed) if rows is self.mutants else 0)
            failed = sum(m.confirmed or (unclassified and m.outcome is Outcome.SURVIVED
                                         and m.survivor is Survivor.UNCLASSIFIED)
                         for m in rows)
            if killed + failed and killed / (killed + failed) < min_score:
                return True
        return False

    def weak(self, min_score: float, min_competent: int = MIN_COMPETENT) -> bool:
        """The score is below ``min_score`` even if every unplayed mutant were killed."""
        return self._below(min_score, min_competent, unclassified=False)

    def undecided(self, min_score: float, min_competent: int = MIN_COMPETENT) -> bool:
        """Not weak, but weak if the survivors that could not be classified were confirmed
        ones: those decide, and they say nothing."""
        return not self.weak(min_score, min_competent) and self._below(
            min_score, min_competent, unclassified=True)


