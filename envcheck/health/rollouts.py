"""Rollout evidence: what the training run's rollouts say of one environment, from its hourly
counters (``rollout_rollup`` rows, read as :mod:`envcheck.health.rollout_counts` says). Pure
(no I/O): the feed reads the counters and the stored state and asks here; the result is what
``env_state.rollouts`` keeps (:meth:`RolloutHealth.to_json`), the test's state with it
(:class:`Walk`), so that each look goes on from the last and takes each hour once.

- **Identity**: only the newest image digest counts (the digest of the newest counter row;
  rollouts that named none are a digest of their own); a new digest starts fresh.
- **Whose failure**: the environment's outcomes (:data:`~envcheck.core.rollouts.
  ENVIRONMENT_OUTCOMES`) are failures, ``ok`` a pass; the trainer's (an agent's timeout) are
  neither.
- **The test**: Wald's SPRT on the failure rate, ``p0`` (a healthy environment's) against
  ``p1``, with the error rates ``alpha`` and ``beta`` (:class:`~envcheck.health.sprt.
  HealthPolicy`'s steps and bounds). Hours are taken in time order, each adding its failures'
  and passes' steps at once (the order inside an hour is not kept), and the log-likelihood
  ratio is bounded as :func:`~envcheck.health.sprt.assess_kind` bounds it: at the lower bound
  while unflagged, so a long clean history does not mask new failures; at the upper once
  flagged, so release needs the lower bound, not hours of penance. Nothing is flagged before
  ``min_rollouts`` failures and passes are counted.
- **The fleet**: "well above the fleet's own rate". The fleet's environment-failure rate over
  the same hours, the environment's own rollouts left out, raises ``p0`` when it is higher,
  and ``p1`` to at least ``fleet_factor`` times that: on a cluster whose sandboxes fail 3% of
  the time everywhere, an environment is flagged only well above 3%.
- **Notes**: ``never_solved`` (at least ``notes_after`` rewards, every one 0, while the tests
  probe's oracle passes) and ``always_solved`` (every one 1). Rewards of rollouts that failed
  the environment's way are not counted: their 0 is the failure's, not the policy's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from envcheck.core.results import Reason
from envcheck.core.states import EnvState
from envcheck.health.rollout_counts import (
    FAILING,
    CounterRow,
    HourCounts,
    RewardStats,
    fleet_rate,
    judged,
)
from envcheck.health.sprt import HealthPolicy

__all__ = ["ALWAYS_SOLVED", "CLUSTER_ONLY", "HERE_TOO", "NEVER_SOLVED", "NOTE_DOCS",
           "CounterRow", "HourCounts", "RewardStats", "RolloutHealth", "RolloutPolicy", "Walk",
           "assess_rollouts", "fleet_rate"]

NEVER_SOLVED = "never_solved"
ALWAYS_SOLVED = "always_solved"
NOTE_DOCS = {
    NEVER_SOLVED: "every one of many rewards was 0 while the tests probe's oracle passes: the "
                  "task may be unsolvable for the policy, or its reward never reaches it",
    ALWAYS_SOLVED: "every one of many rewards was 1: the verifier may accept anything (a "
                   "reason to play the adversarial and verifier-strength controls now)",
}
# What the active probes said of a flagged environment (``confirmed``).
HERE_TOO = "here_too"  # a probe fails here too: the environment is broken
CLUSTER_ONLY = "cluster_only"  # every probe kind passed since the flag: a node or runtime issue

P1_MAX = 0.95  # the fleet may raise p1 this far: a test needs p1 < 1
SETTLE = timedelta(hours=1)  # an hour is taken for good this long after it ended


@dataclass(frozen=True, slots=True)
class RolloutPolicy:
    """How rollout evidence is judged; the daemon's ``--rollout-*`` options."""

    p0: float = 0.02  # a healthy environment's failure rate
    p1: float = 0.08  # a failure rate worth flagging
    alpha: float = 0.001  # per test: a fleet of thousands is tested every hour
    beta: float = 0.01
    min_rollouts: int = 30  # failures and passes counted before anything is flagged
    fleet_factor: float = 3.0  # p1 is at least this multiple of the fleet's rate
    window_h: float = 24.0  # hours of counters read
    quarantine: bool = False  # a flagged environment is quarantined (flaky), not degraded
    notes_after: int = 100  # rewards counted before a note is made

    def __post_init__(self) -> None:
        checks = ((0 < self.p0 < self.p1 < 1, f"need 0 < p0 < p1 < 1 (p0 {self.p0:g}, "
                   f"p1 {self.p1:g})"),
                  (0 < self.alpha < 1 and 0 < self.beta < 1, "need 0 < alpha, beta < 1"),
                  (self.min_rollouts >= 1, "need min_rollouts of at least 1"),
                  (self.notes_after >= 1, "need notes_after of at least 1"),
                  (self.fleet_factor > 1, "need fleet_factor above 1"),
                  (0 < self.window_h <= 24 * 366, "need window_h above 0 (a year at most)"))
        problems = [why for ok, why in checks if not ok]
        if problems:
            raise ValueError("; ".join(problems))

    def test(self, fleet: float | None) -> HealthPolicy | None:
        """The SPRT for an environment beside a fleet failing at ``fleet`` (None: unknown);
        None when the fleet fails so often nothing can be well above it."""
        p0 = max(self.p0, fleet or 0.0)
        p1 = min(max(self.p1, self.fleet_factor * p0), P1_MAX)
        if not p0 < p1:
            return None
        return HealthPolicy(p0, p1, self.alpha, self.beta)


