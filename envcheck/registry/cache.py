"""The image cache's budget and eviction: envcheck's own pulls kept under a byte budget by
removing the least recently used of them.

The budget (``--image-cache`` / ``ENVCHECK_IMAGE_CACHE``) is bytes (``20GiB``, ``500MB``,
``1073741824``) or a share of the engine's disk (``30%``: of the filesystem that holds the
engine's ``DockerRootDir``, measured on this host, so only for a local engine). Usage is what
removing envcheck's pulls would free (``usage.footprint``). Before a pull that would pass
the budget, envcheck removes its own pulls, least recently used first, and never:

- an image it did not pull (only ledger entries are candidates);
- one a container uses, running or stopped (the engine would refuse, and a stopped sandbox
  may be looked at again);
- one the catalogue pins (``keep: true``: the digests or references handed in);
- one pulled or used within ``min_age_s`` (a probe that was just handed it has not yet
  started its container; the kubelet's ``imageMinimumGCAge`` is 2 minutes for the same reason),
  unless its probes said they are done with it (``release``: ``envcheck check``'s pipeline);
- one pulled ahead of its probe and held in the ledger until that probe uses it (or the hold
  ends), whichever process sharing the engine pulled it.

Every decision (room reserved for a pull, evictions) is taken under the ledger's lock, across
the processes sharing the engine (:mod:`envcheck.registry.locking`), counting the room the
pulls under way in any of them reserved.

Removing a pull removes envcheck's references to it (its cache tag, then its
``repository@digest``), never by force: an image someone else also tagged stays theirs.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import docker
import docker.errors

from envcheck.core.errors import ConfigError, EnvcheckError
from envcheck.registry.ledger import GIVEN_UP, CacheLedger, LedgerEntry
from envcheck.registry.pull import CACHE_REPOSITORY, PullTarget, cache_tag, holds
from envcheck.registry.stats import RegistryStats
from envcheck.registry.usage import DiskFootprint, LayerCache, footprint

__all__ = ["BUDGET_ENV", "Budget", "Eviction", "ImageCache", "adopt_tagged", "parse_budget",
           "reconcile"]

log = logging.getLogger("envcheck.registry.cache")

BUDGET_ENV = "ENVCHECK_IMAGE_CACHE"
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}
_BUDGET = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[a-z]*|%)\s*$", re.I)


@dataclass(frozen=True, slots=True)
class Budget:
    """Bytes, or a share (0-1] of the engine's disk."""

    bytes: int | None = None
    share: float | None = None

    def resolve(self, disk_bytes: Callable[[], int]) -> int:
        if self.bytes is not None:
            return self.bytes
        assert self.share is not None
        return int(disk_bytes() * self.share)


def parse_budget(text: str, setting: str = f"--image-cache / {BUDGET_ENV}") -> Budget:
    """``20GiB``, ``500MB``, ``1073741824`` or ``30%``; anything else is a ConfigError that
    names ``setting`` and what it takes."""
    m = _BUDGET.match(text or "")
    unit = (m["unit"] or "").lower() if m else ""
    if m is None or (unit != "%" and unit not in _UNITS):
        raise ConfigError(f"{setting}: {text!r} is not a size (20GiB, 500MB, 1073741824) or a "
                          "share of the engine's disk (30%)")
    number = float(m["number"])
    if unit == "%":
        if not 0 < number <= 100:
            raise ConfigError(f"{setting}: {text!r}: a share of the disk is above 0% and at "
                              "most 100%")
        return Budget(share=number / 100)
    if number <= 0:
        raise ConfigError(f"{setting}: {text!r}: the budget must be above zero")
    return Budget(bytes=int(number * _UNITS[unit]))


