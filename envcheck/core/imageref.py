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
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"^(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$")
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


def _split_domain(name: str) -> tuple[str, str]:
    first, sep, rest = name.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost"):
        domain, path = DOCKER_HUB, name
    else:
        domain, path = first, rest
    if domain == _LEGACY_HUB:
        domain = DOCKER_HUB
    if domain == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    return domain, path


def parse_image_ref(text: str) -> ImageRef:
    """``text`` parsed and normalised; :class:`ImageRefError` saying why when the engine
    would refuse it."""
    if not isinstance(text, str) or not text:
        raise ImageRefError("an image reference cannot be empty")
    if text != text.strip():
        raise ImageRefError(f"{text!r} has surrounding whitespace")
    match = _REFERENCE.match(text)
    if match is None:
        if _REFERENCE.match(text.lower()):  # only the case is wrong: tags and hosts may mix it
            raise ImageRefError(f"{text!r} is not a valid image reference: a repository "
                                "name must be lowercase")
        raise ImageRefError(f"{text!r} is not a valid image reference "
                            "([host[:port]/]name[:tag][@sha256:digest])")
    name = match.group("name")
    if len(name) > _MAX_NAME:
        raise ImageRefError(f"{text!r}: the repository name is longer than {_MAX_NAME} "
                            "characters")
    digest = match.group("digest")
    if digest is not None and digest.startswith("sha256:") and not _SHA256.match(digest):
        raise ImageRefError(f"{text!r}: a sha256 digest is 64 lowercase hex digits")
    domain, path = _split_domain(name)
    return ImageRef(domain=domain, path=path, tag=match.group("tag"), digest=digest)
