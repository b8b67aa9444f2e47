"""From stored results to the feed schedulers read: states, quarantine, allowlists.

One path for every caller (CLI, daemon, API, exports): results are assessed by the pure
health model, combined with the training run's rollout evidence (the daemon's look judges
it anew, :mod:`envcheck.feed.rollouts`; everyone else reads it as last judged), the
quarantine policy decides, and state plus transition are written together. A cycle judged an
infrastructure incident is recorded and moves nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from envcheck.catalogue.models import Environment
from envcheck.core.results import Previous, ProbeResult, Reason, Status
from envcheck.core.states import EnvState
from envcheck.feed.exports import default_export_dir, write_exports
from envcheck.feed.taint import refresh_taint
from envcheck.health.combined import with_rollouts
from envcheck.health.quarantine import QuarantineEntry, Source, Transition, decide, manual
from envcheck.health.rollouts import RolloutHealth
from envcheck.health.sprt import EnvHealth, HealthPolicy, assess_env
from envcheck.store import Store
from envcheck.store.tables.states import EnvStateRow, TransitionRow

HELD_BACK_SHOWN = 50  # failing results an incident names; the count says how many in all

__all__ = [
    "HELD_BACK_SHOWN",
    "CycleOutcome",
    "InfraGuard",
    "LookOutcome",
    "Looks",
    "RolloutJudge",
    "StoreAssessment",
    "assess_cycle",
    "cycle_incident",
    "evaluate",
    "held_back",
    "previous_statuses",
    "set_quarantine_by_id",
    "stored_rollouts",
    "sync_fleet",
]


@dataclass(frozen=True, slots=True)
class InfraGuard:
    """When this share of results that passed last time fail at once, the cause is shared
    infrastructure (engine, disk, registry), not the fleet: record an incident, move nothing."""

    max_failing_fraction: float = 0.5
    min_results: int = 4  # below this a share means nothing


# An environment's rollout evidence judged anew, from its probes' health and the evidence as
# last stored (:meth:`envcheck.feed.rollouts.RolloutLooks.look` hands one in).
RolloutJudge = Callable[[Environment, EnvHealth, RolloutHealth | None], RolloutHealth | None]


def previous_statuses(results: Sequence[ProbeResult]) -> Previous:
    return {(r.env_id, r.kind): r.status for r in results}


def cycle_incident(results: Sequence[ProbeResult], previous: Previous, guard: InfraGuard
                   ) -> tuple[str, int, int, str] | None:
    """(kind, failing, total, detail) when the cycle is an incident, else None.

    Only flips count: an environment already failing before is no sign of a storm, so a
    fleet that is mostly broken is still judged.
    """
    counted = [r for r in results if r.status is not Status.SKIP]
    engine = [r for r in counted if r.reason is Reason.ENGINE_UNREACHABLE]
    if engine:
        return ("engine_unreachable", len(engine), len(counted),
                f"the Docker engine failed during the cycle: {engine[0].summary}")
    was_passing = [r for r in counted if previous.get((r.env_id, r.kind)) is Status.PASS]
    flipped = [r for r in was_passing if r.status in (Status.FAIL, Status.FLAKY, Status.ERROR)]
    if len(was_passing) >= guard.min_results and \
            len(flipped) / len(was_passing) >= guard.max_failing_fraction:
        return ("failure_storm", len(flipped), len(was_passing),
                f"{len(flipped)} of {len(was_passing)} probes that passed before failed at once")
    return None


def held_back(results: Sequence[ProbeResult]) -> tuple[int, list[dict[str, str]]]:
    """What an incident keeps from the health model: how many results, and the failing ones
    (the first :data:`HELD_BACK_SHOWN`), whose environments' states stood still."""
    failing = [r for r in results if r.status in (Status.FAIL, Status.FLAKY, Status.ERROR)]
    return len(results), [{"env_id": r.env_id, "kind": str(r.kind), "status": str(r.status),
                           "reason": str(r.reason)} for r in failing[:HELD_BACK_SHOWN]]


def _entry(row: EnvStateRow | None) -> QuarantineEntry | None:
    if row is None or not row.quarantined or row.q_since is None:
        return None
    return QuarantineEntry(row.env_id, Source(row.q_source or Source.AUTO), row.q_since,
                           row.q_actor or "", row.q_reason or "", tuple(row.q_evidence))


