"""What a pull will bring, learned before it starts: the sum of an image manifest's layer (and
config) sizes, read by digest through the tag watch's HTTP, auth and token cache.

The engine offers no such number: its ``GET /distribution/{name}/json`` (docker-py's
``inspect_distribution``) answers with the manifest's own descriptor (a few hundred bytes),
not the layers'. So the manifest is read here: ``GET /v2/<name>/manifests/<digest>``.

On Docker Hub a manifest GET counts as a pull (the HEAD of the watch does not), and the
engine's own pull GETs it again: there the size is not asked (``None``), and the cache makes
room after the pull instead of before. The same for an answer that is not one image's
manifest, or a registry that fails: the pull itself then says what the registry does.

Adapter: ``TagWatcher`` reads manifests through its ``_get`` (auth dance, tokens, deadline);
it has no public call for a manifest by digest, so this module uses that one method.
"""

from __future__ import annotations

import json
import logging

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


def manifest_bytes(body: bytes) -> int | None:
    """Layers plus config of one image's manifest (Docker v2 or OCI); None for anything else
    (an index, not JSON, no layers)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
        return None
    total = 0
    for part in [*doc["layers"], doc.get("config") or {}]:
        size = part.get("size") if isinstance(part, dict) else None
        if isinstance(size, int) and size >= 0:
            total += size
    return total


class ManifestSizes:
    """``images.ImageSizes`` over the tag watch's ``watcher`` and ``credentials``."""

    def __init__(self, watcher: TagWatcher, credentials: RegistryCredentials, *,
                 clock: Clock = SYSTEM_CLOCK, deadline_s: float = 30.0) -> None:
        self._watcher = watcher
        self._credentials = credentials
        self._clock = clock
        self._deadline_s = deadline_s
        self.asked = 0  # manifests read (a test and the bench count them)

    def size(self, target: PullTarget, deadline: float) -> int | None:
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
        return manifest_bytes(answer.body)
