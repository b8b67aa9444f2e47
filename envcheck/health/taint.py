"""Taint: the intervals in which an environment's evidence says its rewards could not be
trusted, so that a trainer knows which samples to drop, relabel or replay. Pure: intervals
from the plain facts of :mod:`envcheck.store.views.taint`; derived, never stored.

**Untrusted** is flaky or broken, quarantined by envcheck, or degraded for a reason of
:data:`~envcheck.health.trust.UNTRUSTED_REASONS`; a plain degraded (a slow shell, a pass
after retries, one failure of a new image) is not. The record says when
(:mod:`~envcheck.health.taint_record`): each untrusted stretch of transitions (the stored
state for the current one) holds *findings*: the results its transitions cite, the reason
they name, the rollouts' flag. Each finding **reaches back** to where its evidence applies
(its ``basis``):

- ``identity``: the identity's first appearance (the first result with that kind, image
  digest and spec hash) when the failure is a property of the image and spec: a reason of
  :data:`~envcheck.health.trust.IMAGE_REASONS`, or a kind of
  :data:`~envcheck.health.trust.IMAGE_KINDS` whose every counted result of the identity
  failed up to the decision. The image was in use from its digest's first result of any
  kind, or first rollout, on; results pruned are read from the rollups, which keep no spec
  hash. Both count as the identity's unless a raw result of the kind and digest with another
  spec is older (then the spec changed there).
- ``first_failure``: the identity's first failing result after the environment's previous
  stretch ended (a flaky kind, a data source, a failure some probes of the identity did not
  show); results of cycles judged incidents count for nothing, as in the health model. The
  failures a decision cites and the health model's window are never pruned, so this is the
  first the decision saw; only an older failure outside both, past the failures' retention,
  can have gone.
- ``first_failing_rollouts``: the first environment-caused failing rollout of the digest
  (the first hour with one, at its first record) after the previous stretch ended.
- ``manual``: a person's quarantine, from when they added it to when they released it.

A finding's interval **closes** at release (back to trusted: healthy, a plain degraded,
retired), or at a new digest: the first result or rollout of a digest first seen after the
flag. A stretch that outlives its digest (still quarantined on the next image) opens an
interval for the new digest only from that digest's own findings. A person's quarantine
closes only when a person releases it (it is about the environment, not an image).
Intervals are half-open, ``[start, end)``; ``end`` None is open. One environment's intervals
may overlap (a person's quarantine over envcheck's, a finding that reaches back past an
earlier interval): a sample is tainted when any of them covers it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from envcheck.health.quarantine import Source
from envcheck.health.taint_record import (
    Evidence,
    Finding,
    Record,
    Stretch,
    change_findings,
    current_findings,
    read_record,
    untrusted_now,
)
from envcheck.health.trust import IMAGE_KINDS, IMAGE_REASONS, ROLLOUTS_KIND
from envcheck.store.tables.states import Transition
from envcheck.store.views.taint import EnvTaintFacts

__all__ = ["EVIDENCE_SHOWN", "Basis", "TaintInterval", "overlapping", "taint_intervals"]

EVIDENCE_SHOWN = 50  # result ids an interval lists (the earliest)


class Basis(StrEnum):
    """What an interval's start reaches back to (see the module's docstring)."""

    IDENTITY = "identity"
    FIRST_FAILURE = "first_failure"
    FIRST_FAILING_ROLLOUTS = "first_failing_rollouts"
    MANUAL = "manual"


@dataclass(frozen=True, slots=True)
class TaintInterval:
    """When one environment's rewards could not be trusted: ``[start, end)``, ``end`` None
    while it lasts; ``flagged_at`` when envcheck decided (``start`` reaches back before it,
    by its ``basis``); ``kind`` the probe kind, ``rollouts``, or None for a person's
    quarantine; ``evidence`` the ids of the results that show it."""

    env_id: str
    suite: str
    start: datetime
    end: datetime | None
    image_digest: str | None
    kind: str | None
    reason: str
    basis: Basis
    flagged_at: datetime
    evidence: tuple[int, ...] = ()

    def covers(self, at: datetime) -> bool:
        """Is a sample taken at ``at`` inside?"""
        return self.start <= at and (self.end is None or at < self.end)

    def overlaps(self, since: datetime | None, until: datetime | None) -> bool:
        """Does it meet ``[since, until]`` (None: unbounded)?"""
        return (until is None or self.start <= until) and \
            (since is None or self.end is None or self.end > since)

    def to_json(self) -> dict[str, Any]:
        """One line of ``taint.jsonl`` and of ``envcheck taint --json``."""
        return {"env_id": self.env_id, "suite": self.suite, "start": self.start.isoformat(),
                "end": self.end.isoformat() if self.end else None,
                "image_digest": self.image_digest, "kind": self.kind, "reason": self.reason,
                "basis": str(self.basis), "flagged_at": self.flagged_at.isoformat(),
                "evidence": list(self.evidence)}


def overlapping(intervals: Iterable[TaintInterval], since: datetime | None,
                until: datetime | None) -> list[TaintInterval]:
    return [i for i in intervals if i.overlaps(since, until)]


@dataclass(frozen=True, slots=True)
class _Reach:
    """Where one finding reaches back to."""

    start: datetime
    basis: Basis
    finding: Finding
    image_digest: str | None
    evidence: tuple[int, ...]


def _reach(f: Finding, ev: Evidence, after: datetime | None) -> _Reach:
    """Where a finding's evidence reaches back to (see the module's docstring)."""
    if f.kind == ROLLOUTS_KIND:
        return _reach_rollouts(f, ev, after)
    assert f.kind is not None
    first_seen, first_pass = ev.identity_seen(f.kind, f.image_digest, f.spec_hash)
    always_failed = f.kind in IMAGE_KINDS and (first_pass is None or first_pass > f.decided)
    anchor = ev.first(f, after)
    ids = f.evidence + ((anchor.id,) if anchor is not None else ())
    if first_seen is not None and (f.reason in IMAGE_REASONS or always_failed):
        return _Reach(min(first_seen, f.decided), Basis.IDENTITY, f, f.image_digest, ids)
    start = anchor.started_at if anchor is not None else f.decided
    return _Reach(start, Basis.FIRST_FAILURE, f, f.image_digest, ids)


def _reach_rollouts(f: Finding, ev: Evidence, after: datetime | None) -> _Reach:
    """The first environment-caused failing rollout of the digest after ``after``: of the
    digest the health model named, else the probes' own, else the most failing one."""
    hours = [h for h in ev.facts.failing_hours
             if (after is None or h.first_at > after) and h.first_at <= f.decided]
    digest = f.image_digest
    named = sorted({h.image_digest for h in hours if h.image_digest})
    if digest is None and named:
        digest = f.env_digest if f.env_digest in named else max(named, key=lambda d: sum(
            h.failures for h in hours if h.image_digest == d))
    starts = [h.first_at for h in hours if digest is None or h.image_digest in (digest, None)]
    said = f.first_failure_at
    if said is not None and (after is None or said > after) and said <= f.decided:
        starts.append(said)
    return _Reach(min(starts, default=f.decided), Basis.FIRST_FAILING_ROLLOUTS, f,
                  digest or f.env_digest, ())


