"""What the scheduler knows of its fleet, and what follows from it: how often each
(environment, kind) is probed, and what its next probe is worth and is expected to cost.

Read and written holding the scheduler's lock; the quarantine and the environments are
swapped whole, so the job changes read them without it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from envcheck.catalogue.models import Environment
from envcheck.core.depth import Depth, RunCount
from envcheck.core.results import Previous, ProbeKind, ProbeResult, Status
from envcheck.schedule.budget import URGENT, worth
from envcheck.schedule.workqueue import Key

__all__ = ["Ledger"]

# No result for this many intervals: the (environment, kind) counts as stale.
STALE_INTERVALS = 2.0
# What a probe is expected to cost before it ever ran (then: its newest duration).
DEFAULT_ESTIMATE_S = 60.0


def _epoch(at: datetime) -> float:
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


class Ledger:
    def __init__(self, envs: dict[str, Environment]) -> None:
        self.envs = envs
        self.last: Previous = {}
        self.last_at: dict[Key, float] = {}
        self.quarantined: set[str] = set()
        self.suspect: set[str] = set()
        self.generation = -1
        self.cost: dict[Key, float] = {}  # newest duration: the budget's estimate
        self.new: set[Key] = set()  # defined anew by a reload, no result since
        self.urgent: set[Key] = set()  # asked for now, ahead of the queue; not started yet
        # env -> the image digest its newest result found, and that result's start
        self.digests: dict[str, tuple[str, float]] = {}

    def seed(self, outcomes: Iterable[Any]) -> None:
        """The latest outcome of every (environment, kind) in the store, at start."""
        kinds, statuses = {k.value: k for k in ProbeKind}, {s.value: s for s in Status}
        for env_id, kind, status, started_at, digest in outcomes:
            key = (env_id, kinds[kind])  # not ProbeKind(kind): 17,500 enum calls take 0.1 s
            self.last[key] = statuses[status]
            at = self.last_at[key] = _epoch(started_at)
            if digest is not None and at >= self.digests.get(env_id, ("", at))[1]:
                self.digests[env_id] = (digest, at)

    def take_states(self, generation: int, quarantined: set[str], suspect: set[str]
                    ) -> set[str]:
        """The states read from the store at ``generation``; the environments whose
        quarantine changed."""
        changed = quarantined ^ self.quarantined
        self.quarantined, self.suspect = quarantined, suspect
        self.generation = generation
        return changed

    def note(self, result: ProbeResult, before: Previous) -> list[Key]:
        """A result recorded: the status it replaces goes into its window's ``before``. When
        it found another image digest than the environment's newest result did, the
        environment's other kinds, now new work (no evidence for that image): due at once."""
        key = (result.env_id, result.kind)
        if key in self.last and key not in before:
            before[key] = self.last[key]
        self.last[key] = result.status
        at = self.last_at[key] = _epoch(result.started_at)
        if RunCount.of(result.status, result.details).depth is not Depth.REUSED:
            # an identity check costs nothing: the estimate stays what a full probe took
            self.cost[key] = result.duration_s
        self.new.discard(key)
        return self._digest(result, at)

    def _digest(self, result: ProbeResult, at: float) -> list[Key]:
        digest, env = result.image_digest, self.envs.get(result.env_id)
        known = self.digests.get(result.env_id)
        if digest is None or env is None or (known is not None and at < known[1]):
            return []  # no identity found, or a probe that began before the newest
        self.digests[result.env_id] = (digest, at)
        if known is None or known[0] == digest:
            return []
        again = [(env.id, kind) for kind in env.declared_kinds() if kind is not result.kind]
        self.new.update(again)
        return again

    def known(self, env_ids: Iterable[str]) -> list[Environment]:
        """The environments of ``env_ids`` the fleet still has, by id."""
        return [self.envs[e] for e in sorted(env_ids) if e in self.envs]

    def suite(self, env_id: str) -> str:
        env = self.envs.get(env_id)
        return env.suite if env is not None else ""

    def interval(self, env: Environment, kind: ProbeKind) -> float | None:
        return env.schedules.interval(kind, env.id in self.quarantined)

    def priority(self, env_id: str, kind: ProbeKind, now: float) -> int:
        """What the next probe of (env, kind) is worth (:func:`.budget.worth`)."""
        if kind == ProbeKind.IMAGE:
            # a look at a tag is one HEAD and no sandbox: it goes ahead of sandbox work and
            # past the budget, so a moved tag is seen within its interval however long the
            # queue (behind a fresh daemon's backlog it waited minutes)
            return URGENT
        last = self.last_at.get((env_id, kind))
        env = self.envs.get(env_id)
        interval = self.interval(env, kind) if env is not None else None
        stale = last is None or (interval is not None and now - last > STALE_INTERVALS * interval)
        return worth(new=last is None or (env_id, kind) in self.new, stale=stale,
                     suspect=env_id in self.suspect, quarantined=env_id in self.quarantined,
                     urgent=(env_id, kind) in self.urgent)

    def estimate(self, key: Key) -> float:
        return self.cost.get(key, DEFAULT_ESTIMATE_S)
