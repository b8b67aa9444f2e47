"""An image reference as the engine reads it, and where its registry's API lives.

``python`` is ``docker.io/library/python:latest``, whose API is ``registry-1.docker.io``;
``127.0.0.1:5000/ns/img@sha256:...`` is pinned by digest and needs no watch. The grammar and
the split into registry and repository are :mod:`envcheck.core.imageref`'s, the one reader
the catalogue also checks every reference with at load, so a reference the catalogue took is
one this stage can ask a registry about.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from envcheck.core.imageref import DOCKER_HUB, DOCKER_HUB_API, ImageRefError, parse_image_ref

__all__ = ["DOCKER_HUB", "DOCKER_HUB_API", "ImageReference", "InvalidReference"]

DEFAULT_TAG = "latest"


class InvalidReference(ImageRefError):
    """The text is not an image reference; the message says what is wrong with it."""


@dataclass(frozen=True, slots=True)
class ImageReference:
    """``registry`` as the engine names it (``docker.io``, ``ghcr.io``, ``127.0.0.1:5000``);
    ``api_host`` where its v2 API answers; ``repository`` the path in it (``library/python``);
    ``tag`` and ``digest`` as written (the tag ``latest`` when neither is)."""

    registry: str
    api_host: str
    repository: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, text: str) -> ImageReference:
        try:
            ref = parse_image_ref(text)
        except ImageRefError as exc:
            raise InvalidReference(str(exc)) from None
        tag = DEFAULT_TAG if ref.tag is None and ref.digest is None else ref.tag
        return cls(ref.domain, ref.api_host, ref.path, tag, ref.digest)

    @property
    def pinned(self) -> bool:
        """Named by digest: the image cannot move, and needs no watch."""
        return self.digest is not None

    @property
    def name(self) -> str:
        """The repository as the engine names it for a pull: ``docker.io/library/python``."""
        return f"{self.registry}/{self.repository}"

    @property
    def reference(self) -> str:
        """What follows the repository in the API's paths: the digest, else the tag."""
        return self.digest or self.tag or DEFAULT_TAG

    @property
    def loopback(self) -> bool:
        """The registry is on this host's loopback: the engine talks plain HTTP to it
        (it trusts 127.0.0.0/8 as an insecure registry by default)."""
        bracketed = self.api_host.startswith("[")  # [::1]:5000
        host = (self.api_host[1:].split("]", 1)[0] if bracketed
                else self.api_host.split(":", 1)[0])
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def at(self, digest: str) -> ImageReference:
        """The same repository pinned at ``digest`` (what a pull of a watched tag asks for)."""
        return ImageReference(self.registry, self.api_host, self.repository, None, digest)

    def __str__(self) -> str:
        text = self.name
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text
