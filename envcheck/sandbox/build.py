"""Images built from an environment's own build context (a Harbor task's ``environment/``),
through the docker SDK, with a cache keyed by the context's content.

The tag carries the hash of the context (files, names, modes: :func:`tree_hash`), so an
unchanged folder finds its image on the engine and is never rebuilt; a changed one gets a new
tag. Builds never pull (``pull=False``: the base image must be on the host or the engine must
reach its registry) and run on ``network_mode`` (``none`` unless the operator allows more).

Who is at fault: a Dockerfile step that fails, or a Dockerfile the engine rejects (HTTP 4xx),
is the environment's defect (:class:`ImageBuildFailed`, with the log's tail); an engine that
does not answer or fails on its own side is envcheck's (``EngineUnreachable``,
``SandboxFailed``), as for every other engine call (:mod:`envcheck.sandbox.engine`'s
boundary). A build has a deadline, checked at each line of its log, and every read of the log
waits at most that long: past it envcheck stops reading and the build counts as failed (a
context that builds forever is a defect too).
"""

from __future__ import annotations

import re
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests
import urllib3.exceptions

from envcheck.catalogue.treehash import tree_hash
from envcheck.core.errors import ImageBuildFailed
from envcheck.sandbox.base import BuildOptions, Deadline
from envcheck.sandbox.docker import DockerRuntime
from envcheck.sandbox.engine import engine_errors, preflight

__all__ = ["LABEL_BUILD_HASH", "BuiltImage", "ImageBuilder"]

LABEL_BUILD_HASH = "org.envcheck.build-hash"
LOG_TAIL_LINES = 30
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_SHARED: weakref.WeakKeyDictionary[DockerRuntime, ImageBuilder] = weakref.WeakKeyDictionary()
_SHARED_GUARD = threading.Lock()


@dataclass(frozen=True, slots=True)
class BuiltImage:
    tag: str
    image_id: str
    built: bool  # False: the tag was on the engine already (a cache hit)
    duration_s: float
    log_tail: str = ""


class ImageBuilder:
    """Builds contexts into tagged images, once per content; thread-safe per tag."""

    def __init__(self, client: docker.DockerClient, *, network_mode: str = "none",
                 host: str = "") -> None:
        self._client = client
        self._host = host  # tried first: the SDK leaks the socket of a failed connect
        self._network_mode = network_mode
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.builds = 0  # builds actually run: cache hits do not count

    @classmethod
    def for_runtime(cls, runtime: DockerRuntime) -> ImageBuilder:
        """The runtime's one builder (offline builds): every check through that runtime
        shares its per-tag locks, so two probes of one task never build it twice."""
        with _SHARED_GUARD:
            builder = _SHARED.get(runtime)
            if builder is None:
                builder = _SHARED[runtime] = cls(runtime.client, host=runtime.host)
            return builder

    def _lock(self, tag: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(tag, threading.Lock())

    def ensure(self, context: Path, tag: str, *, timeout_s: float,
               labels: Mapping[str, str] | None = None,
               options: BuildOptions | None = None) -> BuiltImage:
        """The image ``tag`` built from ``context`` (its ``Dockerfile``, or as ``options``
        say: a compose service's build), unless it exists.

        The caller derives ``tag`` from the context's :func:`tree_hash` (and the options); the
        hash is also written as a label, so an image can be traced to its content.
        """
        started = time.monotonic()
        if self._host:
            preflight(self._host, float(self._client.api.timeout))
        with self._lock(tag):  # two probes of one task: one builds, the other finds it
            found = self._image_id(tag)
            if found is not None:
                return BuiltImage(tag, found, False, time.monotonic() - started)
            image_id, tail = self._build(context, tag, timeout_s, {
                **(labels or {}), LABEL_BUILD_HASH: tree_hash(context)},
                options or BuildOptions())
            self.builds += 1
            return BuiltImage(tag, image_id, True, time.monotonic() - started, tail)

    def _image_id(self, tag: str) -> str | None:
        with engine_errors(tag):
            try:
                return str(self._client.images.get(tag).id)
            except docker.errors.ImageNotFound:
                return None

    def _build(self, context: Path, tag: str, timeout_s: float,
               labels: dict[str, str], options: BuildOptions) -> tuple[str, str]:
        deadline = Deadline(timeout_s)
        lines: list[str] = []
        image_id: str | None = None
        stream: Any = None
        try:
            with engine_errors(tag):
                try:
                    stream = self._client.api.build(
                        path=str(context), tag=tag, labels=labels, rm=True, forcerm=True,
                        pull=False, network_mode=self._network_mode, decode=True,
                        timeout=max(int(timeout_s), 1), dockerfile=options.dockerfile,
                        buildargs=dict(options.args) or None, target=options.target)
                    for chunk in _chunks(stream):
                        error = chunk.get("error")
                        lines.extend(_lines(chunk.get("stream") or error or ""))
                        del lines[:-LOG_TAIL_LINES]
                        if error:
                            raise ImageBuildFailed(f"{tag}: {str(error).strip()}",
                                                   "\n".join(lines), deadline.elapsed())
                        found = (chunk.get("aux") or {}).get("ID")
                        image_id = str(found) if found else image_id
                        if deadline.expired():
                            raise ImageBuildFailed(
                                f"{tag}: the build ran past {timeout_s:g}s and was stopped",
                                "\n".join(lines), deadline.elapsed())
                except docker.errors.APIError as exc:
                    if exc.status_code is None or not 400 <= exc.status_code < 500:
                        raise
                    # the engine refused the context itself: a bad Dockerfile, a bad FROM
                    raise ImageBuildFailed(f"{tag}: {exc.explanation or exc}",
                                           "\n".join(lines), deadline.elapsed()) from None
                except (requests.RequestException, urllib3.exceptions.HTTPError, OSError):
                    if not deadline.expired():
                        raise
                    # silent past the deadline: the build hangs (the probe pings the engine
                    # before it blames the environment)
                    raise ImageBuildFailed(f"{tag}: the build ran past {timeout_s:g}s with no "
                                           "output and was stopped", "\n".join(lines),
                                           deadline.elapsed()) from None
        finally:
            if stream is not None:
                stream.close()
        if image_id is None:  # no aux record (older engines): ask for the tag
            image_id = self._image_id(tag)
        if image_id is None:
            raise ImageBuildFailed(f"{tag}: the build ended without an image",
                                   "\n".join(lines), deadline.elapsed())
        return image_id, "\n".join(lines)


def _chunks(stream: Any) -> Iterator[dict[str, Any]]:
    for chunk in stream:
        if isinstance(chunk, dict):
            yield chunk


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in _ANSI.sub("", str(text)).splitlines() if line.strip()]
