"""The health model: pure functions from result history to environment state.

Per (environment, probe kind), only evidence for the current identity counts: the image
digest and spec hash of the newest non-error result. A new digest or spec starts fresh.

Decisions come from Wald's sequential probability ratio test (DESIGN.md §7): each failure adds
ln(p1/p0), each pass adds ln((1-p1)/(1-p0)). Crossing the upper bound decides "bad" (2
failures with the defaults); once bad, the test restarts and must cross the lower bound
(about 15 clean passes) before the kind is healthy again. Bad with both outcomes seen is
``flaky``; bad with only failures is ``broken``. ``error`` and ``skip`` results never move
anything, nor do results from cycles recorded as infrastructure incidents.

**Runs, not probes.** A result holds runs (a tests probe's reruns, ``Observation.runs``; one
for other kinds): the counts and the Wilson interval are of runs, and a clean result moves the
test towards healthy by one pass step per run, so a light check (2 runs) weighs 2 and a full
validation (9 runs) 9. Two things stay per result, on purpose: a failing result adds one
failure step (its failed runs share one probe, one host, one hour: one piece of bad news),
and, once bad, recovery counts clean *results* (a quarantine is lifted by clean probes over
time, as before, not by one long probe).

For the depth policy (``health.depth``) a kind also says how long its evidence has been clean:
the runs and the start of the clean streak (since the newest failing result of the identity)
and when the identity last had a full validation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from envcheck.core.results import DEGRADED_REASONS, ProbeKind, Reason, Status
from envcheck.core.states import EnvState, Observation

__all__ = [
    "EnvState",
    "HealthPolicy",
    "KindHealth",
    "Observation",
    "assess_env",
    "assess_kind",
    "parse_at",
    "wilson_interval",
]


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    p0: float = 0.02  # failure rate of a healthy environment
    p1: float = 0.20  # failure rate worth quarantining
    alpha: float = 0.05
    beta: float = 0.05
    # A single ``flaky`` result already holds several disagreeing reruns: decisive on its own.
    flaky_result_decides: bool = True

    def __post_init__(self) -> None:
        if not (0 < self.p0 < self.p1 < 1 and 0 < self.alpha < 1 and 0 < self.beta < 1):
            raise ValueError("need 0 < p0 < p1 < 1 and 0 < alpha, beta < 1")

    @property
    def fail_step(self) -> float:
        return math.log(self.p1 / self.p0)

    @property
    def pass_step(self) -> float:
        return math.log((1 - self.p1) / (1 - self.p0))

    @property
    def upper(self) -> float:
        return math.log((1 - self.beta) / self.alpha)

    @property
    def lower(self) -> float:
        return math.log(self.beta / (1 - self.alpha))


@dataclass(frozen=True, slots=True)
class KindHealth:
    kind: ProbeKind
    state: EnvState
    identity: tuple[str | None, str] | None
    llr: float
    passes: int
    failures: int
    reason: str  # the reason of the newest counted failure, or "ok"
    evidence: tuple[int, ...] = ()  # result ids of the failures that decided
    wilson: tuple[float, float] = (0.0, 1.0)
    clean_runs: int = 0  # runs since the newest failing result of the identity
    clean_since: datetime | None = None  # the first result of that clean streak
    full_at: datetime | None = None  # the newest full validation of the identity

    @property
    def runs(self) -> int:
        return self.passes + self.failures

    @property
    def failure_rate(self) -> float | None:
        return self.failures / self.runs if self.runs else None

    @property
    def image_digest(self) -> str | None:
        return self.identity[0] if self.identity else None

    @property
    def spec_hash(self) -> str | None:
        return self.identity[1] if self.identity else None

    def to_json(self) -> dict[str, Any]:
        """What an environment's stored state keeps of it (``env_state.kinds[kind]``)."""
        return {"state": str(self.state), "reason": self.reason, "passes": self.passes,
                "failures": self.failures, "llr": round(self.llr, 4),
                "wilson": [round(x, 4) for x in self.wilson],
                "image_digest": self.image_digest, "spec_hash": self.spec_hash,
                "clean_runs": self.clean_runs, "clean_since": _iso(self.clean_since),
                "full_at": _iso(self.full_at)}

    @classmethod
    def from_json(cls, kind: str, doc: Mapping[str, Any]) -> KindHealth:
        """Back from :meth:`to_json` (the failures' evidence is not stored)."""
        wilson = doc.get("wilson") or (0.0, 1.0)
        spec = doc.get("spec_hash")
        return cls(ProbeKind(kind), EnvState(doc.get("state", "unknown")),
                   (doc.get("image_digest"), spec) if spec is not None else None,
                   float(doc.get("llr", 0.0)), int(doc.get("passes", 0)),
                   int(doc.get("failures", 0)), str(doc.get("reason", "")),
                   wilson=(float(wilson[0]), float(wilson[1])),
                   clean_runs=int(doc.get("clean_runs") or 0),
                   clean_since=parse_at(doc.get("clean_since")),
                   full_at=parse_at(doc.get("full_at")))


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def parse_at(value: Any) -> datetime | None:
    """A time :meth:`KindHealth.to_json` (or another stored state) wrote; None when absent
    or unreadable (a state stored before)."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def wilson_interval(failures: int, runs: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a failure rate; honest with few runs."""
    if runs <= 0:
        return (0.0, 1.0)
    p = failures / runs
    denom = 1 + z * z / runs
    centre = (p + z * z / (2 * runs)) / denom
    half = z * math.sqrt(p * (1 - p) / runs + z * z / (4 * runs * runs)) / denom
    # exact at the edges, where rounding would put the point estimate outside
    low = 0.0 if failures == 0 else max(0.0, centre - half)
    high = 1.0 if failures == runs else min(1.0, centre + half)
    return (low, high)


