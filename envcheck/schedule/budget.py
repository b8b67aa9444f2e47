"""A budget of sandbox-seconds per hour, for the fleet and per suite, and what a probe is
worth when the budget cannot pay for every one. Bookkeeping only, no threads, no lock and no
clock of its own: the scheduler calls it holding its lock, with the time; the adaptive bench
calls the same code.

**Spend** is what probes took (a probe's duration: its runs use one sandbox at a time),
over the last hour, sliding; work running now counts with its estimate until its result is
charged. Work is **affordable** when the spend plus its estimate stays within every budget
that applies (the fleet's, its suite's); when nothing of a scope is spent or running, any
work is, so one probe dearer than a whole hour's budget still runs, alone.

**Worth** (lower first): urgent work first (a probe the training run's rollouts asked for:
an environment they flagged anew, quarantined or not; the budget does not hold it back), then
work for an environment that is new (never checked, or defined anew by a catalogue reload: a
new image or spec is evidence nobody has), then stale (no result for two intervals), then
suspect (degraded, flaky, broken), then the rest, quarantined last. The
scheduler's queue orders by it, so a tight budget goes to the work worth most, and the rest
waits (deferred, counted, and re-ranked each time the budget frees: work that waited long
enough becomes stale and rises).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["NEW", "NORMAL", "QUARANTINED", "STALE", "SUSPECT", "URGENT", "WINDOW_S", "Budget",
           "BudgetLimits", "BudgetLine", "worth"]

URGENT, NEW, STALE, SUSPECT, NORMAL, QUARANTINED = range(-1, 5)
WINDOW_S = 3600.0  # the budget is per hour, over the last hour


def worth(*, new: bool, stale: bool, suspect: bool, quarantined: bool,
          urgent: bool = False) -> int:
    """The priority of an environment's next probe (lower runs first)."""
    if urgent:
        return URGENT
    if quarantined:
        return QUARANTINED
    if new:
        return NEW
    if stale:
        return STALE
    return SUSPECT if suspect else NORMAL


@dataclass(frozen=True, slots=True)
class BudgetLimits:
    """Sandbox-seconds per hour: ``fleet`` for all the work, ``suites`` per suite (None and
    absent: no limit)."""

    fleet: float | None = None
    suites: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in (("fleet", self.fleet), *self.suites.items()):
            if value is not None and not value > 0:
                raise ValueError(f"budget of {name}: {value:g} sandbox-seconds per hour; "
                                 f"give a number above 0")

    @property
    def limited(self) -> bool:
        return self.fleet is not None or bool(self.suites)


_FLEET = ""  # the scope key of the whole fleet


@dataclass(frozen=True, slots=True)
class BudgetLine:
    """What the metrics show of one scope: the fleet (``suite`` None) or a suite."""

    suite: str | None
    limit_s: float | None  # sandbox-seconds per hour; None: no budget
    spent_s: float  # over the last hour
    backlog: int  # work waiting for the budget now


class Budget:
    def __init__(self, limits: BudgetLimits) -> None:
        self.limits = limits
        self._spent: deque[tuple[float, str, float]] = deque()  # (at, suite, seconds)
        self._window: dict[str, float] = {}  # scope -> spent within the window
        self._running: dict[str, float] = {}  # scope -> estimates of work running now
        self.total_s = 0.0  # every sandbox-second charged since start

    def _slide(self, now: float) -> None:
        while self._spent and self._spent[0][0] <= now - WINDOW_S:
            _, suite, seconds = self._spent.popleft()
            for scope in (_FLEET, suite):
                left = self._window.get(scope, 0.0) - seconds
                self._window[scope] = max(left, 0.0)

    def _used(self, scope: str) -> float:
        return self._window.get(scope, 0.0) + self._running.get(scope, 0.0)

    def spent(self, now: float, suite: str | None = None) -> float:
        """Sandbox-seconds charged over the last hour (the fleet's, or ``suite``'s)."""
        self._slide(now)
        return self._window.get(_FLEET if suite is None else suite, 0.0)

    def affordable(self, suite: str, estimate_s: float, now: float) -> bool:
        self._slide(now)
        for scope, limit in ((_FLEET, self.limits.fleet), (suite, self.limits.suites.get(suite))):
            used = self._used(scope)
            if limit is not None and used > 0 and used + estimate_s > limit:
                return False
        return True

    def start(self, suite: str, estimate_s: float) -> None:
        """Work of ``suite`` starts: its estimate counts until :meth:`end`."""
        for scope in (_FLEET, suite):
            self._running[scope] = self._running.get(scope, 0.0) + estimate_s

    def end(self, suite: str, estimate_s: float) -> None:
        for scope in (_FLEET, suite):
            left = self._running.get(scope, 0.0) - estimate_s
            self._running[scope] = max(left, 0.0)

    def lines(self, now: float, backlog: Mapping[str, int]) -> tuple[BudgetLine, ...]:
        """The fleet's line, then one per suite with a budget; ``backlog``: deferred work
        per suite."""
        fleet = BudgetLine(None, self.limits.fleet, self.spent(now), sum(backlog.values()))
        return (fleet, *(BudgetLine(suite, limit, self.spent(now, suite), backlog.get(suite, 0))
                         for suite, limit in sorted(self.limits.suites.items())))

    def charge(self, suite: str, seconds: float, now: float) -> None:
        """A probe of ``suite`` took ``seconds`` of a sandbox, ending ``now``."""
        seconds = max(seconds, 0.0)
        self._slide(now)
        self._spent.append((now, suite, seconds))
        for scope in (_FLEET, suite):
            self._window[scope] = self._window.get(scope, 0.0) + seconds
        self.total_s += seconds
