"""The training run's rollouts as the health model reads them: hourly counter rows
(``rollout_rollup``'s, or made by hand: :class:`HourCounts`), the failures and passes they
hold (the environment's outcomes fail, ``ok`` passes, the trainer's are neither), the
fleet's rate beside them, and the distribution of their rewards. Pure."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from envcheck.core.rollouts import ENVIRONMENT_OUTCOMES, Outcome

__all__ = ["FAILING", "CounterRow", "HourCounts", "RewardStats", "fleet_rate", "judged"]

FAILING = frozenset(str(o) for o in ENVIRONMENT_OUTCOMES)  # the environment's outcomes
_OK = str(Outcome.OK)


class CounterRow(Protocol):
    """One ``rollout_rollup`` row, as the health model reads it."""

    @property
    def hour(self) -> datetime: ...
    @property
    def image_digest(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def count(self) -> int: ...
    @property
    def reward_n(self) -> int: ...
    @property
    def reward_sum(self) -> float: ...
    @property
    def reward_sq(self) -> float: ...
    @property
    def reward_zero(self) -> int: ...
    @property
    def reward_one(self) -> int: ...
    @property
    def first_at(self) -> datetime: ...
    @property
    def last_at(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class HourCounts:
    """A counter row made by hand (a simulation's, a test's): one hour, one outcome."""

    hour: datetime
    outcome: str
    count: int
    first_at: datetime
    last_at: datetime
    image_digest: str = ""
    reward_n: int = 0
    reward_sum: float = 0.0
    reward_sq: float = 0.0
    reward_zero: int = 0
    reward_one: int = 0

    @classmethod
    def of(cls, hour: datetime, outcome: str, count: int, image_digest: str = "",
           rewards: Sequence[float] = ()) -> HourCounts:
        """``count`` rollouts over the whole hour, with these rewards."""
        return cls(hour, outcome, count, hour, hour + timedelta(minutes=59), image_digest,
                   len(rewards), sum(rewards), sum(v * v for v in rewards),
                   sum(v == 0 for v in rewards), sum(v == 1 for v in rewards))


@dataclass(frozen=True, slots=True)
class RewardStats:
    n: int
    mean: float
    std: float
    zero_share: float
    one_share: float

    @classmethod
    def of(cls, rows: Iterable[CounterRow]) -> RewardStats | None:
        """Of the rows' rewards (None: no reward)."""
        n = total = squares = zero = one = 0.0
        for r in rows:
            n, total, squares = n + r.reward_n, total + r.reward_sum, squares + r.reward_sq
            zero, one = zero + r.reward_zero, one + r.reward_one
        if not n:
            return None
        mean = total / n
        return cls(int(n), mean, math.sqrt(max(squares / n - mean * mean, 0.0)), zero / n,
                   one / n)

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "mean": round(self.mean, 6), "std": round(self.std, 6),
                "zero_share": round(self.zero_share, 6), "one_share": round(self.one_share, 6)}


def judged(rows: Iterable[CounterRow]) -> tuple[int, int]:
    """(environment failures, passes) of the rows."""
    failures = passes = 0
    for r in rows:
        if r.outcome in FAILING:
            failures += r.count
        elif r.outcome == _OK:
            passes += r.count
    return failures, passes


def fleet_rate(totals: Iterable[tuple[datetime, str, int]], own: Iterable[CounterRow],
               minimum: int) -> float | None:
    """The fleet's environment-failure rate over ``totals`` ((hour, outcome, count) of every
    environment), ``own`` rows left out; None over fewer than ``minimum`` failures and passes."""
    failures = passes = 0
    for _, outcome, count in totals:
        if outcome in FAILING:
            failures += count
        elif outcome == _OK:
            passes += count
    mine = judged(own)
    failures, passes = failures - mine[0], passes - mine[1]
    if failures + passes < max(minimum, 1):
        return None
    return max(failures, 0) / (failures + passes)
