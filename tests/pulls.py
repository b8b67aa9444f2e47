"""Helpers for the tests of envcheck's pulls and image cache: images of a chosen size (and
images sharing a base layer) pushed to the test registry, and the pulled images removed again
(the engine is shared: a test removes only what it pulled).
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import uuid
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from envcheck.core.clock import SYSTEM_CLOCK, Clock
from envcheck.registry.cache import Budget, ImageCache
from envcheck.registry.credentials import CredentialSource, RegistryCredentials
from envcheck.registry.images import ImageSizes, LocalImages
from envcheck.registry.ledger import SqliteLedger, ledger_path
from envcheck.registry.pull import Credentials, Puller, PullTarget, cache_tag
from envcheck.registry.sizes import ManifestSizes
from envcheck.registry.watch import TagWatcher
from tests.registry_images import push_built, push_tiny
from tests.registryd import Registry

__all__ = ["Pulled", "layered", "local_images", "manifest_sizes", "pulled_images", "push_sized",
           "target"]

MB = 1 << 20


def push_sized(client: docker.DockerClient, registry: Registry, repository: str, tag: str,
               size: int) -> str:
    """An image of one layer holding ``size`` random bytes (incompressible, so its
    compressed and unpacked sizes agree) pushed as ``repository:tag``; its digest."""
    return push_tiny(client, registry, repository, tag, os.urandom(size))


def layered(client: docker.DockerClient, registry: Registry, repository: str,
            base_size: int, top_sizes: list[int]) -> list[str]:
    """Images ``repository:i`` sharing one base layer of ``base_size`` random bytes, each
    with a top layer of its own (``top_sizes[i]`` bytes), pushed; their digests."""
    base = f"envcheck-test-base/b{uuid.uuid4().hex[:12]}"
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as archive:
        info = tarfile.TarInfo("base.bin")
        info.size = base_size
        archive.addfile(info, io.BytesIO(os.urandom(base_size)))
    client.api.import_image_from_data(tar.getvalue(), repository=base, tag="v1")
    try:
        return [push_built(client, registry, repository, str(i),
                           f"FROM {base}:v1\nCOPY top.bin /top.bin\n",
                           {"top.bin": os.urandom(size)})
                for i, size in enumerate(top_sizes)]
    finally:
        client.images.remove(f"{base}:v1", force=True)


def target(registry: Registry, repository: str, digest: str) -> PullTarget:
    return PullTarget(f"{registry.host}/{repository}", digest)


class Pulled:
    """Every image a test may have pulled, removed at its end (envcheck's cache tag and
    the digest reference), whatever the test left."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self.targets: list[PullTarget] = []

    def add(self, *targets: PullTarget) -> None:
        self.targets.extend(targets)

    def present(self, t: PullTarget) -> bool:
        try:
            attrs = self.client.api.inspect_image(t.reference)
        except docker.errors.NotFound:
            return False
        return t.reference in (attrs.get("RepoDigests") or [])

    def tagged(self, t: PullTarget) -> bool:
        name, tag = cache_tag(t)
        try:
            self.client.api.inspect_image(f"{name}:{tag}")
        except docker.errors.NotFound:
            return False
        return True

    def remove_all(self) -> None:
        for t in self.targets:
            name, tag = cache_tag(t)
            for ref in (f"{name}:{tag}", t.reference):
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    self.client.api.remove_image(ref, force=True)


@pytest.fixture
def pulled_images(docker_client: docker.DockerClient) -> Iterator[Pulled]:
    pulled = Pulled(docker_client)
    yield pulled
    pulled.remove_all()


def local_images(client: docker.DockerClient, data_dir: Path, budget: Budget | None, *,
                 credentials: Credentials | None = None,
                 pinned: Callable[[], Collection[str]] = frozenset, min_age_s: float = 0.0,
                 sizes: ImageSizes | None = None, **options: Any) -> LocalImages:
    """The registry stage's facade over the real engine, its ledger under ``data_dir``."""
    engine_id = str(client.info()["ID"])
    ledger = SqliteLedger(ledger_path(data_dir, engine_id), engine_id)
    puller = Puller(client.api, credentials=credentials)
    cache = ImageCache(client.api, ledger, budget, stats=puller.stats, pinned=pinned,
                       min_age_s=min_age_s)
    return LocalImages(client.api, puller, cache, sizes=sizes, **options)


def manifest_sizes(registry: Registry, monkeypatch: pytest.MonkeyPatch, *,
                   clock: Clock = SYSTEM_CLOCK) -> ManifestSizes:
    """Sizes read through the tag watch's HTTP and auth, with the catalogue's credentials."""
    monkeypatch.setenv("ENVCHECK_TEST_REGISTRY_LOGIN", f"{registry.user}:{registry.password}")
    credentials = RegistryCredentials(
        {registry.host: CredentialSource(env="ENVCHECK_TEST_REGISTRY_LOGIN")})
    return ManifestSizes(TagWatcher(), credentials, clock=clock)
