"""Overload: when the fleet asks for more than the workers (or the budget) give, the schedule
stretches evenly, the oldest evidence goes first, and nothing waits forever.

Bookkeeping only, no threads and no lock of its own: the workers call it holding the
scheduler's lock, with the time; ``bench/overload.py`` drives the same code in virtual time.

- **Rank** (within a priority, lower first): the age of the work's evidence in *its own*
  intervals, oldest first: ``-(now - last result) / interval``; never probed: first. With
  equal intervals that is simply the oldest result first. With unequal ones (terminal every
  5 minutes, tests every 6 hours) work is taken when its evidence is the same number of its
  intervals old, so every (environment, kind) is probed the same factor less often, not the
  short intervals alone (ranking by the last result alone would give every kind the same
  absolute gap; by the time due, the same lateness: both stretch the short intervals most).
  The rank is worked out when the work is queued and at each re-rank, so between two it
  lags by at most ``RERANK_S`` (a tenth of the shortest schedule, 5 minutes, or less).
- **Stretch**: the median, over the recent probes started on schedule, of the time since
  their previous result over their interval in force. The metrics show it; the aging reads
  it. (Ranking by ``last result + stretch x interval`` instead would be a time, fixed
  between re-ranks, but it feeds the measured stretch back into the order: the bench saw it
  swing between 3 and 40.)
- **Re-rank**: a queued work's priority was its worth when it fell due; every ``RERANK_S``
  (at a take, the one moment order matters) the whole queue gets its priority and rank anew
  (:meth:`.workqueue.WorkQueue.rerank`, one pass). The ledger's own rule then ages work:
  what waited past two intervals is stale and rises over suspect and routine work.
- **Aging of the quarantined**: quarantined work ranks last, so under sustained overload it
  would never run. Once its evidence is older than ``AGING`` x stretch of its own (already
  longer) interval, it ranks as stale: it is probed twice as rarely as the rest of the
  fleet at the same stretch, a bounded gap, never starved. Urgent and new work still come
  first (neither is re-ranked down).
- **Backlog**: queued work that has waited longer than its interval (its next due time came
  and was refused: a probe skipped), and the longest wait since due.

The queue itself stays bounded: one work per (environment, kind) (:mod:`.workqueue`).
"""

from __future__ import annotations

from collections import deque

from envcheck.core.numbers import percentile
from envcheck.core.results import ProbeKind
from envcheck.schedule.budget import QUARANTINED, STALE, URGENT
from envcheck.schedule.ledger import Ledger
from envcheck.schedule.workqueue import Work, WorkQueue

__all__ = ["AGING", "RERANK_S", "Backlog", "Overload"]

RERANK_S = 30.0  # how often the queue is ranked anew while work waits
AGING = 2.0  # quarantined work rises once its evidence is this many times the stretch old
SAMPLES = 1000  # recent probes the stretch is measured over


class Backlog:
    """What the metrics show of an overload (the workers copy it into their stats)."""

    __slots__ = ("count", "oldest_wait_s")

    def __init__(self) -> None:
        self.count = 0  # queued work that waited longer than its interval
        self.oldest_wait_s = 0.0  # the longest wait since due of queued work


class Overload:
    def __init__(self, ledger: Ledger, *, ordered: bool = True) -> None:
        self._ledger = ledger
        # ``ordered`` False: ranked by the time due, never re-ranked (the scheduler before
        # this rule, for the bench to compare with)
        self.ordered = ordered
        self.stretches: deque[float] = deque(maxlen=SAMPLES)
        self.stretch = 1.0  # the median of ``stretches``, at least 1
        self.backlog = Backlog()
        self._reranked = float("-inf")

    def _interval(self, env_id: str, kind: ProbeKind) -> float | None:
        env = self._ledger.envs.get(env_id)
        return None if env is None else self._ledger.interval(env, kind)

    def rank(self, env_id: str, kind: ProbeKind, due: float, now: float) -> float:
        """Minus the age of the evidence of (env, kind) in its intervals, at ``now``; 0 when
        it has no interval (asked for by hand, a kind turned off: after the overdue work).
        Not ordered: ``due``."""
        if not self.ordered:
            return due
        last = self._ledger.last_at.get((env_id, kind))
        if last is None:
            return float("-inf")
        interval = self._interval(env_id, kind)
        return -(now - last) / interval if interval else 0.0

    def priority(self, env_id: str, kind: ProbeKind, now: float) -> int:
        """The ledger's worth, with quarantined work aged (see the module's docstring)."""
        priority = self._ledger.priority(env_id, kind, now)
        if priority != QUARANTINED or not self.ordered:
            return priority
        last = self._ledger.last_at.get((env_id, kind))
        interval = self._interval(env_id, kind)
        if last is None or (interval is not None
                            and now - last > AGING * self.stretch * interval):
            return STALE
        return priority

    def started(self, work: Work, now: float) -> None:
        """``work`` starts: a sample of the stretch, if it ran on schedule after a result."""
        if work.priority == URGENT:
            return
        last = self._ledger.last_at.get(work.key)
        interval = self._interval(*work.key)
        if last is not None and interval:
            self.stretches.append(max(now - last, 0.0) / interval)

    def tick(self, queue: WorkQueue, now: float) -> bool:
        """Before a take: the queue ranked anew if ``RERANK_S`` passed; whether it was."""
        if not self.ordered or not queue.queued or now - self._reranked < RERANK_S:
            return False
        self._reranked = now
        self.stretch = max(percentile(list(self.stretches), 0.5), 1.0) if self.stretches \
            else 1.0
        queue.rerank(lambda w: (w.priority if w.priority == URGENT
                                else self.priority(w.env_id, w.kind, now),
                                self.rank(w.env_id, w.kind, w.due, now)))
        self.measure(queue, now)
        return True

    def measure(self, queue: WorkQueue, now: float) -> Backlog:
        """The backlog now (one pass over the queue)."""
        count, oldest = 0, 0.0
        for work in queue.waiting():
            waited = now - work.due
            oldest = max(oldest, waited)
            interval = self._interval(*work.key)
            count += interval is not None and waited > interval
        self.backlog.count, self.backlog.oldest_wait_s = count, oldest
        return self.backlog