def engine_disk_bytes(api: docker.APIClient) -> int:
    """The size of the filesystem holding the engine's data root, for a local engine."""
    root = str(api.info().get("DockerRootDir") or "")
    if not str(api.base_url).startswith("http+docker://") or not root or not os.path.isdir(root):
        raise ConfigError(f"{BUDGET_ENV}: a share of the disk needs a local engine whose data "
                          f"root ({root or 'unknown'}) this host can measure; give bytes "
                          "(e.g. 20GiB) instead")
    st = os.statvfs(root)
    return st.f_blocks * st.f_frsize


@dataclass(frozen=True, slots=True)
class Eviction:
    entry: LedgerEntry
    freed: int  # bytes the cache's usage dropped by


class ImageCache:
    """envcheck's pulls on one engine (``ledger``) under ``budget``. ``pinned()`` gives the
    digests or references the catalogue keeps."""

    def __init__(self, api: docker.APIClient, ledger: CacheLedger, budget: Budget | None, *,
                 stats: RegistryStats | None = None,
                 pinned: Callable[[], Collection[str]] = frozenset,
                 min_age_s: float = 120.0) -> None:
        self._api = api
        self.ledger = ledger
        self._budget = budget
        self.stats = stats or RegistryStats()
        self._pinned = pinned
        self.min_age_s = min_age_s
        self.layer_cache = LayerCache()
        self._budget_bytes: int | None = None
        self._lock = threading.Lock()  # one eviction pass at a time
        # (repository, digest) of pulls whose probes are done (``release``): evictable at
        # once, however recently used, until used again
        self._released: set[tuple[str, str]] = set()

    @property
    def budget_bytes(self) -> int | None:
        if self._budget is None:
            return None
        if self._budget_bytes is None:
            self._budget_bytes = self._budget.resolve(lambda: engine_disk_bytes(self._api))
        return self._budget_bytes

    def decisions(self) -> AbstractContextManager[None]:
        """The lock every budget decision on this engine is taken under, across processes
        (the ledger's): room reserved for a pull, evictions. Re-entrant in a process."""
        return self.ledger.decisions()

    def look(self) -> tuple[DiskFootprint, list[LedgerEntry]]:
        entries = self.ledger.entries()
        seen = footprint(self._api, {e.image_id for e in entries}, self.layer_cache)
        self.stats.cache(seen.usage(), self.budget_bytes)
        return seen, entries

    def usage(self) -> int:
        return self.look()[0].usage()

    def make_room(self, need: int, *, keep_ids: Collection[str] = (), at_least: int = 0
                  ) -> list[Eviction]:
        """Evict until ``need`` more bytes fit under the budget (and at least ``at_least``
        pulls went: a disk that filled wants room whatever the budget says), or nothing more
        may go. Returns what went; the caller compares ``usage() + need`` with the budget."""
        return self.room(need, keep_ids=keep_ids, at_least=at_least)[0]

    def room(self, need: int, *, keep_ids: Collection[str] = (), at_least: int = 0
             ) -> tuple[list[Eviction], int]:
        """:meth:`make_room`, and the usage it leaves (from the same look of the engine's
        disk: one ``/system/df`` fewer than asking ``usage()`` after)."""
        budget = self.budget_bytes
        if budget is None and at_least <= 0:
            return [], 0
        limit = budget if budget is not None else float("inf")
        # one eviction pass at a time: in this process, and across those sharing the ledger
        with self.ledger.decisions(), self._lock:
            seen, entries = self.look()
            evicted: list[Eviction] = []
            gone: set[tuple[str, str]] = set()

            def remaining() -> set[str]:
                return {e.image_id for e in entries if (e.repository, e.digest) not in gone}

            for entry in self._candidates(entries, seen, keep_ids):
                before = seen.usage(remaining())
                if before + need <= limit and len(evicted) >= at_least:
                    break
                if not self._remove(entry):
                    continue
                gone.add((entry.repository, entry.digest))
                freed = before - seen.usage(remaining())
                evicted.append(Eviction(entry, freed))
                self.stats.evicted(freed)
                log.info("evicted", extra={"image": entry.reference, "freed_bytes": freed,
                                           "last_used_at": entry.last_used_at.isoformat()})
            used = seen.usage(remaining())
            self.stats.cache(used, budget)
            return evicted, used

    def release(self, repository: str, digest: str) -> None:
        """The probes that wanted ``repository@digest`` are done (``envcheck check``'s
        pipeline): it may go before its ``min_age_s``, least recently used first as ever."""
        with self._lock:
            self._released.add((repository, digest))

    def hold(self, repository: str, digest: str) -> None:
        """``repository@digest`` is wanted again: its ``min_age_s`` protects it anew."""
        with self._lock:
            self._released.discard((repository, digest))

    def evict(self, entry: LedgerEntry) -> bool:
        """Remove one pull now, whatever its age (the image just pulled that does not fit)."""
        with self.ledger.decisions(), self._lock:
            return self._remove(entry)

    def measure(self) -> None:
        """The cache's bytes and budget counted now (the stage's start: the metrics show what
        earlier processes pulled before this one pulls anything); an empty ledger costs no
        look at the engine's disk. What fails here is said by the first pull instead."""
        try:
            if self.ledger.entries():
                self.look()
            else:
                self.stats.cache(0, self.budget_bytes)
        except (EnvcheckError, docker.errors.DockerException) as exc:
            log.debug("the image cache was not measured at start", extra={"error": str(exc)})

    def _candidates(self, entries: list[LedgerEntry], seen: DiskFootprint,
                    keep_ids: Collection[str]) -> list[LedgerEntry]:
        pinned = set(self._pinned())
        now = datetime.now(UTC)
        young = now - timedelta(seconds=self.min_age_s)
        chosen = []
        for entry in entries:  # least recently used first
            if entry.digest in pinned or entry.reference in pinned:
                continue
            released = ((entry.repository, entry.digest) in self._released
                        or entry.held_until == GIVEN_UP)
            if entry.image_id in keep_ids or (entry.last_used_at > young and not released):
                continue
            if entry.held_until is not None and entry.held_until > now:
                continue  # pulled ahead of its probe, by this process or another
            if seen.in_use(entry.image_id):
                continue
            chosen.append(entry)
        return chosen

    def _remove(self, entry: LedgerEntry) -> bool:
        """Remove envcheck's references to ``entry``'s image (no force); the ledger forgets
        it once the engine no longer holds it as envcheck's. False when a container uses it."""
        users = self._api.containers(all=True, quiet=True, filters={"ancestor": entry.image_id})
        if users:
            return False
        repository, tag = cache_tag(PullTarget(entry.repository, entry.digest))
        try:
            attrs = self._api.inspect_image(entry.image_id)
        except docker.errors.NotFound:
            self.ledger.forget(entry.repository, entry.digest)
            return True
        # a tag not envcheck's: someone else holds the image, which then stays theirs
        others = [t for t in attrs.get("RepoTags") or []
                  if not str(t).startswith(CACHE_REPOSITORY + "/")]
        refs = [f"{repository}:{tag}"]
        if not others:  # nobody else holds it: its digest reference goes too
            refs.append(entry.reference)
        for ref in refs:
            try:
                self._api.remove_image(ref, force=False, noprune=False)
            except docker.errors.NotFound:
                continue
            except docker.errors.APIError as exc:
                if exc.status_code == 409:  # a container came to use it meanwhile
                    self._retag(entry, repository, tag)
                    return False
                raise
        self.ledger.forget(entry.repository, entry.digest)
        self._released.discard((entry.repository, entry.digest))
        return True

    def _retag(self, entry: LedgerEntry, repository: str, tag: str) -> None:
        try:
            self._api.tag(entry.image_id, repository, tag)
        except docker.errors.APIError:
            log.warning("could not tag an image in use again", extra={"image": entry.reference})