def _counted(history: Iterable[Observation], incidents: frozenset[str]) -> list[Observation]:
    return sorted(
        (o for o in history
         if o.status in (Status.PASS, Status.FAIL, Status.FLAKY) and o.run_id not in incidents),
        key=lambda o: (o.started_at, o.result_id or 0),
    )


def assess_kind(kind: ProbeKind, history: Iterable[Observation],
                policy: HealthPolicy = HealthPolicy(),
                incidents: frozenset[str] = frozenset()) -> KindHealth:
    """State of one probe kind of one environment from its whole history (any order)."""
    counted = _counted(history, incidents)
    if not counted:
        return KindHealth(kind, EnvState.UNKNOWN, None, 0.0, 0, 0, str(Reason.OK))
    identity = counted[-1].identity
    current = [o for o in counted if o.identity == identity]
    llr, bad, passes, failures = 0.0, False, 0, 0
    seen_pass = seen_fail = False
    reason, evidence = str(Reason.OK), []
    clean_runs = 0
    clean_since: datetime | None = None
    full_at: datetime | None = None
    for obs in current:
        passed_runs, failed_runs = obs.run_split
        passes += passed_runs
        failures += failed_runs
        if obs.depth is None or obs.depth.whole:
            full_at = obs.started_at
        if obs.status is Status.PASS:
            seen_pass = True
            # runs weigh towards healthy; once bad, clean results do (see the module's doc)
            llr += policy.pass_step * (1 if bad else passed_runs)
            clean_since = clean_since or obs.started_at
            clean_runs += passed_runs
        else:
            seen_fail = True
            clean_runs, clean_since = 0, None
            reason = obs.reason
            if obs.result_id is not None:
                evidence.append(obs.result_id)
            llr += policy.upper if (obs.status is Status.FLAKY and policy.flaky_result_decides) \
                else policy.fail_step
            if obs.status is Status.FLAKY:
                seen_pass = True  # disagreement inside one probe run: both outcomes seen
        if not bad and llr >= policy.upper:
            bad, llr = True, 0.0  # decided; a fresh test must now prove recovery
        elif bad and llr <= policy.lower:
            bad, llr, seen_pass, seen_fail, evidence = False, 0.0, False, False, []
        # Bounded on both sides: a long clean record must not mask new failures, and a long
        # quarantine must not make release take hundreds of passes.
        llr = min(llr, policy.upper) if bad else max(llr, policy.lower)
    newest = current[-1]
    if bad:
        state = EnvState.FLAKY if seen_pass and seen_fail else EnvState.BROKEN
    # A pass that needed help (a retry) is evidence of trouble, not of health.
    elif llr > 0 or newest.status is not Status.PASS or newest.reason in DEGRADED_REASONS:
        state = EnvState.DEGRADED
        if newest.status is Status.PASS and newest.reason in DEGRADED_REASONS:
            reason = newest.reason  # why it is degraded (e.g. reward_hackable), shown as any
    else:
        state = EnvState.HEALTHY
    return KindHealth(kind, state, identity, llr, passes, failures, reason, tuple(evidence[-10:]),
                      wilson_interval(failures, passes + failures), clean_runs, clean_since,
                      full_at)


@dataclass(frozen=True, slots=True)
class EnvHealth:
    env_id: str
    state: EnvState
    kinds: dict[ProbeKind, KindHealth] = field(default_factory=dict)
    # the reason, when evidence beside the probe kinds decided it (the training run's
    # rollouts: :func:`envcheck.health.combined.with_rollouts`); None: the kinds' reason
    why: str | None = None

    @property
    def reason(self) -> str:
        return self.why if self.why is not None else self.probe_reason

    @property
    def probe_reason(self) -> str:
        """Why the probe kinds put it in its state: the worst kind's reason."""
        worst = [k for k in self.kinds.values() if k.state == self.state
                 and (k.failures or k.reason != Reason.OK)]
        if worst:
            return f"{worst[0].kind}: {worst[0].reason}"
        if self.state is EnvState.UNKNOWN:
            todo = [str(k.kind) for k in self.kinds.values() if k.state is EnvState.UNKNOWN]
            return f"not yet validated: {', '.join(todo)}" if todo else "no probe applies"
        return str(Reason.OK)


def assess_env(env_id: str, kinds: Sequence[ProbeKind],
               history: Iterable[Observation | tuple[ProbeKind, Observation]],
               policy: HealthPolicy = HealthPolicy(),
               incidents: frozenset[str] = frozenset()) -> EnvHealth:
    """The environment's state: the worst of its applicable kinds (unknown beats healthy,
    so an environment is healthy only once every kind has been validated)."""
    by_kind: dict[ProbeKind, list[Observation]] = {k: [] for k in kinds}
    for item in history:
        kind, obs = item if isinstance(item, tuple) else (None, item)
        if kind in by_kind:
            by_kind[kind].append(obs)
    assessed = {k: assess_kind(k, obs, policy, incidents) for k, obs in by_kind.items()}
    if not assessed:
        return EnvHealth(env_id, EnvState.UNKNOWN, {})
    state = max((h.state for h in assessed.values()), key=lambda s: s.severity)
    return EnvHealth(env_id, state, assessed)
