"""What a pull will bring, learned before it starts: the sum of an image manifest's layer (and
config) sizes, read by digest through the tag watch's HTTP, auth and token cache.

The engine offers no such number: its ``GET /distribution/{name}/json`` (docker-py's
``inspect_distribution``) answers with the manifest's own descriptor (a few hundred bytes),
not the layers'. So the manifest is read here: ``GET /v2/<name>/manifests/<digest>``.

On Docker Hub a manifest GET counts as a pull (the HEAD of the watch does not), and the
engine's own pull GETs it again: there the size is not asked (``None``), and the cache makes
room after the pull instead of before. The same for an answer that is not one image's
manifest, or a registry that fails: the pull itself then says what the registry does.

A layer is counted once among the pulls under way in this process: the size of a pull
claims the layers it counted until that pull ends (``ended``), and the next pull's size
leaves them out. The engine downloads a layer once for pulls at once, and at the start of a
dataset whose images share a base nothing has been pulled yet, so each pull counted the base
and the first few reservations took room for it several times over (the prefetches behind
them found none). When the claiming pull succeeds its layers are learned as the engine's
(``learn``, before ``ended``); when it fails the next size counts them again. A claim lasts
at most to its pull's deadline, whatever its caller does.

Adapter: ``TagWatcher`` reads manifests through its ``_get`` (auth dance, tokens, deadline);
it has no public call for a manifest by digest, so this module uses that one method.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Collection, Sequence

import requests
import urllib3.exceptions

from envcheck.core.clock import SYSTEM_CLOCK, Clock
from envcheck.core.errors import RegistryFailed
from envcheck.registry.credentials import RegistryCredentials
from envcheck.registry.manifests import MANIFEST_TYPES, MAX_INDEX_BYTES
from envcheck.registry.outcomes import RegistryFailure
from envcheck.registry.pull import PullTarget
from envcheck.registry.reference import DOCKER_HUB, ImageReference
from envcheck.registry.transport import Deadline, DeadlinePassed
from envcheck.registry.watch import TagWatcher, _Look

__all__ = ["ManifestSizes", "manifest_bytes"]

log = logging.getLogger("envcheck.registry.sizes")
MAX_LEARNED = 100_000  # layers (and manifests) remembered, oldest forgotten first


def manifest_bytes(body: bytes) -> int | None:
    """Layers plus config of one image's manifest (Docker v2 or OCI); None for anything else
    (an index, not JSON, no layers)."""
    parts = manifest_parts(body)
    return None if parts is None else sum(size for _, size in parts)


def manifest_parts(body: bytes) -> list[tuple[str, int]] | None:
    """(blob digest, compressed bytes) of each layer, in order, then the config's; None for
    anything but one image's manifest."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
        return None
    parts = []
    for part in [*doc["layers"], doc.get("config") or {}]:
        size = part.get("size") if isinstance(part, dict) else None
        if isinstance(size, int) and size >= 0:
            parts.append((str(part.get("digest") or ""), size))
    return parts


