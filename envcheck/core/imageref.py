"""Image references as the engine and the registries read them:
``[host[:port]/]path[:tag][@digest]``.

The grammar is the distribution project's reference grammar (``reference/regexp.go``) and its
normalisation (``reference/normalize.go``): the first path component is a registry host only
when it holds a ``.`` or a ``:`` or is ``localhost``; a name without one is on Docker Hub
(``docker.io``), where a single component is an official image under ``library/``. Here, in
``core``, because the catalogue checks every reference at load (offline, with file, line and
key) and the registry stage reads the same parts when it asks a registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "DOCKER_HUB",
    "DOCKER_HUB_API",
    "ImageRef",
    "ImageRefError",
    "parse_image_ref",
]

DOCKER_HUB = "docker.io"  # as the engine names it in RepoTags / RepoDigests
DOCKER_HUB_API = "registry-1.docker.io"  # where its distribution API answers
_LEGACY_HUB = "index.docker.io"
_MAX_NAME = 255

# reference/regexp.go, spelled out piece by piece
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[_.]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PATH = re.compile(rf"^{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*$")
_DOMAIN = re.compile(rf"^(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
                     r"(?::[0-9]+)?$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$")
_SHA256 = re.compile(r"^sha256:[0-9a-f]{64}$")


class ImageRefError(ValueError):
    """A reference the engine would refuse; the message says what is wrong with it."""


@dataclass(frozen=True, slots=True)
class ImageRef:
    """One image reference, normalised: ``domain`` as the engine names the registry,
    ``path`` the repository in it (``library/`` added on Docker Hub), and a tag and/or a
    digest as written (a reference with neither means ``latest``, as the engine reads it)."""

    domain: str
    path: str
    tag: str | None
    digest: str | None

    @property
    def repository(self) -> str:
        """``domain/path``: the name the engine lists the image under."""
        return f"{self.domain}/{self.path}"

    @property
    def api_host(self) -> str:
        """The host whose ``/v2/`` API serves this repository."""
        return DOCKER_HUB_API if self.domain == DOCKER_HUB else self.domain

    @property
    def reference(self) -> str:
        """The tag, else the digest: what a manifest request names."""
        if self.tag is not None:
            return self.tag
        return self.digest if self.digest is not None else "latest"

    @property
    def pinned(self) -> bool:
        """Named by digest: the reference cannot move, no watch needed."""
        return self.digest is not None

    def with_digest(self, digest: str) -> str:
        """``repository@digest``: the immutable reference a pull by digest uses."""
        return f"{self.repository}@{digest}"

    def __str__(self) -> str:
        text = self.repository
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text


def _split_domain(name: str) -> tuple[str, str, bool]:
    """``(domain, path, written)``: ``written`` when the reference names its registry."""
    first, sep, rest = name.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost"):
        return DOCKER_HUB, name, False
    return (DOCKER_HUB if first == _LEGACY_HUB else first), rest, True


def parse_image_ref(text: str) -> ImageRef:
    """``text`` parsed and normalised; :class:`ImageRefError` saying which part is wrong
    when the engine would refuse it."""
    if not isinstance(text, str) or not text:
        raise ImageRefError("an image reference cannot be empty")
    if any(c.isspace() for c in text):
        raise ImageRefError(f"{text!r} contains whitespace")
    if "://" in text:
        raise ImageRefError(f"{text!r}: an image reference has no scheme (write "
                            "ghcr.io/org/img, not https://ghcr.io/org/img)")
    name, at, written_digest = text.partition("@")
    digest: str | None = written_digest if at else None
    if digest is None:
        pass
    elif not _DIGEST.match(digest):
        raise ImageRefError(f"{text!r}: {digest!r} is not a digest (sha256:<64 hex digits>)")
    elif digest.startswith("sha256:") and not _SHA256.match(digest):
        raise ImageRefError(f"{text!r}: {digest!r} is not a sha256 digest (64 lowercase hex "
                            "digits)")
    tag = None
    if name.rfind(":") > name.rfind("/"):  # a colon after the last slash starts the tag
        name, _, tag = name.rpartition(":")
        if not _TAG.match(tag):
            raise ImageRefError(f"{text!r}: {tag!r} is not a tag (letters, digits, _ . -, at "
                                "most 128, not starting with . or -)")
    domain, path, written = _split_domain(name)
    if written and not _DOMAIN.match(domain):
        raise ImageRefError(f"{text!r}: {domain!r} is not a registry host[:port]")
    if not _PATH.match(path):
        why = ("it must be lowercase" if _PATH.match(path.lower()) else
               "lowercase letters and digits, separated by . _ __ or -, components joined by /")
        raise ImageRefError(f"{text!r}: {path!r} is not a repository name ({why})")
    if len(name) > _MAX_NAME:
        raise ImageRefError(f"{text!r}: the repository name is longer than {_MAX_NAME} "
                            "characters")
    if domain == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"  # Docker Hub's official images
    return ImageRef(domain=domain, path=path, tag=tag, digest=digest)