def _entry_values(entry: QuarantineEntry | None) -> dict[str, object]:
    if entry is None:
        return {"quarantined": False, "q_source": None, "q_actor": None, "q_reason": None,
                "q_since": None, "q_evidence": []}
    return {"quarantined": True, "q_source": str(entry.source), "q_actor": entry.actor,
            "q_reason": entry.reason, "q_since": entry.since, "q_evidence": list(entry.evidence)}


def _transition_row(t: Transition, digest: str | None) -> TransitionRow:
    return TransitionRow(env_id=t.env_id, at=t.at, old_state=str(t.old_state),
                         new_state=str(t.new_state), was_quarantined=t.was_quarantined,
                         quarantined=t.quarantined, actor=t.actor, reason=t.reason,
                         evidence=list(t.evidence), image_digest=digest)


def _kinds_json(health: EnvHealth, current: EnvStateRow | None) -> dict[str, object]:
    """The kinds as stored. A full probe older than the model's window of results (identity
    checks fill it: 400 at a 5-minute schedule are 33 hours) is still the newest full probe
    of its identity: its time is carried from the stored state while the identity holds."""
    before = (current.kinds or {}) if current is not None else {}
    kinds: dict[str, object] = {}
    for kind, kind_health in health.kinds.items():
        doc = kind_health.to_json()
        old = before.get(str(kind))
        if (doc["full_at"] is None and isinstance(old, Mapping) and old.get("full_at")
                and (old.get("image_digest"), old.get("spec_hash"))
                == (doc["image_digest"], doc["spec_hash"])):
            doc["full_at"] = old["full_at"]
        kinds[str(kind)] = doc
    return kinds


def stored_rollouts(row: EnvStateRow | None) -> RolloutHealth | None:
    """An environment's rollout evidence as last judged (None: none)."""
    doc = row.rollouts if row is not None else None
    return RolloutHealth.from_json(doc) if isinstance(doc, Mapping) and doc else None


def evaluate(store: Store, envs: Sequence[Environment], policy: HealthPolicy | None = None,
             now: datetime | None = None, judge: RolloutJudge | None = None
             ) -> list[TransitionRow]:
    """Re-assess environments from their stored history; persist what changed. ``judge``:
    their rollout evidence judged anew (else as last stored)."""
    now = now or datetime.now(UTC)
    policy = policy or HealthPolicy()
    incidents = store.incident_runs()
    changed: list[TransitionRow] = []
    for env in envs:
        history = store.observations(env.id)
        probes = assess_env(env.id, env.declared_kinds(), history, policy, incidents)
        current = store.env_state(env.id)
        evidence = stored_rollouts(current)
        if judge is not None:
            evidence = judge(env, probes, evidence)
        health, evidence = with_rollouts(probes, evidence, history, incidents)
        old_state = EnvState(current.state) if current is not None else EnvState.UNKNOWN
        entry, transition = decide(_entry(current), old_state, health, now)
        digest = next((h.identity[0] for h in health.kinds.values() if h.identity), None)
        values: dict[str, object] = {"state": str(health.state), "reason": health.reason,
                                     "image_digest": digest, "kinds": _kinds_json(health, current),
                                     "rollouts": evidence.to_json() if evidence else None,
                                     **_entry_values(entry)}
        row = _transition_row(transition, digest) if transition is not None else None
        store.apply(env.id, env.suite, values, row)
        if row is not None:
            changed.append(row)
    return changed


def set_quarantine_by_id(store: Store, env_id: str, *, add: bool, actor: str, reason: str,
                         now: datetime | None = None) -> TransitionRow | None:
    """A person quarantines or releases an environment (CLI, API). LookupError if unknown."""
    suite = store.environment_suite(env_id)
    if suite is None:
        raise LookupError(env_id)
    current = store.env_state(env_id)
    state = EnvState(current.state) if current is not None else EnvState.UNKNOWN
    entry, transition = manual(env_id, state, _entry(current), add=add, actor=actor,
                               reason=reason, now=now or datetime.now(UTC))
    if transition is None:
        return None
    row = _transition_row(transition, current.image_digest if current else None)
    store.apply(env_id, suite, {"state": str(state), **_entry_values(entry)}, row)
    return row


@dataclass(frozen=True, slots=True)
class CycleOutcome:
    incident: tuple[str, int, int, str] | None
    transitions: list[TransitionRow]


