"""What the leak checks found, and the probe's verdict with it.

A leak is evidence about the image, not about a run: each :class:`Finding` says what was
found (a commit, a file the gold patch leaves, the solution's file) and where. None found:
the verdict stands, its details list what was checked. Any found: the most telling reason of
them (``solution_leaked``, then ``solution_in_image``, then ``tests_in_image``), a degraded
pass, or a ``fail`` where the checks are required; a pass that was already degraded for
another reason (``reward_hackable``) keeps it, its summary naming the leak too. A check that
could not run says why in ``checked``; one cut short by time makes the outcome partial, which
is never reused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from envcheck.core.results import LEAK_REASONS, CommandEvidence, Reason, Status
from envcheck.kinds.adversarial.ledger import LEAKS_KEY
from envcheck.kinds.base import Verdict

__all__ = ["DETAIL_KEY", "Checked", "Finding", "LeakOutcome", "judge", "stored_outcome"]

DETAIL_KEY = LEAKS_KEY
PRIORITY = (Reason.SOLUTION_LEAKED, Reason.SOLUTION_IN_IMAGE, Reason.TESTS_IN_IMAGE)
FOUND_MAX = 50  # findings kept in details
SHOWN = 2  # findings named in the summary
_HEADLINE = {Reason.SOLUTION_LEAKED: "the answer is in the image's git history",
             Reason.SOLUTION_IN_IMAGE: "the solution is readable in the image",
             Reason.TESTS_IN_IMAGE: "the hidden tests are readable in the image"}


@dataclass(frozen=True, slots=True)
class Finding:
    reason: Reason
    check: str  # git, files or paths
    what: str
    where: str

    def to_json(self) -> dict[str, str]:
        return {"reason": str(self.reason), "check": self.check, "what": self.what,
                "where": self.where}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Finding | None:
        try:
            reason = Reason(data["reason"])
        except (KeyError, ValueError, TypeError):
            return None
        if reason not in LEAK_REASONS:
            return None
        return cls(reason, str(data.get("check", "")), str(data.get("what", "")),
                   str(data.get("where", "")))


@dataclass(frozen=True, slots=True)
class Checked:
    """One check: what it looked at and what it saw, or why it did not run."""

    check: str
    played: bool
    summary: str
    cut_short: bool = False  # time ran out before it finished: the outcome is partial

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "played": self.played, "summary": self.summary,
                "cut_short": self.cut_short}


@dataclass
class LeakOutcome:
    found: list[Finding] = field(default_factory=list)
    checked: list[Checked] = field(default_factory=list)
    evidence: tuple[CommandEvidence, ...] = ()
    seconds: float | None = None  # the container's start and the commands; None: reused

    @property
    def partial(self) -> bool:
        return any(c.cut_short for c in self.checked)


def stored_outcome(info: Mapping[str, Any], checks: Sequence[str]) -> LeakOutcome | None:
    """An earlier outcome, if it is whole and ran the same ``checks``; None: play them."""
    if info.get("partial") or info.get("found_total", 0) > FOUND_MAX:
        return None
    checked = [c for c in info.get("checked", []) if isinstance(c, Mapping)]
    if [c.get("check") for c in checked] != list(checks):
        return None
    found = [Finding.from_json(f) for f in info.get("found", []) if isinstance(f, Mapping)]
    if any(f is None for f in found):
        return None
    return LeakOutcome([f for f in found if f is not None],
                       [Checked(str(c["check"]), bool(c.get("played")), str(c.get("summary", "")))
                        for c in checked])


def _shown(found: Sequence[Finding]) -> str:
    more = f" (+{len(found) - SHOWN} more)" if len(found) > SHOWN else ""
    return "; ".join(f"{f.what} ({f.where})" for f in found[:SHOWN]) + more


def judge(verdict: Verdict, outcome: LeakOutcome, *, require: bool,
          reused: dict[str, Any] | None = None) -> Verdict:
    """``verdict`` (a pass of the probe's own controls) with the leak checks' outcome."""
    found = sorted(outcome.found, key=lambda f: PRIORITY.index(f.reason))
    unplayed = [c for c in outcome.checked if not c.played]
    info: dict[str, Any] = {"found": [f.to_json() for f in found[:FOUND_MAX]],
                            "checked": [c.to_json() for c in outcome.checked],
                            "require": require}
    if len(found) > FOUND_MAX:
        info["found_total"] = len(found)
    if unplayed:
        info["unplayed"] = [c.check for c in unplayed]
    if outcome.partial:
        info["partial"] = True
    if reused is not None:
        info["reused"] = reused
    if outcome.seconds is not None:
        info["seconds"] = round(outcome.seconds, 3)
    details = {**verdict.details, DETAIL_KEY: info}
    if not found:
        played = len(outcome.checked) - len(unplayed)
        summary = f"{verdict.summary}; no answer leak found ({played} check(s)"
        if unplayed:
            summary += f"; not played: {unplayed[0].check}: {unplayed[0].summary}"
        evidence = outcome.evidence + verdict.evidence if unplayed else verdict.evidence
        return replace(verdict, summary=summary + ")", details=details, evidence=evidence)
    top = found[0].reason
    evidence = outcome.evidence + verdict.evidence
    if verdict.reason is not Reason.OK and not require:  # degraded already: that reason stands
        return Verdict(verdict.status, verdict.reason, f"{verdict.summary}; {_HEADLINE[top]} "
                       f"too: {_shown(found)}", details, evidence)
    return Verdict(Status.FAIL if require else Status.PASS, top,
                   f"{_HEADLINE[top]}: {_shown(found)}; {verdict.summary}", details, evidence)
