"""An image reference as the engine reads it, and where its registry's API lives.

``python`` is ``docker.io/library/python:latest``, whose API is ``registry-1.docker.io``;
``127.0.0.1:5000/ns/img@sha256:...`` is pinned by digest and needs no watch. The split into
registry and repository is the docker SDK's own (``docker.auth.resolve_repository_name``,
``docker.utils.parse_repository_tag``), so envcheck names a registry exactly as the engine and
the Docker CLI's credentials do; what the SDK does not check (the grammar of names, tags and
digests) is checked here, so a malformed reference is one clear error.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from docker.auth import INDEX_NAME, resolve_repository_name
from docker.errors import InvalidRepository
from docker.utils import parse_repository_tag

__all__ = ["DOCKER_HUB", "DOCKER_HUB_API", "ImageReference", "InvalidReference"]

DOCKER_HUB = INDEX_NAME  # "docker.io", as the engine names Docker Hub
DOCKER_HUB_API = "registry-1.docker.io"  # where Docker Hub's v2 API answers
DEFAULT_TAG = "latest"

# distribution/reference's grammar (reference/regexp.go)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$")
_HOST = re.compile(r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
                   r"(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:.]+\])"
                   r"(?::[0-9]{1,5})?$")
_MAX_NAME = 255


class InvalidReference(ValueError):
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
        value = text.strip()
        if not value:
            raise InvalidReference("an image reference cannot be empty")
        if value != text or any(c.isspace() for c in value):
            raise InvalidReference(f"{text!r} contains whitespace")
        name, suffix = parse_repository_tag(value)
        digest = tag = None
        if suffix is not None and "@" in value:
            digest = suffix
            name, tag = parse_repository_tag(name)  # name:tag@digest keeps both
        else:
            tag = suffix
        try:
            registry, repository = resolve_repository_name(name)
        except InvalidRepository as exc:
            raise InvalidReference(f"{text!r}: {exc}") from None
        if not _HOST.match(registry):
            raise InvalidReference(f"{text!r}: {registry!r} is not a registry host[:port]")
        if registry == DOCKER_HUB and "/" not in repository:
            repository = f"library/{repository}"  # Docker Hub's official images
        if not _REPOSITORY.match(repository) or len(repository) > _MAX_NAME:
            raise InvalidReference(
                f"{text!r}: {repository!r} is not a repository name (lowercase letters, digits "
                "and separators . _ __ - between them, components joined by /)")
        if tag is not None and not _TAG.match(tag):
            raise InvalidReference(f"{text!r}: {tag!r} is not a tag (letters, digits, _ . -, "
                                   "at most 128, not starting with . or -)")
        if digest is not None and not _DIGEST.match(digest):
            raise InvalidReference(f"{text!r}: {digest!r} is not a digest (sha256:<64 hex>)")
        if digest is not None and digest.startswith("sha256:") and not re.fullmatch(
                r"sha256:[0-9a-f]{64}", digest):
            raise InvalidReference(f"{text!r}: {digest!r} is not a sha256 digest (64 lowercase "
                                   "hex digits)")
        if tag is None and digest is None:
            tag = DEFAULT_TAG
        api_host = DOCKER_HUB_API if registry == DOCKER_HUB else registry
        return cls(registry, api_host, repository, tag, digest)

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