class ManifestSizes:
    """``images.ImageSizes`` over the tag watch's ``watcher`` and ``credentials``.

    A layer the engine already holds moves no byte and takes no more room: a manifest names
    its layers by their compressed digest, the engine by their uncompressed one, and the two
    are learned for each image pulled (``learn``: the manifest's layers and the image's
    ``RootFS.Layers`` are in the same order). With ``local_layers`` (the uncompressed digests
    the engine holds now), the size of the next image that shares them, a base most often,
    leaves them out; so does the size of a pull while another pull under way in this process
    counted them (``ended`` ends that pull's claim)."""

    def __init__(self, watcher: TagWatcher, credentials: RegistryCredentials, *,
                 clock: Clock = SYSTEM_CLOCK, deadline_s: float = 30.0,
                 local_layers: Callable[[], Collection[str]] | None = None) -> None:
        self._watcher = watcher
        self._credentials = credentials
        self._clock = clock
        self._deadline_s = deadline_s
        self.local_layers = local_layers
        self._parts: dict[str, list[tuple[str, int]]] = {}  # manifest digest -> its parts
        self._diff_ids: dict[str, str] = {}  # a layer's blob digest -> its diff id
        # pull under way -> (its deadline, the blobs its size counted): left out of the others'
        self._claims: dict[PullTarget, tuple[float, frozenset[str]]] = {}
        self._lock = threading.Lock()
        self.asked = 0  # manifests read (a test and the bench count them)

    def learn(self, target: PullTarget, diff_ids: Sequence[str]) -> None:
        """``target`` was pulled and its image has these layers (``RootFS.Layers``)."""
        with self._lock:
            parts = self._parts.pop(target.digest, None)
            if parts is None or len(parts) - 1 != len(diff_ids):
                return
            for (blob, _), diff_id in zip(parts[:-1], diff_ids, strict=True):
                self._diff_ids[blob] = diff_id
            while len(self._diff_ids) > MAX_LEARNED:
                self._diff_ids.pop(next(iter(self._diff_ids)))

    def ended(self, target: PullTarget) -> None:
        """``target``'s pull ended (pulled, failed or given up): the layers its size counted
        are no longer left out of the other pulls' (learned as the engine's when pulled)."""
        with self._lock:
            self._claims.pop(target, None)

    def claimed(self) -> frozenset[str]:
        """The blobs the pulls under way counted (what the next size leaves out)."""
        with self._lock:
            return self._claimed_by_others(None)

    def _claimed_by_others(self, target: PullTarget | None) -> frozenset[str]:
        """Under the lock: the blobs the pulls under way but ``target``'s counted; a claim
        past its pull's deadline is dropped (the pull is cancelled at it)."""
        now = self._clock.monotonic()
        for gone in [t for t, (until, _) in self._claims.items() if until <= now]:
            del self._claims[gone]
        return frozenset().union(*(blobs for t, (_, blobs) in self._claims.items()
                                   if t != target))

    def size(self, target: PullTarget, deadline: float) -> int | None:
        """The bytes ``target``'s pull will bring (see the module's doc); the layers counted
        are claimed for it until :meth:`ended`, which the caller owes once the size is
        asked, whatever it answered."""
        ref = ImageReference.parse(target.reference)
        if ref.registry == DOCKER_HUB:
            return None  # a manifest GET is a pull there
        seconds = min(self._deadline_s, deadline - self._clock.monotonic())
        if seconds <= 0:
            return None
        try:
            look = _Look(ref, self._credentials.for_registry(ref.registry),
                         Deadline(seconds, self._clock))
            answer = self._watcher._get(look, "GET", f"manifests/{target.digest}",
                                        ", ".join(MANIFEST_TYPES), max_body=MAX_INDEX_BYTES)
        except (DeadlinePassed, requests.RequestException, urllib3.exceptions.HTTPError,
                OSError, ValueError, RegistryFailed) as exc:
            log.info("no manifest size", extra={"image": target.reference,
                                                "why": type(exc).__name__})
            return None
        self.asked += 1
        if isinstance(answer, RegistryFailure) or answer.status != 200:
            return None
        parts = manifest_parts(answer.body)
        if parts is None:
            return None
        with self._lock:
            self._parts[target.digest] = parts
            while len(self._parts) > MAX_LEARNED:
                self._parts.pop(next(iter(self._parts)))
            known = {blob: self._diff_ids[blob] for blob, _ in parts if blob in self._diff_ids}
        held = set(self.local_layers()) if known and self.local_layers is not None else set()
        brings = [(blob, size) for blob, size in parts if known.get(blob) not in held or not blob]
        with self._lock:  # claimed and counted in one step: two sizes at once count a blob once
            others = self._claimed_by_others(target)
            counted = [(blob, size) for blob, size in brings if not blob or blob not in others]
            self._claims[target] = (deadline, frozenset(blob for blob, _ in counted if blob))
        return sum(size for _, size in counted)