# --- intervals -------------------------------------------------------------------------------

_BASIS_ORDER = {Basis.IDENTITY: 0, Basis.FIRST_FAILURE: 1, Basis.FIRST_FAILING_ROLLOUTS: 2,
                Basis.MANUAL: 3}


def _stretch_intervals(facts: EnvTaintFacts, stretch: Stretch, ev: Evidence,
                       after: datetime | None) -> list[TaintInterval]:
    """One interval per image digest the stretch's findings are about: from the finding that
    reaches back furthest, to the stretch's end or the next digest."""
    findings = [f for t in stretch.changes for f in change_findings(t, ev)]
    if stretch.current and facts.state is not None:
        findings += current_findings(facts.state, ev, stretch)
    by_digest: dict[str | None, list[_Reach]] = {}
    for reach in (_reach(f, ev, after) for f in findings):
        by_digest.setdefault(reach.image_digest, []).append(reach)
    out = []
    for digest, reaches in by_digest.items():
        lead = min(reaches, key=lambda r: (r.start, _BASIS_ORDER[r.basis]))
        flagged = min(r.finding.decided for r in reaches)
        end = stretch.closed
        new = ev.new_digest_at(digest, flagged) if digest is not None else None
        if new is not None and (end is None or new < end):
            end = new
        if end is not None and end <= lead.start:
            continue
        evidence = sorted({i for r in reaches for i in r.evidence})[:EVIDENCE_SHOWN]
        out.append(TaintInterval(facts.env_id, facts.suite, lead.start, end, digest,
                                 lead.finding.kind, lead.finding.reason, lead.basis, flagged,
                                 tuple(evidence)))
    return out


def _manual_intervals(facts: EnvTaintFacts, walk: Record) -> list[TaintInterval]:
    periods = list(walk.manual)
    state = facts.state
    if state is not None and state.quarantined and state.q_source == str(Source.MANUAL) \
            and state.q_since is not None and not any(end is None for _, end in periods):
        # quarantined by hand with no transition to show it: from when the state says
        periods.append((Transition(
            id=0, env_id=facts.env_id, at=state.q_since, old_state=state.state,
            new_state=state.state, was_quarantined=True, quarantined=True, actor="",
            reason=state.q_reason or "", evidence=list(state.q_evidence),
            image_digest=state.image_digest), None))
    return [TaintInterval(facts.env_id, facts.suite, t.at, end, t.image_digest, None, t.reason,
                          Basis.MANUAL, t.at, tuple(t.evidence)) for t, end in periods]


def taint_intervals(facts: EnvTaintFacts) -> list[TaintInterval]:
    """Every tainted interval of one environment, oldest first."""
    ev = Evidence(facts)
    walk = read_record(facts.transitions)
    stretches, state = walk.stretches, facts.state
    untrusted = state is not None and not walk.retired and untrusted_now(state)
    last = stretches[-1] if stretches else None
    if last is not None and last.closed is None:
        if untrusted:
            last.current = True
        elif state is not None:  # trusted again with no transition (a degraded reason changed)
            last.closed = state.updated_at
    elif untrusted:
        stretches.append(Stretch(None, current=True))
    out: list[TaintInterval] = []
    after: datetime | None = None
    for stretch in stretches:
        out += _stretch_intervals(facts, stretch, ev, after)
        after = stretch.closed
    out += _manual_intervals(facts, walk)
    return sorted(out, key=lambda i: (i.start, i.flagged_at, _BASIS_ORDER[i.basis]))
