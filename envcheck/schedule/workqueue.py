"""The daemon's queue of due probes: best first, within a bound per image, never twice.

Bookkeeping only, no threads and no lock of its own: the scheduler calls it holding its lock.

- **Order**: by priority (lower first), then by rank (lower first: the caller's, by default
  when the work was due; the scheduler's is when its evidence runs out, :mod:`.overload`),
  then first come. ``rerank`` gives every queued work a new priority and rank at once.
- **Per image**: work whose image already runs ``per_image`` sandboxes is set aside and the
  next best work runs instead, so one busy image never idles a worker; when a sandbox of the
  image ends, its best waiting work goes back into the running.
- **Alone**: a tests probe that plays adversarial controls runs with nothing else of its
  environment (a trick must meet the verifier as the only thing in flight there, and the
  probe's cost is the environment's alone): it waits until the environment's other work
  ends, and the environment's other work waits while it runs or waits.
- **Dedupe**: an (environment, kind) already queued or running is refused; queued work can
  be promoted to a better priority in place (``promote``). So the queue never holds more
  than one work per (environment, kind): however long the overload, its length is bounded
  by the fleet's jobs (``put`` is the only way in, and it checks ``_busy``, which holds
  every key queued or running until ``done`` or a drop).
- **Budget**: work the caller cannot afford now (``take``'s ``afford``) is set aside as
  deferred, still queued (so its next due time is refused too: it is probed less often), and
  goes back, re-ranked, when the caller says the budget has room again (``release_deferred``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from envcheck.catalogue.models import Environment
from envcheck.core.results import ProbeKind

__all__ = ["Key", "Work", "WorkQueue"]

Key = tuple[str, ProbeKind]


@dataclass(order=True, frozen=True)
class Work:
    priority: int
    rank: float  # within a priority, lower first (by default: when it was due)
    seq: int  # first come, first served among equals
    env_id: str = field(compare=False)
    kind: ProbeKind = field(compare=False)
    due: float = field(default=0.0, compare=False)  # wall clock (epoch seconds) when it was due

    @property
    def key(self) -> Key:
        return (self.env_id, self.kind)


class WorkQueue:
    def __init__(self, per_image: int) -> None:
        self._per_image = max(per_image, 1)
        self._pending: list[Work] = []  # a heap
        self._blocked: dict[str, list[Work]] = {}  # image -> heap of work waiting for a slot
        self._running: dict[str, int] = {}  # image -> sandboxes now
        self._busy: set[Key] = set()  # queued or running
        self._active: dict[str, int] = {}  # environment -> its work running now
        self._alone: set[str] = set()  # environments whose running work must be alone
        self._held: dict[str, list[Work]] = {}  # environment -> heap of work waiting for it
        self._deferred: list[Work] = []  # work the budget could not afford, in no order
        self._ever_deferred: set[int] = set()  # seq of queued work deferred at least once
        self._seq = itertools.count()
        self.queued = 0
        self.running = 0
        self.deferred_total = 0  # work deferred at least once, since start

    def __contains__(self, key: Key) -> bool:
        return key in self._busy

    def put(self, priority: int, due: float, env_id: str, kind: ProbeKind,
            rank: float | None = None) -> bool:
        """Queue the work (ranked by ``rank``, or by ``due`` if not given); False if this
        (environment, kind) is already queued or running."""
        if (env_id, kind) in self._busy:
            return False
        self._busy.add((env_id, kind))
        heapq.heappush(self._pending, Work(priority, due if rank is None else rank,
                                           next(self._seq), env_id, kind, due))
        self.queued += 1
        return True

    def promote(self, key: Key, priority: int) -> bool:
        """Queued work of ``key`` (waiting for any reason) now ranks at ``priority`` if that
        is better, and competes again at once; False if it is not queued (running, or
        absent). Rare (urgent work), so a scan of the waiting work."""
        for heap in (self._pending, *self._blocked.values(), *self._held.values(),
                     self._deferred):
            for i, work in enumerate(heap):
                if work.key != key:
                    continue
                if work.priority > priority:
                    heap.pop(i)
                    heapq.heapify(heap)
                    heapq.heappush(self._pending, replace(work, priority=priority))
                    self._drop_empty()
                return True
        return False

    def _drop_empty(self) -> None:
        for waiting in (self._blocked, self._held):
            for name in [k for k, heap in waiting.items() if not heap]:
                del waiting[name]

    @property
    def deferred(self) -> list[Work]:
        """Work waiting for the budget now."""
        return list(self._deferred)

    @property
    def deferred_count(self) -> int:
        return len(self._deferred)

    def waiting(self) -> list[Work]:
        """Every queued work, whatever it waits for, in no order."""
        return [*self._pending, *itertools.chain.from_iterable(self._blocked.values()),
                *itertools.chain.from_iterable(self._held.values()), *self._deferred]

    def rerank(self, rank: Callable[[Work], tuple[int, float]]) -> int:
        """Every queued work gets the (priority, rank) ``rank`` gives it now, and each waiting
        heap is rebuilt (one pass: O(queued)); how many were ranked."""
        def again(heap: list[Work]) -> list[Work]:
            out = [replace(w, priority=p, rank=r) for w in heap for p, r in (rank(w),)]
            heapq.heapify(out)
            return out

        self._pending = again(self._pending)
        self._blocked = {name: again(heap) for name, heap in self._blocked.items()}
        self._held = {name: again(heap) for name, heap in self._held.items()}
        self._deferred = again(self._deferred)
        return self.queued

    def take(self, resolve: Callable[[str], Environment | None],
             afford: Callable[[Work, Environment], bool] | None = None
             ) -> tuple[Work, Environment] | None:
        """The best work whose image has a free slot (and that ``afford`` allows, if given),
        now counted as running; None if there is none. ``resolve`` gives the environment now
        (None: gone, its work is dropped)."""
        while self._pending:
            work = heapq.heappop(self._pending)
            env = resolve(work.env_id)
            if env is None:
                self._busy.discard(work.key)
                self._ever_deferred.discard(work.seq)
                self.queued -= 1
                continue
            alone = _alone(work, env)
            if env.id in self._alone or env.id in self._held or (
                    alone and self._active.get(env.id)):
                heapq.heappush(self._held.setdefault(env.id, []), work)
                continue
            if self._running.get(env.image, 0) >= self._per_image:
                heapq.heappush(self._blocked.setdefault(env.image, []), work)
                continue
            if afford is not None and not afford(work, env):
                self._deferred.append(work)
                if work.seq not in self._ever_deferred:
                    self._ever_deferred.add(work.seq)
                    self.deferred_total += 1
                continue
            self._ever_deferred.discard(work.seq)
            self.queued -= 1
            self.running += 1
            self._running[env.image] = self._running.get(env.image, 0) + 1
            self._active[env.id] = self._active.get(env.id, 0) + 1
            if alone:
                self._alone.add(env.id)
            return work, env
        return None

    def done(self, work: Work, env: Environment) -> None:
        """The work taken for ``env`` ended (whatever its outcome)."""
        self.running -= 1
        self._busy.discard(work.key)
        left = self._running[env.image] - 1
        if left:
            self._running[env.image] = left
        else:
            del self._running[env.image]
        blocked = self._blocked.get(env.image)
        if blocked:  # a slot of this image is free: its best waiting work is next
            heapq.heappush(self._pending, heapq.heappop(blocked))
            if not blocked:
                del self._blocked[env.image]
        active = self._active.pop(env.id) - 1
        if active:
            self._active[env.id] = active
        else:  # the environment is idle: what waited for it competes again
            self._alone.discard(env.id)
            for held in self._held.pop(env.id, []):
                heapq.heappush(self._pending, held)

    def release_deferred(self, rank: Callable[[Work], int]) -> int:
        """Deferred work competes again, ranked anew by ``rank`` (what waited long enough
        may be stale now); how much."""
        released, self._deferred = self._deferred, []
        for work in released:
            heapq.heappush(self._pending, replace(work, priority=rank(work)))
        return len(released)

    def clear(self) -> int:
        """Drop every queued work (running work stays counted); how many were dropped."""
        dropped = self.waiting()
        self._pending.clear()
        self._blocked.clear()
        self._held.clear()
        self._deferred.clear()
        self._ever_deferred.clear()
        for work in dropped:
            self._busy.discard(work.key)
        self.queued = 0
        return len(dropped)


def _alone(work: Work, env: Environment) -> bool:
    """Work that must run with nothing else of its environment."""
    return work.kind is ProbeKind.TESTS and env.adversarial() is not None
