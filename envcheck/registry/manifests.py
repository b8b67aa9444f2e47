"""Manifests as the watch reads them: the four media types a tag may name, and an index's
entry for the engine's platform.

A tag names either one image's manifest (Docker v2 or OCI) or an index of several (a Docker
manifest list or an OCI index), one entry per platform. The engine pulls the entry for its
own platform, so that entry's digest is the image's identity; attestation entries
(``unknown/unknown``) and other platforms are not.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

__all__ = ["ACCEPT", "INDEX_TYPES", "MANIFEST_TYPES", "Platform", "digest_of", "is_index",
           "platform_digest"]

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPES = (DOCKER_MANIFEST, OCI_MANIFEST)
INDEX_TYPES = (DOCKER_LIST, OCI_INDEX)
# all four, or a registry may convert what it answers (and its digest) to what we accept
ACCEPT = ", ".join((*MANIFEST_TYPES, *INDEX_TYPES))
MAX_INDEX_BYTES = 4 * 1024 * 1024  # the registry's own limit on a manifest


@dataclass(frozen=True, slots=True)
class Platform:
    """``os/arch[/variant]`` as the engine writes it (``linux/amd64``, ``linux/arm64/v8``)."""

    os: str
    architecture: str
    variant: str | None = None

    @classmethod
    def parse(cls, text: str) -> Platform:
        parts = text.strip().split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise ValueError(f"{text!r} is not a platform (os/arch or os/arch/variant, e.g. "
                             "linux/amd64)")
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else None)

    def matches(self, entry: dict[str, Any]) -> bool:
        if entry.get("os") != self.os or entry.get("architecture") != self.architecture:
            return False
        # arm64's variant is often left out (v8 implied); ask for one only when we name one
        return self.variant is None or entry.get("variant") in (self.variant, None)

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)


def is_index(media_type: str) -> bool:
    return media_type in INDEX_TYPES


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def platform_digest(index: bytes, platform: Platform) -> str | None:
    """The digest of ``index``'s entry for ``platform`` (the first that matches, as the engine
    picks), None when it has none. Raises ValueError when ``index`` is not an index."""
    try:
        doc = json.loads(index)
    except ValueError:
        raise ValueError("the index is not JSON") from None
    entries = doc.get("manifests") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ValueError("the index has no list of manifests")
    candidates = []
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("digest"), str):
            continue
        found = entry.get("platform")
        if isinstance(found, dict) and platform.matches(found):
            exact = found.get("variant") == platform.variant
            candidates.append((not exact, position, entry["digest"]))
    # an exact variant first, then one that left it out
    return min(candidates)[2] if candidates else None
