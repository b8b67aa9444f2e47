"""The registry stage's one face to the probes and the scheduler: a local image for a digest.

``LocalImages.ensure(reference, digest, deadline)`` answers with the engine's image id and the
seconds spent pulling (0 when the engine already had it), composing the ledger, the cache and
the puller:

1. the engine holds ``repository@digest`` complete: used as is (touched in the ledger when it
   is envcheck's pull; an image carrying envcheck's cache tag that this ledger lacks is
   adopted now that this stage uses it; someone else's image is used but never recorded or
   evicted);
2. else its size is asked of the registry's manifest when ``sizes`` can tell (less the layers
   held or claimed by another pull under way, until this pull ends): larger than the whole
   budget is ``error image_cache_full`` before any byte moves; room is reserved for it
   (``room.PullRoom``, counting the pulls under way of every process sharing the engine);
3. it is pulled by digest to the deadline (``pull.Puller``); a disk that fills mid-pull makes
   room and tries once more, else ``image_cache_full``;
4. the ledger records it, and the cache is brought back under its budget (never evicting the
   image just pulled; one that alone is larger than the budget is removed again and refused).

``prefetch(targets)`` pulls ahead of the probes that will need the images, bounded by how many
and how many bytes are pulled and not yet used; an image the budget has no room for stops the
prefetch (the probe's own ``ensure`` then says why). An image pulled ahead is held in the
ledger until its probe uses it, whichever process runs that probe (a Ray node's).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Protocol

import docker
import docker.errors
import docker.utils

from envcheck.core.errors import EnvcheckError, RegistryFailed
from envcheck.core.results import Reason
from envcheck.registry.cache import ImageCache, adopt_tagged
from envcheck.registry.engine_failures import engine_calls
from envcheck.registry.ledger import GIVEN_UP, LedgerEntry
from envcheck.registry.pull import Pulled, Puller, PullTarget, holds
from envcheck.registry.room import EXPANSION, PullRoom, cache_full
from envcheck.registry.usage import EngineLayers, footprint

__all__ = ["EXPANSION", "ImageSizes", "LocalImage", "LocalImages"]

log = logging.getLogger("envcheck.registry.images")

_FOREIGN_MAX = 4096


class ImageSizes(Protocol):
    """The compressed bytes of an image's layers a pull will bring, from its registry's
    manifest; None when they cannot be learned (the cache then makes room after the pull
    instead of before). A layer counted for a pull under way is claimed for it until
    ``ended`` (owed once a size was asked, however the pull ends), and left out of the next
    pulls' sizes meanwhile; ``learn``: the layers of an image just pulled."""

    def size(self, target: PullTarget, deadline: float) -> int | None: ...

    def learn(self, target: PullTarget, diff_ids: Sequence[str]) -> None: ...

    def ended(self, target: PullTarget) -> None: ...


@dataclass(frozen=True, slots=True)
class LocalImage:
    image_id: str
    pull_seconds: float  # 0.0 when the engine already held it: apart from the probe's time
    pulled: bool
    downloaded: int = 0
    ahead: bool = False  # pulled ahead for this probe, and held for it in the ledger