def reconcile(api: docker.APIClient, ledger: CacheLedger, now: datetime | None = None, *,
              adopt: Callable[[PullTarget], bool] = lambda _: False) -> tuple[int, int]:
    """Settle the ledger with the engine at start: entries whose image is gone are dropped;
    a pull that was under way when a process died and that the engine holds complete is
    tagged and adopted (its intent dropped otherwise); an image carrying envcheck's cache tag
    but missing from the ledger is adopted when ``adopt`` says so (none by default: the
    stage adopts those of the repositories its catalogue names, and leaves the others to the
    ledger of whichever stage pulled them; a data directory lost with its ledger is how such
    images come about). (dropped, adopted)."""
    at = now or datetime.now(UTC)
    dropped = adopted = 0
    for entry in ledger.entries():
        if _image_with(api, PullTarget(entry.repository, entry.digest), entry.image_id) is None:
            ledger.forget(entry.repository, entry.digest)
            dropped += 1
    for repository, digest in ledger.pending():
        target = PullTarget(repository, digest)
        attrs = _image_with(api, target)
        if attrs is None:
            ledger.abandon(repository, digest)
            continue
        api.tag(attrs["Id"], *cache_tag(target))
        _adopt(ledger, target, attrs, at)
        adopted += 1
    for image in api.images():  # a reference filter's * stops at a slash: all, then ours
        for target in _targets_tagged(image):
            if adopt(target) and ledger.get(target.repository, target.digest) is None:
                attrs = _image_with(api, target)
                if attrs is not None:
                    _adopt(ledger, target, attrs, at)
                    adopted += 1
    if dropped or adopted:
        log.info("image cache ledger reconciled", extra={"dropped": dropped,
                                                         "adopted": adopted})
    return dropped, adopted


