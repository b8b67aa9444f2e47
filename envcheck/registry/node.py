"""The registry stage on a Ray node: each node pulls what it runs, into its own engine, under
its own budget, with its own ledger.

The caller (the process that holds the catalogue and the tag watch) hands each task a
:class:`NodeImagesSpec` (the budget, the deadlines, where the credentials are, what the
catalogue pins) and the watch's look of the environment's tag. On the node,
:class:`NodeStage` opens one :class:`RegistryImages` per worker process over the engine the
node's environment names (``DOCKER_HOST``), its ledger in the node's data directory under the
engine's ID (``image-cache/<engine id>.db``); :class:`HandedLooks` makes that stage answer the
task's identity with the caller's look, so the node pulls the digest the watch saw, never
whatever the tag names when the node asks.

Placement asks each node which of a few images its engine holds (:func:`held_references`:
one image listing, whatever the count asked), and a node reports the image it ran on.

What the node's stage did (pulls, evictions, the cache's bytes and budget) goes back to the
caller with each task's outcome (:meth:`NodeStage.report`: the process's counters' growth
since its last report), and the caller folds it into its own counters, which its ``/metrics``
exports. One process's counters outlive the stages it opens (a changed spec opens another).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.utils

from envcheck.catalogue.models import Environment
from envcheck.core.paths import data_dir
from envcheck.registry.credentials import CredentialSource
from envcheck.registry.fleet import ENGINE_TIMEOUT_S, RegistryImages, RegistrySettings
from envcheck.registry.reference import ImageReference, InvalidReference
from envcheck.registry.state import WatchUpdate
from envcheck.registry.stats import RegistryStats, StatsSnapshot

__all__ = ["HandedLooks", "NodeImagesSpec", "NodeStage", "held_references", "image_key",
           "node_spec"]

log = logging.getLogger("envcheck.registry.node")


@dataclass(frozen=True, slots=True)
class NodeImagesSpec:
    """What a node needs to pull for the caller; no secret travels (where a secret is, and
    each node reads it from its own environment or files)."""

    image_cache: str | None  # the budget, per node ("20GiB", "30%" of the node's disk)
    look_deadline_s: float
    pull_deadline_s: float
    sources: tuple[tuple[str, CredentialSource], ...] = ()
    pins: frozenset[str] = frozenset()
    docker_config: str | None = None  # None: the node's own (DOCKER_CONFIG, ~/.docker)
    certs_dir: Path | None = None  # None: the node engine's own CA files
    prefetch_count: int = 4  # images pulled ahead and not yet used, per process (--prefetch)

    def opened_as(self) -> tuple[Any, ...]:
        """What a node's stage is opened with (a change opens another one)."""
        return (self.image_cache, self.look_deadline_s, self.pull_deadline_s,
                self.docker_config, self.certs_dir, self.prefetch_count)


def node_spec(fleet: RegistryImages) -> NodeImagesSpec:
    """The spec of the caller's stage, for its tasks on other nodes."""
    settings = fleet.settings or RegistrySettings(Path("."))
    return NodeImagesSpec(settings.image_cache, settings.look_deadline_s,
                          settings.pull_deadline_s,
                          tuple(sorted(fleet.credentials.sources.items())), fleet.pins,
                          settings.docker_config, settings.certs_dir, settings.prefetch_count)


def image_key(env: Environment, digest: str | None) -> str | None:
    """What names ``env``'s image on any engine, for placement: the repository at the watch's
    digest for an image envcheck pulls, else the catalogue's reference as written."""
    if env.pull != "watch":
        return env.image
    try:
        ref = ImageReference.parse(env.image)
    except InvalidReference:
        return None
    chosen = ref.digest or digest
    return str(ref.at(chosen)) if chosen is not None else None


def _canonical(reference: str) -> tuple[str, str, str | None, str | None] | None:
    try:
        ref = ImageReference.parse(reference)
    except InvalidReference:
        return None
    # a digest names the image whatever tag is written beside it
    return ref.registry, ref.repository, None if ref.digest else ref.tag, ref.digest


def held_references(api: docker.APIClient, references: Iterable[str]) -> list[str]:
    """Which of ``references`` the engine behind ``api`` holds complete (a digest among an
    image's ``RepoDigests``, a tag among its ``RepoTags``): one listing of the engine's
    images, compared as references (``python`` is ``docker.io/library/python:latest``)."""
    wanted = {ref: _canonical(ref) for ref in references}
    if not wanted:
        return []
    have = set()
    for image in api.images():
        for name in [*(image.get("RepoDigests") or []), *(image.get("RepoTags") or [])]:
            found = _canonical(str(name))
            if found is not None:
                have.add(found)
    return [ref for ref, canonical in wanted.items() if canonical is not None
            and canonical in have]


class HandedLooks(RegistryImages):
    """A node's stage for one task: the identity is the caller's look (handed with the task),
    the image this node's (its engine, its budget, its ledger)."""

    def __init__(self, node: RegistryImages, looks: Mapping[str, WatchUpdate]) -> None:
        super().__init__(node.watcher, node.credentials, node.images,
                         pull_deadline_s=node.pull_deadline_s, pins=node.pinning)
        self.settings, self.engine_id = node.settings, node.engine_id
        self._looks = dict(looks)

    def identity(self, env: Environment, *, fresh: bool) -> WatchUpdate:
        handed = self._looks.get(env.id)
        return handed if handed is not None else super().identity(env, fresh=fresh)

    def close(self) -> None:
        """The node's stage outlives the task: nothing to close here."""


class NodeStage:
    """This worker process's registry stage over its node's engine (``DOCKER_HOST``), opened
    the first time a task needs one; another spec (the caller's settings changed) opens
    another. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: tuple[tuple[Any, ...], RegistryImages] | None = None
        self._api: docker.APIClient | None = None
        self.stats = RegistryStats()  # this process's, across the stages it opens

    def report(self) -> StatsSnapshot | None:
        """What this process's stages did since the last report (None: no stage opened)."""
        with self._lock:
            opened = self._current is not None
        return self.stats.delta() if opened else None

    def api(self) -> docker.APIClient:
        """The node's engine, as its environment names it (one client per process)."""
        with self._lock:
            return self._engine()

    def _engine(self) -> docker.APIClient:
        if self._api is None:
            self._api = docker.APIClient(**docker.utils.kwargs_from_env(),
                                         timeout=ENGINE_TIMEOUT_S)
        return self._api

    def get(self, spec: NodeImagesSpec) -> RegistryImages:
        with self._lock:
            if self._current is None or self._current[0] != spec.opened_as():
                if self._current is not None:
                    self._current[1].close()
                    self._current = None
                api = self._engine()
                settings = RegistrySettings(data_dir(), spec.image_cache, spec.docker_config,
                                            spec.look_deadline_s, spec.pull_deadline_s,
                                            spec.certs_dir, prefetch_count=spec.prefetch_count)
                # no catalogue here: an image tagged as envcheck's is adopted when a task
                # first uses it (its repository is then one the caller's catalogue names)
                stage = RegistryImages.on_engine(api, settings, dict(spec.sources),
                                                 stats=self.stats)
                log.info("the node's image cache is open", extra={
                    "engine": stage.engine_id, "budget": spec.image_cache,
                    "data_dir": str(settings.data_dir)})
                self._current = (spec.opened_as(), stage)
            stage = self._current[1]
        if stage.credentials.sources != dict(spec.sources):
            stage.credentials.replace_sources(dict(spec.sources))
        stage.pin(spec.pins)
        return stage
