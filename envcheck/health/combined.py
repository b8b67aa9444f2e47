"""An environment's health from its probes and its rollouts together: the state the feed
stores, and what the active probes said of a rollout flag. Pure, as the rest of the model.

- **Probe failures dominate.** A probe kind flaky or broken, or failing since the flag, keeps
  the probes' state and reason, which then add "(rollout failures confirmed here too)"
  (``confirmed: here_too``): the environment is broken here as on the cluster.
- **A flag alone** puts the environment in the evidence's state (``degraded``; ``flaky``, so
  quarantined, where the look quarantines on rollouts) at once, with the reason
  ``rollouts: rollout_failures``.
- **Passes here.** Once every applicable probe kind has a passing result started after the
  flag, the reason says "(fails on the cluster, passes here)" (``confirmed: cluster_only``):
  a node or runtime problem of the cluster, still a reason not to trust its rewards.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from envcheck.core.results import ProbeKind, Reason, Status
from envcheck.core.states import Observation
from envcheck.health.rollouts import CLUSTER_ONLY, HERE_TOO, RolloutHealth
from envcheck.health.sprt import EnvHealth

__all__ = ["FLAGGED_REASON", "with_rollouts"]

FLAGGED_REASON = f"rollouts: {Reason.ROLLOUT_FAILURES}"
CLUSTER_ONLY_NOTE = " (fails on the cluster, passes here)"
HERE_TOO_NOTE = " (rollout failures confirmed here too)"
_COUNTED = (Status.PASS, Status.FAIL, Status.FLAKY)


def with_rollouts(health: EnvHealth, evidence: RolloutHealth | None,
                  history: Iterable[tuple[ProbeKind, Observation]],
                  incidents: frozenset[str] = frozenset()
                  ) -> tuple[EnvHealth, RolloutHealth | None]:
    """``health`` (the probes') with the rollouts' ``evidence``, and the evidence with what
    the probes since its flag confirmed. ``history``: the probes' results, as assessed."""
    if evidence is None:
        return health, None
    if not evidence.flagged:
        return health, replace(evidence, confirmed=None)
    confirmed = _confirmed(health, evidence.flagged_at, history, incidents)
    evidence = replace(evidence, confirmed=confirmed)
    state = max(health.state, evidence.state, key=lambda s: s.severity)
    # Not confirmed here, the probes are at worst degraded: the flag is the news.
    why = (health.reason + HERE_TOO_NOTE if confirmed == HERE_TOO
           else FLAGGED_REASON + (CLUSTER_ONLY_NOTE if confirmed == CLUSTER_ONLY else ""))
    return replace(health, state=state, why=why), evidence


def _confirmed(health: EnvHealth, flagged_at: datetime | None,
               history: Iterable[tuple[ProbeKind, Observation]],
               incidents: frozenset[str]) -> str | None:
    if health.state.bad:
        return HERE_TOO
    if flagged_at is None or not health.kinds:
        return None
    passed: set[ProbeKind] = set()
    for kind, obs in history:
        if kind not in health.kinds or obs.run_id in incidents or obs.status not in _COUNTED \
                or obs.started_at <= flagged_at:
            continue
        if obs.status is not Status.PASS:
            return HERE_TOO
        passed.add(kind)
    return CLUSTER_ONLY if passed == set(health.kinds) else None