@dataclass(frozen=True, slots=True)
class RolloutHealth:
    """An environment's rollout evidence for its newest digest (``env_state.rollouts``)."""

    state: EnvState  # unknown (too few), healthy, degraded or flaky (flagged)
    flagged: bool
    image_digest: str | None
    rollouts: int  # every outcome, the trainer's included
    env_failures: int
    passes: int  # ``ok``
    fleet_rate: float | None
    llr: float
    p0: float | None = None  # the test's rates, after the fleet's (None: no test)
    p1: float | None = None
    flagged_at: datetime | None = None
    first_failure_at: datetime | None = None  # of the failures since the test last stood clean
    window_start: datetime | None = None  # the first hour counted
    notes: tuple[str, ...] = ()
    notes_since: Mapping[str, datetime] = field(default_factory=dict)
    confirmed: str | None = None  # HERE_TOO, CLUSTER_ONLY, None: not yet (or not flagged)
    by_outcome: Mapping[str, int] = field(default_factory=dict)
    reward: RewardStats | None = None
    walk: Walk | None = None  # the test as of the hours settled: where the next look goes on

    @property
    def reason(self) -> str:
        return str(Reason.ROLLOUT_FAILURES if self.flagged else Reason.OK)

    @property
    def failure_rate(self) -> float | None:
        tested = self.env_failures + self.passes
        return self.env_failures / tested if tested else None

    @property
    def detail(self) -> str:
        tested = self.env_failures + self.passes
        if self.state is EnvState.UNKNOWN and not self.flagged:
            return f"{tested} rollouts judged: too few to judge"
        rate = f"{self.env_failures / tested:.1%}" if tested else "-"
        fleet = f", the fleet {self.fleet_rate:.1%}" if self.fleet_rate is not None else ""
        failed = ", ".join(f"{o} {n}" for o, n in sorted(self.by_outcome.items())
                           if o in FAILING and n)
        text = (f"{self.env_failures} of {tested} rollouts failed the environment's way "
                f"({rate}{fleet})" + (f": {failed}" if failed else ""))
        if self.flagged and self.first_failure_at is not None:
            text += f"; failing since {self.first_failure_at.isoformat(timespec='minutes')}"
        return text

    def to_json(self) -> dict[str, Any]:
        rate = self.failure_rate
        return {
            "state": str(self.state), "flagged": self.flagged, "reason": self.reason,
            "detail": self.detail, "image_digest": self.image_digest, "rollouts": self.rollouts,
            "env_failures": self.env_failures, "passes": self.passes,
            "failure_rate": round(rate, 6) if rate is not None else None,
            "fleet_rate": round(self.fleet_rate, 6) if self.fleet_rate is not None else None,
            "llr": round(self.llr, 4), "p0": _round(self.p0), "p1": _round(self.p1),
            "flagged_at": _iso(self.flagged_at), "first_failure_at": _iso(self.first_failure_at),
            "window_start": _iso(self.window_start), "notes": list(self.notes),
            "notes_since": {k: v.isoformat() for k, v in self.notes_since.items()},
            "confirmed": self.confirmed, "by_outcome": dict(self.by_outcome),
            "reward": self.reward.to_json() if self.reward is not None else None,
            "walk": self.walk.to_json() if self.walk is not None else None}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RolloutHealth:
        """Back from :meth:`to_json` (what the last assessment stored)."""
        reward, walk = doc.get("reward"), doc.get("walk")
        return cls(
            EnvState(doc.get("state", "unknown")), bool(doc.get("flagged")),
            doc.get("image_digest"), int(doc.get("rollouts") or 0),
            int(doc.get("env_failures") or 0), int(doc.get("passes") or 0),
            doc.get("fleet_rate"), float(doc.get("llr") or 0.0), doc.get("p0"), doc.get("p1"),
            _at(doc.get("flagged_at")), _at(doc.get("first_failure_at")),
            _at(doc.get("window_start")), tuple(doc.get("notes") or ()),
            {k: at for k, v in (doc.get("notes_since") or {}).items()
             if (at := _at(v)) is not None},
            doc.get("confirmed"), dict(doc.get("by_outcome") or {}),
            RewardStats(**reward) if isinstance(reward, Mapping) else None,
            Walk.from_json(walk) if isinstance(walk, Mapping) else None)


