"""What a look at a registry gives: a ``TagLook`` (the tag's digest for the engine's platform)
or a ``RegistryFailure`` (why not, classified). Both are frozen values a scheduler can keep,
compare and put in a result's details; neither ever holds a credential."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from envcheck.core.errors import ImageNotFound, RegistryFailed
from envcheck.core.results import Reason
from envcheck.registry.reference import ImageReference

__all__ = ["NOT_FOUND", "RegistryFailure", "TagLook"]

# the one failure that is the environment's: the reference names no image
NOT_FOUND = Reason.IMAGE_NOT_FOUND


@dataclass(frozen=True, slots=True)
class TagLook:
    """The tag's identity at ``seen_at``: ``digest`` is the manifest digest for ``platform``
    (the image the engine would run); ``index_digest`` the index (manifest list) the tag names
    when it names one; ``media_type`` what the tag names. ``requests`` counts what the look
    cost the registry (HEADs, GETs, token requests); ``rate_remaining`` is the registry's
    ``ratelimit-remaining`` when it sent one."""

    reference: ImageReference
    digest: str
    index_digest: str | None
    media_type: str
    platform: str
    seen_at: datetime
    requests: int = 0
    token_requests: int = 0
    rate_remaining: int | None = None

    def details(self) -> dict[str, Any]:
        """For a result's details and the API: plain JSON values."""
        return {"reference": str(self.reference), "registry": self.reference.registry,
                "digest": self.digest, "index_digest": self.index_digest,
                "media_type": self.media_type, "platform": self.platform,
                "seen_at": self.seen_at.isoformat(), "registry_requests": self.requests,
                "rate_remaining": self.rate_remaining}


@dataclass(frozen=True, slots=True)
class RegistryFailure:
    """Why a look gave no digest. ``reason`` is one of the registry reasons:
    ``registry_unreachable``, ``registry_auth_failed``, ``registry_rate_limited`` (envcheck's)
    or ``image_not_found`` (the reference names no image, on this one look: the two-look
    confirmation is ``state.TagWatchState``'s). ``message`` names the registry and never a
    credential; ``status`` and ``code`` are what the registry answered, when it did."""

    reason: Reason
    registry: str
    message: str
    seen_at: datetime
    status: int | None = None
    code: str | None = None
    retry_after_s: float | None = None
    rate_remaining: int | None = None
    requests: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def not_found(self) -> bool:
        return self.reason == NOT_FOUND

    def details(self) -> dict[str, Any]:
        found: dict[str, Any] = {"registry": self.registry, "reason": str(self.reason),
                                 "message": self.message, "seen_at": self.seen_at.isoformat()}
        for key in ("status", "code", "retry_after_s", "rate_remaining"):
            value = getattr(self, key)
            if value is not None:
                found[key] = value
        return found | self.extra

    def error(self) -> RegistryFailed | ImageNotFound:
        """As envcheck's exception, for a caller that raises (a probe whose image cannot be
        had): ``ImageNotFound`` for a missing image, ``RegistryFailed`` for the others."""
        if self.not_found:
            return ImageNotFound(self.message, registry=self.registry, details=self.details())
        return RegistryFailed(self.message, reason=self.reason, registry=self.registry,
                              details=self.details())
