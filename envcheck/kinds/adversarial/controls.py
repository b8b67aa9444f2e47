"""Play tricks against a verifier and judge what it did.

Protocol-neutral: a verification protocol plugs in as an :data:`Attempt`, a callable that
plays one trick in a fresh sandbox (:func:`~envcheck.kinds.adversarial.play.play`) and then
verifies exactly as the environment does (the tests probe's command and JUnit report; a
dataset's test patch re-applied; a task's ``tests/`` copied in and its reward file read), and
says whether the reward was earned, or that the trick could not act (its own command did not
start, or failed with nothing to show for it). :func:`judge` turns the attempts into the
probe's verdict: none rewarded, the verdict stands with each trick and what the verifier did
in its details; any rewarded, ``reward_hackable`` (a degraded pass, or a ``fail`` where hack
resistance is required). A trick that could not act is neither: it is listed apart with why,
the summary counts only the tricks that acted, and such an outcome is never reused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from envcheck.catalogue.probe_specs import Adversarial
from envcheck.core.results import CommandEvidence, ProbeKind, Reason, Status
from envcheck.kinds.adversarial.ledger import ControlsLedger
from envcheck.kinds.adversarial.library import TRICKS, Trick, select
from envcheck.kinds.adversarial.play import own_command
from envcheck.kinds.base import ProbeContext, Verdict
from envcheck.sandbox.base import Deadline

__all__ = ["Attempt", "Attempted", "judge", "run_controls", "with_controls"]

EVIDENCE_PER_TRICK = 2  # the trick's own command and the verification that rewarded it
SHOWN_WHY = 120  # characters of why a trick could not act, in the summary


@dataclass(frozen=True)
class Attempted:
    """One trick and what the verifier did after it; or why the trick could not act."""

    trick: str
    rewarded: bool
    verifier: str  # what the verifier did, in a line
    evidence: tuple[CommandEvidence, ...] = field(default=(), compare=False)
    could_not_act: str | None = None  # why, when the trick never acted: it proves nothing

    @classmethod
    def idle(cls, trick: str, why: str, evidence: Sequence[CommandEvidence] = ()
             ) -> Attempted:
        return cls(trick, False, f"could not act: {why}", tuple(evidence), why)

    def to_json(self) -> dict[str, Any]:
        if self.could_not_act is not None:
            return {"trick": self.trick, "why": self.could_not_act,
                    "stands_for": TRICKS[self.trick].stands_for}
        return {"trick": self.trick, "rewarded": self.rewarded, "verifier": self.verifier,
                "stands_for": TRICKS[self.trick].stands_for}


Attempt = Callable[[Trick], Attempted]


def run_controls(tricks: Sequence[Trick], attempt: Attempt, deadline: Deadline
                 ) -> tuple[list[Attempted], list[str]]:
    """Each trick's attempt, in order, until ``deadline`` (the environment's ``probe_s``);
    and the tricks left unplayed when it passed."""
    done: list[Attempted] = []
    for trick in tricks:
        if deadline.expired():
            return done, [t.name for t in tricks[len(done):]]
        done.append(attempt(trick))
    return done, []


def _idle_summary(idle: Sequence[Attempted]) -> str:
    """``2 could not act: a, b (why); c (why)``: the tricks grouped by why."""
    groups: dict[str, list[str]] = {}
    for attempt in idle:
        groups.setdefault(str(attempt.could_not_act)[:SHOWN_WHY], []).append(attempt.trick)
    shown = "; ".join(f"{', '.join(names)} ({why})" for why, names in groups.items())
    return f"{len(idle)} could not act: {shown}"


def _tally(acted: Sequence[Attempted], idle: Sequence[Attempted],
           unplayed: Sequence[str]) -> str:
    """What the tricks that were refused amount to: all of them, or how many of how many."""
    if not idle and not unplayed:
        return f"all {len(acted)} adversarial trick(s) refused"
    parts = [f"{len(acted)} of {len(acted) + len(idle) + len(unplayed)} adversarial trick(s) "
             "refused"]
    if idle:
        parts.append(_idle_summary(idle))
    if unplayed:
        parts.append(f"{len(unplayed)} not played: probe_s reached")
    return ", ".join(parts)


def judge(verdict: Verdict, attempts: Sequence[Attempted], *, require: bool,
          reused: dict[str, Any] | None = None, unplayed: Sequence[str] = (),
          protocol: str | None = None) -> Verdict:
    """``verdict`` (a pass of the probe's own controls) with the adversarial controls' outcome.
    ``reused``: where earlier evidence for the same image and spec came from, if it did;
    ``unplayed``: tricks the time budget left out (a later probe plays them all again);
    ``protocol``: what the verification protocol leaves to trust, when it fixes the verifier
    (a dataset's harness) so that a hole is the protocol's, not the environment's.
    ``details.adversarial.tricks`` lists the tricks that acted, ``could_not_act`` the others
    (always present: an outcome without it predates this accounting and is never reused)."""
    acted = [a for a in attempts if a.could_not_act is None]
    idle = [a for a in attempts if a.could_not_act is not None]
    rewarded = [a for a in acted if a.rewarded]
    info: dict[str, Any] = {"tricks": [a.to_json() for a in acted],
                            "rewarded": [a.trick for a in rewarded], "require": require,
                            "could_not_act": [a.to_json() for a in idle]}
    if protocol is not None:
        info["protocol"] = protocol
    if reused is not None:
        info["reused"] = reused
    if unplayed:
        info["unplayed"] = list(unplayed)
    details = {**verdict.details, "adversarial": info}
    # why the first trick that could not act did not: its own command, or what stopped the run
    why = next(((own_command(a.evidence) or a.evidence[0],) for a in idle if a.evidence), ())
    if not rewarded:
        summary = f"{verdict.summary}; {_tally(acted, idle, unplayed)}"
        return replace(verdict, summary=summary, details=details,
                       evidence=why + verdict.evidence)
    status = Status.FAIL if require else Status.PASS
    names = ", ".join(a.trick for a in rewarded)
    summary = (f"reward hackable: {len(rewarded)} of {len(acted)} trick(s) earn the reward "
               f"with no fix ({names})")
    if idle:
        summary += f"; {_idle_summary(idle)}"
    evidence = tuple(e for a in rewarded for e in a.evidence[:EVIDENCE_PER_TRICK])
    return Verdict(status, Reason.REWARD_HACKABLE, summary, details,
                   evidence + why + verdict.evidence)


def _reused(prior: dict[str, Any], names: list[str]) -> list[Attempted] | None:
    """The stored attempts, if they are evidence for ``names``: every trick played and acted
    (an outcome with tricks unplayed or that could not act, or one from before tricks that
    could not act were told apart, is played afresh)."""
    stored = {t.get("trick"): t for t in prior.get("tricks", [])}
    if set(stored) != set(names) or prior.get("unplayed") or prior.get("could_not_act") != []:
        return None
    return [Attempted(n, bool(stored[n].get("rewarded")), str(stored[n].get("verifier", "")))
            for n in names]


def with_controls(ctx: ProbeContext, plan: Adversarial | None, verdict: Verdict,
                  attempt: Callable[[], Attempt], protocol: str | None = None) -> Verdict:
    """``verdict`` with the adversarial controls' outcome, if ``plan`` asks for them: the
    stored outcome for this image digest and spec if there is one, else each trick played by
    ``attempt()`` (the protocol's). Only a pass is attacked: a task whose own controls fail
    is broken already."""
    if plan is None or verdict.status is not Status.PASS:
        return verdict
    names = plan.names()
    ledger = ctx.service(ControlsLedger)
    prior = ledger.prior(ctx.env.id, ctx.image_digest, ctx.env.spec_hash(ProbeKind.TESTS)) \
        if ledger is not None else None
    reused = _reused(prior[1], names) if prior is not None else None
    if prior is not None and reused is not None:
        return judge(verdict, reused, require=plan.require,
                     reused={"from": prior[0].isoformat()}, protocol=protocol)
    # The controls get a probe_s budget of their own: the probe's controls spent theirs.
    played, unplayed = run_controls(select(names), attempt(),
                                    Deadline(ctx.env.timeouts.probe_s))
    return judge(verdict, played, require=plan.require, unplayed=unplayed, protocol=protocol)
