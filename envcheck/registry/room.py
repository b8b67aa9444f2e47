"""The room a pull takes in the image cache: reserved before the pull, in its intent in the
ledger, so that the pulls under way in this process and in every other process sharing the
engine (a Ray node's worker processes) never share one room; given back when it ends; and the
cache brought back under its budget once the pull shows what it took.

- **Before** (:meth:`PullRoom.reserve`): under the cache's lock across processes, the room the
  pulls under way reserved is counted beside the engine's usage; the cache evicts for the
  pull what it may. A probe's own pull that finds no room waits for the pulls under way
  (within its deadline: what they bring in makes older pulls evictable), then takes room from
  the images pulled ahead for later probes (the latest due first, this process's own, then
  the ledger's holds of any process): a probe due now goes before a prefetch. A prefetch that
  finds none gives up at once. One whose estimate does not fit but whose compressed bytes do
  goes ahead, its room clipped to what is left. The estimate (``sizes.ManifestSizes``): its
  manifest's compressed bytes, twice over (``EXPANSION``), less the layers the engine holds
  and those another pull under way in this process counted already (a shared base is
  downloaded once, so its room is reserved once: by the first pull to ask).
- **During** (:meth:`PullRoom.pull`): a disk that fills mid-pull has room made, and the pull
  is tried once more.
- **After** (:meth:`PullRoom.trim`): back under the budget, never evicting the image just
  pulled; one that alone passes the whole budget is removed again and refused.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime, timedelta

import docker

from envcheck.core.errors import RegistryFailed
from envcheck.core.results import Reason
from envcheck.registry.cache import ImageCache
from envcheck.registry.pull import Pulled, Puller, PullTarget
from envcheck.registry.usage import footprint

__all__ = ["EXPANSION", "PullRoom", "cache_full"]

log = logging.getLogger("envcheck.registry.room")

# A manifest gives its layers' compressed bytes; on the engine's disk they take about this
# many times more (gzip on filesystem trees). Room is made for the estimate; the refusal of
# an image larger than the whole budget uses the compressed bytes alone (a certain bound).
EXPANSION = 2.0
# an intent reserves its room until its pull's deadline and this much after
_INTENT_GRACE_S = 60.0


class PullRoom:
    """The room of this process's pulls on one engine's cache; thread-safe. ``keep()``: the
    images that must stay (pulled ahead for probes not yet run); ``give_up_ahead()``: one of
    them given up for a probe due now (False when none is left)."""

    def __init__(self, api: docker.APIClient, cache: ImageCache, *,
                 keep: Callable[[], Collection[str]],
                 give_up_ahead: Callable[[], bool]) -> None:
        self._api = api
        self.cache = cache
        self._keep = keep
        self._give_up_ahead = give_up_ahead
        # this process's pulls under way and the room each reserved (the ledger holds every
        # process's): a waiting pull is woken when one of them ends
        self._inflight: dict[PullTarget, int] = {}
        self._lock = threading.Condition()

    def reserve(self, target: PullTarget, need: int, deadline: float, *,
                ahead: bool = False) -> None:
        """Room for ``need`` bytes reserved for ``target``'s pull, written in its intent in
        the ledger (see the module's doc), or ``error image_cache_full``."""
        budget = self.cache.budget_bytes
        ledger = self.cache.ledger
        # past its deadline (and a grace) an intent reserves nothing, whatever its process
        expires = datetime.now(UTC) + timedelta(seconds=max(deadline - time.monotonic(), 0.0)
                                                + _INTENT_GRACE_S)
        if budget is None:
            ledger.begin(target.repository, target.digest, datetime.now(UTC),
                         expires_at=expires)
            return
        with self._lock:  # this process's pulls decide one at a time
            while True:
                with self.cache.decisions():  # and one at a time with the other processes
                    others = ledger.reserved(datetime.now(UTC))
                    _, used = self.cache.room(need + others, keep_ids=self._keep())
                    left = deadline - time.monotonic()
                    waiting = bool(others) and left > 0
                    if (used + others + need <= budget or ahead
                            or (not waiting and not self._give_up_ahead())):
                        self._decide(target, need, budget, used, others, ahead, expires)
                        return
                    mine = sum(self._inflight.values())
                if waiting:  # this process's pulls wake it when they end; another's are not
                    self._lock.wait(min(left, 5.0 if others <= mine else 1.0))

    def _decide(self, target: PullTarget, need: int, budget: int, used: int, others: int,
                ahead: bool, expires: datetime) -> None:
        """Under the cache's lock: the pull's room written with its intent, or refused."""
        floor = int(need / EXPANSION)  # the compressed bytes: what it takes at least
        if used + others + need > budget and (ahead or used + others + floor > budget):
            raise cache_full(target, f"the image cache holds {used} bytes of images in "
                             f"use, pinned or just used, {others} more are being pulled, "
                             f"and {need} more do not fit its {budget} bytes",
                             used_bytes=used, pulling_bytes=others, need_bytes=need,
                             budget_bytes=budget)
        # a probe's pull whose estimate does not fit but whose compressed bytes do goes
        # ahead (some of its layers may be on the engine already: a base): the cache is
        # brought back under its budget once the pull shows what it took
        room = min(need, max(budget - used - others, 0))
        self.cache.ledger.begin(target.repository, target.digest, datetime.now(UTC),
                                reserved_bytes=room, expires_at=expires)
        self._inflight[target] = room

    def pull(self, puller: Puller, target: PullTarget, deadline: float, need: int) -> Pulled:
        """``target`` pulled into its room; a disk that fills mid-pull has room made (``need``
        bytes, one image at least) and the pull tried once more, else ``image_cache_full``."""
        try:
            return puller.pull(target, deadline)
        except RegistryFailed as exc:
            if exc.reason is not Reason.IMAGE_CACHE_FULL:
                raise
            evicted = self.cache.make_room(need, keep_ids=self._keep(), at_least=1)
            log.info("the disk filled mid-pull: room made, trying once more",
                     extra={"image": target.reference, "evicted": len(evicted)})
            if not evicted:
                raise
            return puller.pull(target, deadline)

    def ended(self, target: PullTarget) -> None:
        """``target``'s pull ended (its intent settled in the ledger): on the engine now, or
        not at all; this process's waiting pulls look again."""
        with self._lock:
            self._inflight.pop(target, None)
            self._lock.notify_all()

    def trim(self, target: PullTarget, image_id: str, size: int) -> None:
        """Back under the budget after ``target``'s pull (``image_id``, ``size`` bytes as the
        engine reports it); an image that alone passes the budget is refused."""
        budget = self.cache.budget_bytes
        if budget is None:
            self.cache.look()  # what the cache holds now, for the metrics
            return
        keep = {image_id, *self._keep()}
        with self.cache.decisions():  # room for the pulls still under way, of any process
            self.cache.make_room(self.cache.ledger.reserved(datetime.now(UTC)), keep_ids=keep)
        if size <= budget:  # what it alone takes is at most its size: no look needed
            return
        alone = footprint(self._api, {image_id}, self.cache.layer_cache).usage()
        if alone > budget:
            entry = self.cache.ledger.get(target.repository, target.digest)
            if entry is not None:
                self.cache.evict(entry)
            raise cache_full(target, f"it takes {alone} bytes on the engine's disk, more than "
                             f"the whole image cache ({budget} bytes); removed again",
                             image_bytes=alone, budget_bytes=budget)


def cache_full(target: PullTarget, why: str, **details: object) -> RegistryFailed:
    return RegistryFailed(f"{target.reference} does not fit the image cache: {why}",
                          reason=Reason.IMAGE_CACHE_FULL, registry=target.registry,
                          details={"reference": target.reference, **details})
