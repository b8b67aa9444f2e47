"""The engine's disk fills during a pull: envcheck evicts its least recently used pull and
tries once more; an image that does not fit even then is ``error image_cache_full``
(envcheck's, never the environment's), and what it evicted and pulled is in the ledger.

Real parts: a second Docker engine whose data root is a loop-mounted ext4 of 200 MB, pulling
from the real test registry. An engine holds a layer twice while it pulls it (the download,
then the unpacked layer), so an image of a third of the disk fills it when another one is
already there, and one of more than half the disk never fits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from envcheck.core.errors import RegistryFailed
from envcheck.core.results import Reason
from envcheck.registry.cache import ImageCache
from envcheck.registry.images import LocalImages
from envcheck.registry.ledger import SqliteLedger, ledger_path
from envcheck.registry.pull import Puller, PullTarget
from tests.pulls import push_sized, target
from tests.registry_images import new_repository
from tests.registryd import Registry
from tests.second_engine import SecondEngine, require_loop_devices, second_engine

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def small_disk_engine() -> Iterator[SecondEngine]:
    require_loop_devices()
    with second_engine(disk_mb=200) as engine:
        yield engine


def test_disk_full_mid_pull_evicts_and_retries_once_then_refuses(
        small_disk_engine: SecondEngine, docker_client: docker.DockerClient,
        registry_anonymous: Registry, tmp_path: Path) -> None:
    engine = small_disk_engine
    free = engine.free_bytes()
    repo = new_repository()
    third, most = int(free * 0.4), int(free * 0.6)
    a, b, c = (target(registry_anonymous, repo, push_sized(docker_client, registry_anonymous,
                                                          repo, tag, size))
               for tag, size in (("a", third), ("b", third), ("c", most)))
    engine_id = str(engine.client.info()["ID"])
    ledger = SqliteLedger(ledger_path(tmp_path, engine_id), engine_id)
    puller = Puller(engine.client.api)
    images = LocalImages(engine.client.api, puller,
                         ImageCache(engine.client.api, ledger, None, stats=puller.stats,
                                    min_age_s=0.0))

    def ensure(t: PullTarget) -> None:
        images.ensure(t.repository, t.digest, time.monotonic() + 300)

    def present(t: PullTarget) -> bool:
        return any(t.reference in (img.attrs.get("RepoDigests") or [])
                   for img in engine.client.images.list())

    ensure(a)
    ensure(b)  # the disk fills mid-pull: A goes, B is tried once more and fits
    assert present(b) and not present(a)
    assert [e.digest for e in ledger.entries()] == [b.digest]
    pulls = puller.stats.snapshot().pulls
    host = registry_anonymous.host
    assert pulls[(host, Reason.IMAGE_CACHE_FULL.value)] == 1
    assert pulls[(host, "ok")] == 2
    assert puller.stats.snapshot().evictions == 1
    with pytest.raises(RegistryFailed) as refused:
        ensure(c)  # more than half the disk: full again after B went too
    assert refused.value.reason is Reason.IMAGE_CACHE_FULL
    assert "no space left on device" in str(refused.value.details["engine_message"])
    assert not present(c) and ledger.entries() == [] and ledger.pending() == []
    images.close()
    ledger.close()