def adopt_tagged(api: docker.APIClient, ledger: CacheLedger, target: PullTarget,
                 at: datetime | None = None) -> bool:
    """Record ``target`` in the ledger if the engine holds it complete under envcheck's cache
    tag (pulled by an envcheck whose ledger is not this one, or lost): a stage adopts such an
    image of a repository it uses when it first uses it. Whether it did."""
    attrs = _image_with(api, target)
    tags = attrs.get("RepoTags") if attrs is not None else None
    if attrs is None or not isinstance(tags, list) or ":".join(cache_tag(target)) not in tags:
        return False
    _adopt(ledger, target, attrs, at or datetime.now(UTC))
    log.info("an image tagged as envcheck's adopted", extra={"image": target.reference})
    return True


def _image_with(api: docker.APIClient, target: PullTarget, image_id: str | None = None
                ) -> dict[str, object] | None:
    """The engine's image for ``repository@digest`` when complete (the digest in
    ``RepoDigests``), and with ``image_id`` when given."""
    try:
        attrs = api.inspect_image(target.reference)
    except docker.errors.NotFound:
        return None
    if not holds(attrs, target):
        return None
    if image_id is not None and attrs.get("Id") != image_id:
        return None
    return dict(attrs)


def _targets_tagged(image: dict[str, Any]) -> list[PullTarget]:
    """The pulls an image's envcheck cache tags stand for, read back from its digests."""
    found = []
    tags = [str(t) for t in image.get("RepoTags") or []
            if str(t).startswith(CACHE_REPOSITORY + "/")]
    hexes = {t.rsplit(":", 1)[-1] for t in tags}
    for ref in image.get("RepoDigests") or []:
        repository, _, digest = str(ref).partition("@")
        if digest.removeprefix("sha256:") in hexes:
            try:
                target = PullTarget(repository, digest)
            except ValueError:
                continue
            if f"{cache_tag(target)[0]}:{cache_tag(target)[1]}" in tags:
                found.append(target)
    return found


def _adopt(ledger: CacheLedger, target: PullTarget, attrs: dict[str, object],
           at: datetime) -> None:
    size = attrs.get("Size")
    ledger.record(LedgerEntry(target.repository, target.digest, str(attrs["Id"]),
                              int(size) if isinstance(size, int) else 0, at, at))