class LocalImages:
    def __init__(self, api: docker.APIClient, puller: Puller, cache: ImageCache, *,
                 sizes: ImageSizes | None = None, prefetch_count: int = 4,
                 prefetch_bytes: int | None = None, prefetch_threads: int = 2,
                 prefetch_timeout_s: float = 900.0, prefetch_hold_s: float = 900.0) -> None:
        self._api = api
        self.puller = puller
        self.cache = cache
        self.stats = puller.stats
        self._sizes = sizes
        self._locks: dict[PullTarget, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        # prefetched and not yet used: target -> bytes it holds (its estimate until pulled)
        self._ahead: OrderedDict[PullTarget, int] = OrderedDict()
        self._ahead_since: dict[PullTarget, float] = {}  # monotonic, when it went ahead
        self._ahead_lock = threading.Lock()
        self.prefetch_count = prefetch_count
        self.prefetch_bytes = prefetch_bytes
        self._prefetch_timeout_s = prefetch_timeout_s
        # a prefetched image no probe asked for within this long (its probe reused its
        # evidence, or the environment went) no longer counts as ahead, nor is kept for it
        self.prefetch_hold_s = prefetch_hold_s
        # the room each pull under way reserved (its estimate), in this process and in the
        # others sharing the engine: two pulls at once never share one room
        self.room = PullRoom(api, cache, keep=self._ahead_ids, give_up_ahead=self._drop_last_ahead)
        # told of every image made local (pulled or found), and whether by a prefetch
        self.listeners: list[Callable[[PullTarget, LocalImage, bool], None]] = []
        # which of a manifest's layers a pull would not move (``sizes`` leaves them out)
        if sizes is not None and getattr(sizes, "local_layers", False) is None:
            sizes.local_layers = EngineLayers(api)  # type: ignore[attr-defined]
        # images someone else pulled, found without envcheck's tag: not looked at again
        self._foreign: OrderedDict[PullTarget, None] = OrderedDict()
        self._pool = ThreadPoolExecutor(max(prefetch_threads, 1),
                                        thread_name_prefix="envcheck-prefetch")

    # --- on demand ---------------------------------------------------------------------------
    def ensure(self, reference: str, digest: str | None, deadline: float) -> LocalImage:
        """The engine's image for ``reference`` (a repository, with or without a tag or
        digest) at ``digest`` (taken from ``reference`` when it carries one), pulled if
        missing before ``deadline`` (``time.monotonic()``)."""
        target = _target(reference, digest)
        with self._ahead_lock:
            was_ahead = self._ahead.pop(target, None) is not None  # no longer ahead: used
            self._ahead_since.pop(target, None)
        self.cache.hold(target.repository, target.digest)
        with engine_calls(target.reference):
            local = self._ensure(target, deadline, touch=True)
        if (was_ahead or local.ahead) and not local.pulled:
            self.stats.prefetch_used()
        self._tell(target, local, False)
        return local

    def release(self, target: PullTarget) -> None:
        """The probes that wanted ``target`` are done with it: evictable at once (least
        recently used first), not held for the cache's ``min_age_s``."""
        self.cache.release(target.repository, target.digest)

    def _ensure(self, target: PullTarget, deadline: float, *, touch: bool,
                ahead: bool = False) -> LocalImage:
        found = self._present(target)
        if found is not None:
            self.stats.looked_up(hit=True)
            return self._used(target, found, touch)
        waiting = time.monotonic()
        with self._lock_for(target):  # two probes of one image: one pulls, the other waits
            found = self._present(target)
            if found is not None:  # the other (a prefetch) pulled it: the wait was a pull's
                self.stats.looked_up(hit=True)
                used = self._used(target, found, touch)
                return LocalImage(used.image_id, time.monotonic() - waiting, False)
            if not ahead:
                self.stats.looked_up(hit=False)
            return self._pull(target, deadline, ahead=ahead)

    def _tell(self, target: PullTarget, local: LocalImage, ahead: bool) -> None:
        for listener in list(self.listeners):
            try:
                listener(target, local, ahead)
            except Exception:  # a listener (a progress bar) never fails a pull
                log.exception("an image listener failed")

    def _used(self, target: PullTarget, image_id: str, touch: bool) -> LocalImage:
        ledger = self.cache.ledger
        entry = ledger.get(target.repository, target.digest)
        if entry is not None:
            if touch:  # a hold ends: its probe came (pulled ahead by this process or another)
                ledger.touch(target.repository, target.digest, datetime.now(UTC))
                held = entry.held_until is not None and entry.held_until != GIVEN_UP
                return LocalImage(image_id, 0.0, False, ahead=held)
        elif touch and not self._known_foreign(target):
            # envcheck's tag on it but not in this ledger: adopted now that this stage uses
            # it; an image someone else pulled is used, never recorded nor evicted
            with self.cache.decisions():
                if not adopt_tagged(self._api, ledger, target):
                    self._known_foreign(target, remember=True)
        return LocalImage(image_id, 0.0, False)

    def _known_foreign(self, target: PullTarget, *, remember: bool = False) -> bool:
        """Whether ``target`` was found someone else's (``remember``: it was, just now)."""
        with self._locks_guard:
            if remember:
                self._foreign[target] = None
                while len(self._foreign) > _FOREIGN_MAX:
                    self._foreign.popitem(last=False)
            return target in self._foreign

    def _present(self, target: PullTarget) -> str | None:
        try:
            attrs = self._api.inspect_image(target.reference)
        except docker.errors.NotFound:
            return None
        if not holds(attrs, target):
            return None  # not the complete image under this digest
        return str(attrs["Id"])

    def _lock_for(self, target: PullTarget) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(target, threading.Lock())

    def _pull(self, target: PullTarget, deadline: float, *, ahead: bool = False
              ) -> LocalImage:
        compressed = self._sizes.size(target, deadline) if self._sizes is not None else None
        try:
            pulled, size = self._pull_sized(target, deadline, compressed, ahead)
        finally:  # refused, failed or pulled (its layers learned): its size's claim ends
            self._claim_ended(target)
        if ahead:
            self.stats.prefetched()
        self.room.trim(target, pulled.image_id, size)
        return LocalImage(pulled.image_id, pulled.seconds, True, pulled.downloaded)

    def _claim_ended(self, target: PullTarget, _done: object = None) -> None:
        if self._sizes is not None:
            self._sizes.ended(target)

    def _pull_sized(self, target: PullTarget, deadline: float, compressed: int | None,
                    ahead: bool) -> tuple[Pulled, int]:
        budget = self.cache.budget_bytes
        if compressed is not None and budget is not None and compressed > budget:
            raise cache_full(target, f"its layers alone take {compressed} bytes compressed, "
                              f"more than the whole image cache ({budget} bytes)",
                              image_bytes=compressed, budget_bytes=budget)
        need = int(compressed * EXPANSION) if compressed is not None else 0
        self.room.reserve(target, need, deadline, ahead=ahead)  # the intent, with its room
        ledger = self.cache.ledger
        try:
            try:
                pulled = self.room.pull(self.puller, target, deadline, need)
            except BaseException:
                ledger.abandon(target.repository, target.digest)
                raise
            now = datetime.now(UTC)
            attrs = self._api.inspect_image(pulled.image_id)
            size = int(attrs.get("Size") or 0)
            if self._sizes is not None:
                self._sizes.learn(target, list((attrs.get("RootFS") or {}).get("Layers") or []))
            ledger.record(LedgerEntry(target.repository, target.digest, pulled.image_id, size,
                                      now, now))
        finally:
            self.room.ended(target)
        return pulled, size

    def _drop_last_ahead(self) -> bool:
        """The prefetched image due last no longer counts as ahead, and may be evicted at
        once: this process's own first, else the ledger's latest hold (a prefetch of another
        process sharing the engine); False when none is left."""
        with self._ahead_lock:
            target = self._ahead.popitem(last=True)[0] if self._ahead else None
            if target is not None:
                self._ahead_since.pop(target, None)
        if target is None:
            return self.cache.ledger.unhold_latest(datetime.now(UTC))
        self.cache.release(target.repository, target.digest)
        self.cache.ledger.hold(target.repository, target.digest, GIVEN_UP)
        return True

    # --- ahead of the probes -----------------------------------------------------------------
    def prefetch(self, targets: Iterable[PullTarget | tuple[str, str]]
                 ) -> list[Future[LocalImage | None]]:
        """Pull ahead, in the order given (soonest due first), while fewer than
        ``prefetch_count`` prefetched images wait unused and their bytes stay under
        ``prefetch_bytes``. What is already on the engine or already ahead is skipped."""
        futures: list[Future[LocalImage | None]] = []
        # set when one of these finds no room: the later ones are not pulled before it (the
        # room would go to images due after the one the next probe needs)
        no_room = threading.Event()
        self._expire_ahead()
        for item in targets:
            target = item if isinstance(item, PullTarget) else PullTarget(*item)
            with self._ahead_lock:
                if target in self._ahead:
                    continue
                if len(self._ahead) >= self.prefetch_count:
                    break
                ahead_bytes = sum(self._ahead.values())
            with engine_calls(target.reference):
                if self._present(target) is not None:
                    continue
            deadline = time.monotonic() + self._prefetch_timeout_s
            estimate = self._estimate(target, deadline)  # its claim ends with the prefetch
            if self.prefetch_bytes is not None and ahead_bytes + estimate > self.prefetch_bytes:
                self._claim_ended(target)
                break
            try:
                with self._ahead_lock:
                    self._ahead[target] = estimate
                    self._ahead_since[target] = time.monotonic()
                self.cache.hold(target.repository, target.digest)
                future = self._pool.submit(self._prefetch_one, target, deadline, no_room)
            except BaseException:
                self._claim_ended(target)
                raise
            # run, given up or cancelled at close: the claim ends (again, if it pulled)
            future.add_done_callback(partial(self._claim_ended, target))
            futures.append(future)
        return futures

    def _expire_ahead(self) -> None:
        """Prefetched images no probe asked for within ``prefetch_hold_s`` stop counting."""
        limit = time.monotonic() - self.prefetch_hold_s
        with self._ahead_lock:
            stale = [t for t, since in self._ahead_since.items() if since < limit]
            for target in stale:
                self._ahead.pop(target, None)
                self._ahead_since.pop(target, None)
        for target in stale:
            self.cache.release(target.repository, target.digest)

    def _estimate(self, target: PullTarget, deadline: float) -> int:
        compressed = self._sizes.size(target, deadline) if self._sizes is not None else None
        return int(compressed * EXPANSION) if compressed is not None else 0

    def _prefetch_one(self, target: PullTarget, deadline: float,
                      no_room: threading.Event) -> LocalImage | None:
        with self._ahead_lock:
            if target not in self._ahead:  # its probe came first, or it was given up
                return None
        if no_room.is_set():  # an image due before it found no room: its turn comes again
            self._not_ahead(target)
            return None
        try:
            with engine_calls(target.reference):
                local = self._ensure(target, deadline, touch=False, ahead=True)
        except EnvcheckError as exc:  # the probe's own ensure reports it; here it is a note
            if isinstance(exc, RegistryFailed) and exc.reason is Reason.IMAGE_CACHE_FULL:
                no_room.set()
            self._not_ahead(target)
            self.stats.prefetched(failed=True)
            log.info("prefetch failed", extra={"image": target.reference, "error": str(exc)})
            return None
        with self._ahead_lock:
            held = target in self._ahead
        if held:  # what it holds now, in place of the estimate
            unique = self._unique_bytes(local.image_id)
            with self._ahead_lock:
                if target in self._ahead:
                    self._ahead[target] = unique
        if held and local.pulled:  # kept for its probe, whichever process runs it
            until = datetime.now(UTC) + timedelta(seconds=self.prefetch_hold_s)
            self.cache.ledger.hold(target.repository, target.digest, until)
        self._tell(target, local, True)
        return local

    def _not_ahead(self, target: PullTarget) -> None:
        """A prefetch given up: no longer ahead, nor kept for its probe (unless the probe
        has taken it over meanwhile)."""
        with self._ahead_lock:
            was = self._ahead.pop(target, None) is not None
            self._ahead_since.pop(target, None)
        if was:
            self.cache.release(target.repository, target.digest)

    def handed_off(self, targets: Iterable[PullTarget]) -> None:
        """``targets``, pulled ahead, are another's to count now (a Ray caller counts what it
        sent ahead to a node): they no longer fill this process's prefetch bounds; the
        ledger's hold keeps them for their probes."""
        with self._ahead_lock:
            for target in targets:
                self._ahead.pop(target, None)
                self._ahead_since.pop(target, None)

    def _unique_bytes(self, image_id: str) -> int:
        """What removing the image would free: its ``Size`` counts the base layers every
        image of a dataset shares, which made a few prefetched images look like the whole
        prefetch share and held the next pulls back."""
        try:
            return footprint(self._api, {image_id}, self.cache.layer_cache).usage()
        except docker.errors.DockerException:
            return 0

    def _ahead_ids(self) -> set[str]:
        with self._ahead_lock:
            targets = list(self._ahead)
        ids = set()
        for target in targets:
            found = self._present(target)
            if found is not None:
                ids.add(found)
        return ids

    @property
    def ahead(self) -> list[PullTarget]:
        with self._ahead_lock:
            return list(self._ahead)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _target(reference: str, digest: str | None) -> PullTarget:
    name, _, carried = reference.partition("@")
    repository, _tag = docker.utils.parse_repository_tag(name)
    chosen = digest or carried
    if not chosen:
        raise ValueError(f"{reference!r}: a pull needs a digest (never a moving tag)")
    if carried and digest and carried != digest:
        raise ValueError(f"{reference!r} carries {carried}, not {digest}")
    return PullTarget(repository, chosen)
