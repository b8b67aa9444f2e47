"""The training run's rollouts judged, without waiting for a probe: the daemon's looks.

Each look (every window, on a timer of the daemon's) re-assesses the environments whose
counters a batch changed since the last look (rollouts of the last two hours before it:
``LATE``), and those flagged (so an environment the trainer stopped using leaves its flag once
its digest's rollouts have all left the window), against the fleet's rate over the same
hours (:func:`envcheck.health.rollouts.fleet_rate`: the pooled rate of every other
environment), going on from each one's test as the last look left it, and writes their
states through the feed's one rule (:func:`envcheck.feed.assess.evaluate`).

**Many environments failing at once** is the cluster's failure, not theirs: when, of the
environments the look judges that were fine an hour ago (``STORM_SPAN``), at least
``InfraGuard``'s share (and number) fail the base test (the policy's own rates, not the
fleet's: the fleet's rate rises with a storm) at once, the look records an incident
(``rollout_storm``) and holds the hours of their failures back from the health model, the
fleet's rate included: no state moves. Later hours are judged as usual.

What a look flagged anew, and what it newly noted ``always_solved``, is what it returns: the
daemon probes those environments now, ahead of the queue.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from envcheck.catalogue.models import Environment
from envcheck.core.clock import SYSTEM_CLOCK, Clock
from envcheck.core.results import ProbeKind, Reason
from envcheck.core.rollouts import ENVIRONMENT_OUTCOMES
from envcheck.core.states import EnvState
from envcheck.feed.assess import (
    HELD_BACK_SHOWN,
    InfraGuard,
    LookOutcome,
    evaluate,
    stored_rollouts,
)
from envcheck.health.rollouts import (
    ALWAYS_SOLVED,
    RolloutHealth,
    RolloutPolicy,
    assess_rollouts,
    fleet_rate,
)
from envcheck.health.sprt import EnvHealth, HealthPolicy
from envcheck.store import Store
from envcheck.store.rollout_counts import hour_of

__all__ = ["LATE", "STORM_KIND", "STORM_SPAN", "RolloutLooks", "RolloutView"]

STORM_KIND = "rollout_storm"
# The store finds changed counters by their rollouts' times: a batch this late is still
# judged at the next look (a later one, with the environment's next batch).
LATE = timedelta(hours=2)
# Flags raised within this span of each other count as at once: a storm's batches reach the
# store over several looks.
STORM_SPAN = timedelta(hours=1)
_FAILING = frozenset(str(o) for o in ENVIRONMENT_OUTCOMES)
_IDS_BATCH = 500  # ids per IN list


@dataclass(frozen=True, slots=True)
class RolloutView:
    """The counters one look reads: the rows of the environments it judges and the fleet's
    totals per hour and outcome, both over the window, held hours left out."""

    policy: RolloutPolicy
    now: datetime
    rows: Mapping[str, list[Any]] = field(default_factory=dict)
    totals: list[tuple[datetime, str, int]] = field(default_factory=list)
    held_now: frozenset[datetime] = frozenset()  # held by this look: walks may hold them

    @classmethod
    def read(cls, store: Store, env_ids: Collection[str], policy: RolloutPolicy,
             now: datetime) -> RolloutView:
        since = now - timedelta(hours=policy.window_h)
        held = store.held_rollout_hours(since)
        rows: dict[str, list[Any]] = {}
        for row in store.rollout_rows(sorted(env_ids), since):
            if row.hour not in held:
                rows.setdefault(row.env_id, []).append(row)
        totals = [t for t in store.rollout_totals(since) if t[0] not in held]
        return cls(policy, now, rows, totals)

    def without(self, hours: Collection[datetime]) -> RolloutView:
        return RolloutView(self.policy, self.now,
                           {e: [r for r in rows if r.hour not in hours]
                            for e, rows in self.rows.items()},
                           [t for t in self.totals if t[0] not in hours],
                           self.held_now | frozenset(hours))

    def assess(self, env_id: str, previous: RolloutHealth | None, *,
               oracle_passes: bool = False, beside_fleet: bool = True) -> RolloutHealth | None:
        """``env_id``'s evidence; ``beside_fleet`` False: by the policy's own rates."""
        rows = self.rows.get(env_id, [])
        fleet = fleet_rate(self.totals, rows, self.policy.min_rollouts) if beside_fleet \
            else None
        if previous is not None and previous.walk is not None and any(
                previous.walk.through is not None and hour <= previous.walk.through
                for hour in self.held_now):
            previous = replace(previous, walk=None)  # its test took hours held now: anew
        return assess_rollouts(rows, self.policy, fleet=fleet, now=self.now,
                               previous=previous, oracle_passes=oracle_passes)

    def held_back(self, hours: Collection[datetime]) -> int:
        """Rollouts of the whole fleet in ``hours``."""
        return sum(n for hour, _, n in self.totals if hour in hours)


def _anew(new: RolloutHealth | None, old: RolloutHealth | None) -> tuple[bool, bool]:
    """(flagged anew, noted always_solved anew): not so when last judged, for this digest."""
    if new is None:
        return False, False
    same = old is not None and old.image_digest == new.image_digest
    flagged = new.flagged and not (same and old is not None and old.flagged)
    noted = ALWAYS_SOLVED in new.notes and not (
        same and old is not None and ALWAYS_SOLVED in old.notes)
    return flagged, noted


class RolloutLooks:
    """The daemon's looks at the rollouts; one at a time (the caller serialises them with
    the windows' judgement)."""

    def __init__(self, store: Store, policy: RolloutPolicy | None = None,
                 guard: InfraGuard | None = None, health: HealthPolicy | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._store, self._clock = store, clock
        self.policy = policy or RolloutPolicy()
        self._guard, self._health = guard or InfraGuard(), health
        self._last: datetime | None = None
        self._flagged: set[str] | None = None  # as last judged: re-judged at every look

    def look(self, envs: Mapping[str, Environment]) -> LookOutcome:
        """Judge what changed since the last look (the whole window at the first)."""
        now = self._clock.now()
        since = (self._last - LATE if self._last is not None
                 else now - timedelta(hours=self.policy.window_h))
        changed = self._store.rollout_envs_since(since) & envs.keys()
        if self._flagged is None:
            self._flagged = {row.env_id for row in self._store.env_states()
                             if (found := stored_rollouts(row)) is not None and found.flagged}
        ids = sorted(changed | (self._flagged & envs.keys()))
        if not ids:
            self._last = now
            return LookOutcome()
        view = RolloutView.read(self._store, ids, self.policy, now)
        incident = self._storm(view, sorted(changed | (self._flagged & envs.keys())), now)
        if incident is not None:
            view = view.without(incident[1])
        flagged: list[str] = []
        noted: list[str] = []

        def judge(env: Environment, probes: EnvHealth, old: RolloutHealth | None
                  ) -> RolloutHealth | None:
            tests = probes.kinds.get(ProbeKind.TESTS)
            new = view.assess(env.id, old, oracle_passes=tests is not None
                              and tests.state is EnvState.HEALTHY)
            anew, always = _anew(new, old)
            if anew:
                flagged.append(env.id)
            if always:
                noted.append(env.id)
            assert self._flagged is not None
            if new is not None and new.flagged:
                self._flagged.add(env.id)
            else:
                self._flagged.discard(env.id)
            return new

        transitions = evaluate(self._store, [envs[i] for i in ids], self._health, now, judge)
        # judged: the next look starts here (a batch counted while this one read is seen
        # again then); a look that failed leaves its changes to the next
        self._last = now
        return LookOutcome(tuple(flagged), tuple(noted), tuple(transitions),
                           incident[0] if incident is not None else None, len(ids))

    def _before(self, ids: Sequence[str]) -> dict[str, RolloutHealth | None]:
        """The evidence of ``ids`` as last judged."""
        found: dict[str, RolloutHealth | None] = {}
        for start in range(0, len(ids), _IDS_BATCH):
            for row in self._store.env_states(ids[start:start + _IDS_BATCH]):
                found[row.env_id] = stored_rollouts(row)
        return found

    def _storm(self, view: RolloutView, judged: Sequence[str], now: datetime
               ) -> tuple[tuple[str, int, int, str], set[datetime]] | None:
        """Many of the environments judged (those changed, those flagged) failing at once:
        the incident, recorded, and the hours held back. Those flagged within the storm's
        span count as fine before it: a storm whose batches came over several looks is
        found at the look that completes it, and the flags it raised meanwhile fall."""
        if len(judged) < self._guard.min_results:
            return None
        before = self._before(judged)
        fine = [e for e in judged if (old := before.get(e)) is None or not old.flagged
                or (old.flagged_at is not None and old.flagged_at >= now - STORM_SPAN)]
        if len(fine) < self._guard.min_results:
            return None
        failing = {e: found for e in fine if (found := view.assess(
            e, None, beside_fleet=False)) is not None and found.flagged}
        if len(failing) / len(fine) < self._guard.max_failing_fraction:
            return None
        hours = {row.hour for e, found in failing.items() for row in view.rows[e]
                 if row.outcome in _FAILING and row.count and (
                     found.first_failure_at is None
                     or row.hour >= hour_of(found.first_failure_at))}
        span = f"{min(hours):%Y-%m-%d %H:00}-{max(hours) + timedelta(hours=1):%H:00} UTC"
        incident = (STORM_KIND, len(failing), len(fine),
                    f"{len(failing)} of {len(fine)} environments' rollouts failed at once: "
                    f"the hours {span} are held back")
        shown = [{"env_id": e, "kind": "rollouts", "status": "flagged",
                  "reason": str(Reason.ROLLOUT_FAILURES)}
                 for e in sorted(failing)[:HELD_BACK_SHOWN]]
        run_id = self._store.start_run("rollouts", [])
        incident_id = self._store.record_incident(run_id, *incident, view.held_back(hours),
                                                  shown)
        self._store.hold_rollout_hours(hours, incident_id)
        self._store.finish_run(run_id)
        return incident, hours