def assess_cycle(store: Store, run_id: str, envs: Sequence[Environment],
                 results: Sequence[ProbeResult], before: Previous,
                 guard: InfraGuard | None = None, policy: HealthPolicy | None = None,
                 export_dir: Path | None = None) -> CycleOutcome:
    """After a cycle (a CLI run or a daemon window): judge it, re-assess, export.

    An incident is recorded first, so the assessment already ignores the cycle's results.
    """
    incident = cycle_incident(results, before, guard or InfraGuard())
    if incident is not None:
        store.record_incident(run_id, *incident, *held_back(results))
    transitions = evaluate(store, envs, policy)
    directory = export_dir or default_export_dir()
    # exports change only with a transition (or a first run); rewriting 10,000-line files
    # every window would cost a second for nothing. Taint can change without one (a new
    # digest closes an interval): its file follows every window, for the window's
    # environments (reading the fleet's whole history each window would cost seconds).
    moved = {r.env_id for r in results} | {t.env_id for t in transitions}
    if not (directory / "quarantine.json").exists():
        write_exports(store, directory)
    elif transitions:
        write_exports(store, directory, taint_of=moved)
    else:
        refresh_taint(store, directory, moved)
    return CycleOutcome(incident, transitions)


def sync_fleet(store: Store, envs: Sequence[Environment], export_dir: Path | None = None,
               now: datetime | None = None) -> list[TransitionRow]:
    """Reinstate the retired environments ``envs`` names, retire the current ones it does
    not; rewrite the exports if anything moved. The transitions, returns first."""
    ids = [e.id for e in envs]
    moved = store.reinstate(ids, now) + store.retire_absent(ids, now)
    if moved:
        write_exports(store, export_dir or default_export_dir(),
                      taint_of={t.env_id for t in moved})
    return moved


@dataclass(frozen=True, slots=True)
class LookOutcome:
    """What one look at the rollouts did (:class:`envcheck.feed.rollouts.RolloutLooks`):
    environments flagged anew (a full probe of each now), noted ``always_solved`` anew
    (their tests probe now), the transitions, the incident, and how many it judged."""

    flagged: tuple[str, ...] = ()
    always_solved: tuple[str, ...] = ()
    transitions: tuple[TransitionRow, ...] = ()
    incident: tuple[str, int, int, str] | None = None
    judged: int = 0


class Looks(Protocol):
    """Looks at the rollouts counted since the last (:class:`envcheck.feed.rollouts.
    RolloutLooks`, which builds on :func:`evaluate`)."""

    def look(self, envs: Mapping[str, Environment]) -> LookOutcome: ...


class StoreAssessment:
    """The scheduler's windows judged by the feed's one rule, against one store: what the
    daemon hands the scheduler (which knows nothing of the feed). With ``looks``, also the
    daemon's looks at the training run's rollouts (:meth:`rollouts`). One judgement at a
    time: the windows' thread and the looks' write the same states."""

    def __init__(self, store: Store, export_dir: Path | None = None,
                 looks: Looks | None = None) -> None:
        self._store, self._export_dir, self._looks = store, export_dir, looks
        self._lock = threading.Lock()

    def window(self, run_id: str, envs: Sequence[Environment], results: Sequence[ProbeResult],
               before: Previous) -> CycleOutcome:
        with self._lock:
            return assess_cycle(self._store, run_id, envs, results, before,
                                export_dir=self._export_dir)

    def catch_up(self, envs: Sequence[Environment]) -> list[TransitionRow]:
        with self._lock:
            return evaluate(self._store, envs)

    def fleet(self, envs: Sequence[Environment]) -> list[TransitionRow]:
        """The daemon's catalogue is the fleet: environments it names again come back, those
        it no longer names retire (each with a transition); the exports follow."""
        with self._lock:
            return sync_fleet(self._store, envs, self._export_dir)

    def rollouts(self, envs: Mapping[str, Environment]) -> LookOutcome | None:
        """A look at the rollouts counted since the last (None: no looks wired in); the
        exports follow its transitions."""
        if self._looks is None:
            return None
        with self._lock:
            outcome = self._looks.look(envs)
            if outcome.transitions:
                write_exports(self._store, self._export_dir or default_export_dir(),
                              taint_of={t.env_id for t in outcome.transitions})
            return outcome
