"""Taint's reading of one environment's record (:mod:`envcheck.health.taint` composes it):
the untrusted stretches of its transitions, a person's quarantines, and the findings each
stretch holds, from the results its transitions cite, the reasons they name, and for the
stretch still open the stored state (its untrusted kinds, the rollouts' flag)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from envcheck.core.states import EnvState
from envcheck.health.quarantine import AUTO_ACTOR, Source
from envcheck.health.sprt import parse_at
from envcheck.health.trust import (
    PROBE_KINDS,
    ROLLOUT_FAILURES,
    ROLLOUTS_KIND,
    UNTRUSTED_REASONS,
    UNTRUSTED_STATES,
    degraded_untrusted,
    kind_reason,
)
from envcheck.store.feed import RETIRED
from envcheck.store.tables.states import Transition
from envcheck.store.views.taint import EnvTaintFacts, StateFact, SuspectResult

__all__ = ["Evidence", "Finding", "Record", "Stretch", "change_findings", "current_findings",
           "read_record"]

_FAILING = frozenset({"fail", "flaky"})


@dataclass(slots=True)
class Stretch:
    """An untrusted stretch of the record: ``opened`` None when no transition opened it (a
    degraded environment's reason changed, which moves no state)."""

    opened: datetime | None
    closed: datetime | None = None
    changes: list[Transition] = field(default_factory=list)
    current: bool = False


@dataclass(frozen=True, slots=True)
class Finding:
    """What a stretch's evidence says of one identity, or of the rollouts."""

    kind: str | None  # a probe kind, ROLLOUTS_KIND, or None: a person's quarantine
    reason: str
    decided: datetime
    image_digest: str | None = None
    spec_hash: str | None = None
    evidence: tuple[int, ...] = ()
    first_failure_at: datetime | None = None  # rollouts: as the health model last said
    env_digest: str | None = None  # the environment's digest when it was decided


@dataclass(slots=True)
class Record:
    """The record read in order: the stretches, and a person's quarantines."""

    stretches: list[Stretch] = field(default_factory=list)
    manual: list[tuple[Transition, datetime | None]] = field(default_factory=list)
    retired: bool = False  # left the catalogue: its stored state is how it left


def read_record(transitions: Sequence[Transition]) -> Record:
    """The untrusted stretches (flaky, broken, quarantined by envcheck, degraded for a reason
    that taints) and a person's quarantines, from the transitions in any order. A person's
    change moves only the quarantine: the health it leaves is the last envcheck said."""
    walk = Record()
    state, code, quarantined, manual = str(EnvState.UNKNOWN), None, False, False
    manual_when_retired = False
    open_stretch: Stretch | None = None
    open_manual: Transition | None = None
    for t in sorted(transitions, key=lambda t: (t.at, t.id or 0)):
        if t.new_state == RETIRED:
            manual_when_retired, state, quarantined, manual = manual, RETIRED, False, False
        elif t.old_state == RETIRED:  # back, as it left
            state, quarantined = t.new_state, t.quarantined
            manual = quarantined and manual_when_retired
            if manual:
                open_manual = t
        elif t.actor == AUTO_ACTOR:
            state, quarantined = t.new_state, t.quarantined
            parsed = kind_reason(t.reason)
            code = parsed[1] if parsed else None
        else:  # a person: quarantine only, the health stays
            if t.quarantined and not manual:
                open_manual, manual = t, True
            quarantined = t.quarantined
        if not quarantined:  # released, or retired: a person's quarantine ends here
            manual = False
            if open_manual is not None:
                walk.manual.append((open_manual, t.at))
                open_manual = None
        untrusted = state in UNTRUSTED_STATES or (quarantined and not manual) or \
            degraded_untrusted(state, code)
        if untrusted:
            if open_stretch is None:
                open_stretch = Stretch(t.at)
                walk.stretches.append(open_stretch)
            open_stretch.changes.append(t)
        elif open_stretch is not None:
            open_stretch.closed, open_stretch = t.at, None
    if open_manual is not None:
        walk.manual.append((open_manual, None))
    walk.retired = state == RETIRED
    return walk


def untrusted_now(state: StateFact) -> bool:
    """Does the stored state say untrusted (beyond a person's quarantine)?"""
    parsed = kind_reason(state.reason)
    return state.state in UNTRUSTED_STATES or \
        (state.quarantined and state.q_source != str(Source.MANUAL)) or \
        degraded_untrusted(state.state, parsed[1] if parsed else None) or \
        bool(_kinds_untrusted(state)) or _rollouts_flagged(state)


def _kinds_untrusted(state: StateFact) -> list[tuple[str, dict[str, Any]]]:
    """The kinds of the stored state that are untrusted on their own."""
    out = []
    for name, doc in state.kinds.items():
        kind_state, reason = str(doc.get("state", "")), str(doc.get("reason", ""))
        if kind_state in UNTRUSTED_STATES or degraded_untrusted(kind_state, reason):
            out.append((name, dict(doc)))
    return out


def _rollouts_flagged(state: StateFact) -> bool:
    parsed = kind_reason(state.reason)
    return (parsed is not None and parsed[1] == ROLLOUT_FAILURES and state.state
            != str(EnvState.HEALTHY)) or bool((state.rollouts or {}).get("flagged"))


# --- what each stretch's evidence says -----------------------------------------------------


class Evidence:
    """One environment's facts, indexed for the lookups findings make."""

    def __init__(self, facts: EnvTaintFacts) -> None:
        self.facts = facts
        self.by_id = {s.id: s for s in facts.suspects}
        firsts: dict[str, datetime] = {}
        seen = [(i.image_digest, i.first_at) for i in facts.identities] + \
            [(f.image_digest, f.first_at) for f in facts.folded] + \
            list(facts.rollout_digests.items())
        for digest, at in seen:
            if digest and (digest not in firsts or at < firsts[digest]):
                firsts[digest] = at
        self.digest_firsts = firsts

    def identity_seen(self, kind: str, digest: str | None, spec: str | None
                      ) -> tuple[datetime | None, datetime | None]:
        """(first appearance, first pass) of an identity (``spec`` None: any spec), from its
        raw results and, unless a raw result of the kind and digest with another spec is
        older (the spec changed there), from the rollups (which keep no spec) and from the
        digest's first result of any kind or first rollout: the image was in use since."""
        raw = [i for i in self.facts.identities if i.kind == kind and i.image_digest == digest]
        mine = [i for i in raw if spec is None or i.spec_hash == spec]
        first = min((i.first_at for i in mine), default=None)
        passes = [i.first_pass_at for i in mine if i.first_pass_at is not None]
        older_spec = spec is not None and first is not None and \
            any(i.spec_hash != spec and i.first_at < first for i in raw)
        if not older_spec:
            for f in self.facts.folded:
                if f.kind == kind and f.image_digest == digest:
                    first = f.first_at if first is None else min(first, f.first_at)
                    passes += [f.first_pass_at] if f.first_pass_at is not None else []
            image = self.digest_firsts.get(digest) if digest else None
            if image is not None and first is not None:
                first = min(first, image)
        return first, min(passes, default=None)

    def first(self, f: Finding, after: datetime | None) -> SuspectResult | None:
        """The finding identity's first failing result (or one with the finding's reason)
        after ``after`` and not after the decision, outside incidents."""
        for s in self.facts.suspects:  # oldest first
            if s.kind == f.kind and s.image_digest == f.image_digest \
                    and (f.spec_hash is None or s.spec_hash == f.spec_hash) \
                    and (after is None or s.started_at > after) and s.started_at <= f.decided \
                    and s.run_id not in self.facts.incident_runs \
                    and (s.status in _FAILING or s.reason == f.reason):
                return s
        return None

    def newest(self, kind: str, reason: str, before: datetime) -> SuspectResult | None:
        found = None
        for s in self.facts.suspects:
            if s.kind == kind and s.reason == reason and s.started_at <= before:
                found = s
        return found

    def new_digest_at(self, digest: str, after: datetime) -> datetime | None:
        """The first result or rollout of a digest other than ``digest`` first seen after
        ``after``."""
        return min((at for d, at in self.digest_firsts.items() if d != digest and at > after),
                   default=None)


def change_findings(t: Transition, ev: Evidence) -> list[Finding]:
    """What one of envcheck's transitions in an untrusted stretch says: the results it cites
    (per identity), and the reason it names when it cites none of that kind."""
    if t.actor != AUTO_ACTOR:
        return []  # a person's quarantine is an interval of its own
    cited: dict[tuple[str, str | None, str], list[SuspectResult]] = {}
    for i in t.evidence:
        if i in ev.by_id:
            s = ev.by_id[i]
            cited.setdefault((s.kind, s.image_digest, s.spec_hash), []).append(s)
    out = [Finding(k, max(rs, key=lambda s: s.started_at).reason, t.at, d, spec,
                    tuple(s.id for s in rs), env_digest=t.image_digest)
           for (k, d, spec), rs in cited.items()]
    parsed = kind_reason(t.reason)
    if parsed is None:
        return out
    kind, code = parsed
    if code == ROLLOUT_FAILURES:
        out.append(Finding(ROLLOUTS_KIND, code, t.at, env_digest=t.image_digest))
    elif kind in PROBE_KINDS and not any(k == kind for k, _, _ in cited) and (
            code in UNTRUSTED_REASONS or t.new_state in UNTRUSTED_STATES):
        found = ev.newest(kind, code, t.at)
        out.append(Finding(kind, code, t.at, found.image_digest if found else t.image_digest,
                            found.spec_hash if found else None,
                            (found.id,) if found else (), env_digest=t.image_digest))
    return out


def current_findings(state: StateFact, ev: Evidence, stretch: Stretch) -> list[Finding]:
    """What the stored state says of the stretch still open: its untrusted kinds and the
    rollouts' flag."""
    out: list[Finding] = []
    for name, doc in _kinds_untrusted(state):
        if name == ROLLOUTS_KIND or name not in PROBE_KINDS:
            continue
        digest, spec = doc.get("image_digest"), doc.get("spec_hash")
        mine = [s for s in ev.facts.suspects if s.kind == name and s.image_digest == digest
                and (spec is None or s.spec_hash == spec)]
        # not before the stretch opened: a kind that went bad later is decided no sooner
        # than its newest suspect result shows
        decided = max((x for x in (mine[-1].started_at if mine else None, stretch.opened)
                       if x is not None), default=state.updated_at)
        if decided is not None:
            cited = tuple(i for i in state.q_evidence if i in ev.by_id
                          and ev.by_id[i].kind == name)
            out.append(Finding(name, str(doc.get("reason", "")), decided, digest, spec,
                               cited, env_digest=state.image_digest))
    if _rollouts_flagged(state) or any(name == ROLLOUTS_KIND for name, _ in
                                       _kinds_untrusted(state)):
        said = state.rollouts or {}
        decided = stretch.opened or parse_at(said.get("flagged_at")) or state.updated_at
        if decided is not None:
            out.append(Finding(ROLLOUTS_KIND, ROLLOUT_FAILURES, decided,
                               said.get("image_digest"), None, (),
                               parse_at(said.get("first_failure_at")), state.image_digest))
    return out