def _round(value: float | None) -> float | None:
    return round(value, 6) if value is not None else None


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def _at(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Walk:
    """The bounded SPRT's state after the hours it has taken (``through``, the last): what a
    look carries to the next, so each hour counts once however many looks read it."""

    llr: float = 0.0
    flagged: bool = False
    tested: int = 0  # failures and passes taken since the test began
    through: datetime | None = None
    flagged_at: datetime | None = None
    first_failure_at: datetime | None = None  # of the failures since it last stood clean

    def step(self, hour: datetime, rows: Sequence[CounterRow], test: HealthPolicy | None,
             min_rollouts: int) -> Walk:
        """After one more hour's counters (``test`` None: nothing can be judged)."""
        failures, passes = judged(rows)
        first = self.first_failure_at
        if failures and first is None:
            first = min(r.first_at for r in rows if r.outcome in FAILING)
        if test is None:
            return replace(self, through=hour, first_failure_at=first)
        tested = self.tested + failures + passes
        llr = self.llr + failures * test.fail_step + passes * test.pass_step
        flagged, flagged_at = self.flagged, self.flagged_at
        if not flagged and llr >= test.upper and tested >= min_rollouts:
            # decided: a fresh test must now prove the release
            flagged, llr, flagged_at = True, 0.0, max(r.last_at for r in rows)
        elif flagged and llr <= test.lower:
            flagged, llr, flagged_at, first = False, 0.0, None, None
        llr = min(llr, test.upper) if flagged else max(llr, test.lower)
        if not flagged and llr <= test.lower:
            first = None  # the test stands clean: earlier failures are past
        return Walk(llr, flagged, tested, hour, flagged_at, first)

    def to_json(self) -> dict[str, Any]:
        return {"llr": round(self.llr, 6), "flagged": self.flagged, "tested": self.tested,
                "through": _iso(self.through), "flagged_at": _iso(self.flagged_at),
                "first_failure_at": _iso(self.first_failure_at)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Walk:
        return cls(float(doc.get("llr") or 0.0), bool(doc.get("flagged")),
                   int(doc.get("tested") or 0), _at(doc.get("through")),
                   _at(doc.get("flagged_at")), _at(doc.get("first_failure_at")))


def assess_rollouts(rows: Iterable[CounterRow], policy: RolloutPolicy, *,
                    fleet: float | None, now: datetime, previous: RolloutHealth | None = None,
                    oracle_passes: bool = False) -> RolloutHealth | None:
    """An environment's rollout evidence from its counter rows over the window (any order;
    held hours already left out); None without a row. ``fleet``: the rest of the fleet's
    rate; ``previous``: what the last assessment said (its test goes on from the hours it
    settled; a flag keeps its start, a note its first time); ``oracle_passes``: the tests
    probe's oracle passes (for ``never_solved``).

    Hours settle an hour after they end (a batch may come late): the test takes a settled
    hour once, into the state carried to the next look; the hours after it are walked on
    top of that state, anew at every look, and only they can change with a late batch."""
    rows = list(rows)
    if not rows:
        return None
    newest = max(rows, key=lambda r: (r.last_at, r.hour))
    digest = newest.image_digest
    current = sorted((r for r in rows if r.image_digest == digest), key=lambda r: r.hour)
    by_hour: dict[datetime, list[CounterRow]] = {}
    for r in current:
        by_hour.setdefault(r.hour, []).append(r)
    same = previous is not None and previous.image_digest == (digest or None)
    test = policy.test(fleet)
    settled_before = now.replace(minute=0, second=0, microsecond=0) - SETTLE
    carried = previous.walk if same and previous is not None and previous.walk else Walk()
    walk = settled = carried
    for hour, hour_rows in by_hour.items():
        if carried.through is not None and hour <= carried.through:
            continue  # taken by an earlier look
        walk = walk.step(hour, hour_rows, test, policy.min_rollouts)
        if hour < settled_before:
            settled = walk
    failures, passes = judged(current)
    by_outcome: dict[str, int] = {}
    for r in current:
        by_outcome[r.outcome] = by_outcome.get(r.outcome, 0) + r.count
    if walk.flagged and same and previous is not None and previous.flagged:
        # the flag stands since it was first raised, however the current hour grows
        since = previous.flagged_at or walk.flagged_at
        first = previous.first_failure_at or walk.first_failure_at
        walk = replace(walk, flagged_at=since, first_failure_at=first)
        if settled.flagged:
            settled = replace(settled, flagged_at=since, first_failure_at=first)
    trusted = RewardStats.of(r for r in current if r.outcome not in FAILING)
    notes = _notes(trusted, policy, oracle_passes)
    noted = previous.notes_since if same and previous is not None else {}
    if walk.flagged:
        state = EnvState.FLAKY if policy.quarantine else EnvState.DEGRADED
    else:
        state = EnvState.HEALTHY if failures + passes >= policy.min_rollouts else EnvState.UNKNOWN
    return RolloutHealth(
        state, walk.flagged, digest or None, sum(by_outcome.values()), failures, passes, fleet,
        walk.llr, test.p0 if test else None, test.p1 if test else None, walk.flagged_at,
        walk.first_failure_at, current[0].hour, notes, {n: noted.get(n, now) for n in notes},
        None, by_outcome, trusted, settled)


def _notes(reward: RewardStats | None, policy: RolloutPolicy, oracle_passes: bool
           ) -> tuple[str, ...]:
    if reward is None or reward.n < policy.notes_after:
        return ()
    if reward.zero_share == 1.0 and oracle_passes:
        return (NEVER_SOLVED,)
    if reward.one_share == 1.0:
        return (ALWAYS_SOLVED,)
    return ()
