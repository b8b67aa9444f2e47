"""The image cache on the real engine with tiny images from the real test registry: a budget
smaller than the images (evictions in LRU order; nothing in use, pinned or someone else's
evicted), a shared base layer counted once, an image larger than the whole budget refused,
the ledger settled with the engine at start (adopting only the tagged images of repositories
the stage's catalogue names), prefetch bounded."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import docker
import pytest

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue
from envcheck.core.errors import EngineUnreachable, RegistryFailed
from envcheck.core.results import Reason
from envcheck.registry.cache import Budget, reconcile
from envcheck.registry.fleet import RegistryImages, RegistrySettings
from envcheck.registry.images import LocalImages
from envcheck.registry.pull import PullTarget, cache_tag
from envcheck.registry.usage import LayerCache, footprint
from tests.engine_proxy import EngineProxy
from tests.pulls import MB, Pulled, layered, local_images, manifest_sizes, push_sized, target
from tests.registry_images import new_repository
from tests.registryd import Registry

pytestmark = pytest.mark.docker


def pushed(client: docker.DockerClient, registry: Registry, pulled: Pulled, count: int,
           size: int) -> list[PullTarget]:
    repo = new_repository()
    targets = [target(registry, repo, push_sized(client, registry, repo, f"v{i}", size))
               for i in range(count)]
    pulled.add(*targets)
    return targets


def ensure(images: LocalImages, t: PullTarget) -> float:
    return images.ensure(t.repository, t.digest, time.monotonic() + 120).pull_seconds


def test_budget_smaller_than_the_images_evicts_least_recently_used(
        docker_client: docker.DockerClient, registry_anonymous: Registry,
        pulled_images: Pulled, tmp_path: Path) -> None:
    a, b, c, d = pushed(docker_client, registry_anonymous, pulled_images, 4, 4 * MB)
    images = local_images(docker_client, tmp_path, Budget(bytes=9 * MB))
    assert ensure(images, a) > 0 and ensure(images, b) > 0
    assert ensure(images, a) == 0.0  # on the engine: no pull, and A is now used after B
    assert images.cache.usage() <= 9 * MB
    ensure(images, c)  # 12 MB: B, least recently used, goes
    assert not pulled_images.present(b)
    assert pulled_images.present(a) and pulled_images.present(c)
    ensure(images, d)  # then A
    assert not pulled_images.present(a)
    assert [e.digest for e in images.cache.ledger.entries()] == [c.digest, d.digest]
    assert images.cache.usage() <= 9 * MB
    snap = images.stats.snapshot()
    assert (snap.evictions, snap.hits, snap.misses) == (2, 1, 4)
    assert snap.evicted_bytes >= 8 * MB and snap.budget_bytes == 9 * MB
    images.close()


def test_nothing_in_use_pinned_young_or_someone_elses_is_evicted(
        docker_client: docker.DockerClient, registry_anonymous: Registry,
        pulled_images: Pulled, tmp_path: Path) -> None:
    a, b, c, d = pushed(docker_client, registry_anonymous, pulled_images, 4, 4 * MB)
    # someone else's image on the engine: pulled by tag, not through envcheck
    theirs = pushed(docker_client, registry_anonymous, pulled_images, 1, 4 * MB)[0]
    docker_client.api.pull(theirs.repository, tag=theirs.digest)
    images = local_images(docker_client, tmp_path, Budget(bytes=9 * MB),
                          pinned=lambda: {b.digest, c.reference})
    ensure(images, a)
    ensure(images, b)
    user = docker_client.api.create_container(a.reference, command=["/nothing"])  # stopped
    try:
        ensure(images, c)  # over budget: A is used by a container, B and C pinned
        assert all(pulled_images.present(t) for t in (a, b, c, theirs))
        with pytest.raises(RegistryFailed) as full:
            ensure(images, d)  # nothing may go, and the cache is past its budget
        assert full.value.reason is Reason.IMAGE_CACHE_FULL
        assert not pulled_images.present(d)
        assert images.cache.ledger.pending() == []  # the refused pull left no intent
    finally:
        docker_client.api.remove_container(user["Id"])
    young = local_images(docker_client, tmp_path / "young", Budget(bytes=5 * MB),
                         min_age_s=3600)
    for t in (a, c):  # another cache that just used A and C (8 MB), none pinned
        young.cache.ledger.record(images.cache.ledger.get(t.repository, t.digest))  # type: ignore[arg-type]
    with pytest.raises(RegistryFailed, match="pinned or just used"):
        ensure(young, d)  # just used: not evicted, so D has no room
    assert pulled_images.present(a) and pulled_images.present(c)
    images.close()
    young.close()


def test_shared_base_counted_once_and_not_at_all_when_someone_else_holds_it(
        docker_client: docker.DockerClient, registry_anonymous: Registry,
        pulled_images: Pulled, tmp_path: Path) -> None:
    repo = new_repository()
    digests = layered(docker_client, registry_anonymous, repo, 6 * MB, [1 * MB, 1 * MB, 1 * MB])
    t0, t1, t2 = (target(registry_anonymous, repo, d) for d in digests)
    pulled_images.add(t0, t1, t2)
    images = local_images(docker_client, tmp_path, None)
    ensure(images, t0)
    ensure(images, t1)
    used = images.cache.usage()
    assert 8 * MB <= used < 9 * MB  # 6 + 1 + 1: the base once, not 14
    sizes = [docker_client.api.inspect_image(t.reference)["Size"] for t in (t0, t1)]
    assert sum(sizes) > 13 * MB
    # the third pulled by someone else: the base is no longer envcheck's alone to free
    docker_client.api.pull(t2.repository, tag=t2.digest)
    assert 2 * MB <= images.cache.usage() < 3 * MB
    ids = [docker_client.api.inspect_image(t.reference)["Id"] for t in (t0, t1)]
    alone = footprint(docker_client.api, ids[:1], LayerCache()).usage()
    assert 1 * MB <= alone < 2 * MB
    images.close()


def test_image_larger_than_the_whole_budget_is_refused(
        docker_client: docker.DockerClient, registry_anonymous: Registry,
        pulled_images: Pulled, tmp_path: Path) -> None:
    [big] = pushed(docker_client, registry_anonymous, pulled_images, 1, 6 * MB)
    images = local_images(docker_client, tmp_path, Budget(bytes=4 * MB))
    with pytest.raises(RegistryFailed) as refused:
        ensure(images, big)
    assert refused.value.reason is Reason.IMAGE_CACHE_FULL
    assert "more than the whole image cache" in str(refused.value)
    assert not pulled_images.present(big) and images.cache.ledger.entries() == []
    images.close()


def test_reconcile_drops_the_gone_and_adopts_what_the_ledger_missed(
        docker_client: docker.DockerClient, registry_anonymous: Registry,
        pulled_images: Pulled, tmp_path: Path) -> None:
    a, b, c, d = pushed(docker_client, registry_anonymous, pulled_images, 4, 1 * MB)
    images = local_images(docker_client, tmp_path, None)
    ledger = images.cache.ledger
    for t in (a, b):
        ensure(images, t)
    # A removed behind envcheck's back
    docker_client.api.remove_image(":".join(cache_tag(a)))
    docker_client.api.remove_image(a.reference)
    # B tagged and pulled, then killed before the ledger heard of it
    ledger.forget(b.repository, b.digest)
    # C: the pull was under way when the process died, and the engine finished it
    ledger.begin(c.repository, c.digest, datetime.now(UTC))
    docker_client.api.pull(c.repository, tag=c.digest)
    # D: under way when the process died, the engine never finished it
    ledger.begin(d.repository, d.digest, datetime.now(UTC))

    def ours(t: PullTarget) -> bool:  # this test's images only: the engine is shared
        return t.repository == a.repository

    assert reconcile(docker_client.api, ledger, adopt=ours) == (1, 2)
    assert sorted(e.digest for e in ledger.entries()) == sorted([b.digest, c.digest])
    assert ledger.pending() == []
    assert pulled_images.tagged(c)  # adopted, so tagged as envcheck's
    assert reconcile(docker_client.api, ledger, adopt=ours) == (0, 0)
    images.close()


def test_prefetch_bounded_by_count_and_bytes(
        docker_client: docker.DockerClient, registry_anonymous: Registry,
        pulled_images: Pulled, tmp_path: Path) -> None:
    targets = pushed(docker_client, registry_anonymous, pulled_images, 5, 2 * MB)
    images = local_images(docker_client, tmp_path, None, prefetch_count=2)
    futures = images.prefetch(targets)
    assert len(futures) == 2
    assert all(f.result(timeout=120) is not None for f in futures)
    assert images.ahead == targets[:2]
    assert images.prefetch(targets) == []  # two wait unused: no more
    assert ensure(images, targets[0]) == 0.0  # prefetched: the probe does not wait
    more = images.prefetch(targets)  # one was used: one more goes ahead
    assert len(more) == 1 and more[0].result(timeout=120) is not None
    assert images.ahead == [targets[1], targets[2]]
    images.prefetch_bytes = 3 * MB  # 2 x ~2 MB ahead already: no room for another
    images.prefetch_count = 10
    assert images.prefetch(targets) == []
    assert not pulled_images.present(targets[3])
    images.close()


def test_prefetched_images_count_the_bytes_they_alone_hold(
        docker_client: docker.DockerClient, registry_anonymous: Registry,
        pulled_images: Pulled, tmp_path: Path) -> None:
    """A prefetched image counts what removing it would free, not its whole size: images of
    one dataset share a base, which counted once per image filled the prefetch's bytes with
    two images and held back the pulls ahead."""
    repo = new_repository()
    digests = layered(docker_client, registry_anonymous, repo, 6 * MB, [MB, MB, MB])
    t0, t1, t2 = (target(registry_anonymous, repo, d) for d in digests)
    pulled_images.add(t0, t1, t2)
    images = local_images(docker_client, tmp_path, None, prefetch_count=10,
                          prefetch_bytes=9 * MB)
    for t in (t0, t1):
        [future] = images.prefetch([t])
        assert future.result(timeout=120) is not None
    [third] = images.prefetch([t2])  # 7 MB + 1 MB ahead (the base once): room for it
    assert third.result(timeout=120) is not None
    assert images.ahead == [t0, t1, t2]
    images.close()


def test_too_large_for_the_budget_refused_before_any_blob_moves(
        docker_client: docker.DockerClient, registry_htpasswd: Registry,
        pulled_images: Pulled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    [big] = pushed(docker_client, registry_htpasswd, pulled_images, 1, 6 * MB)
    sizes = manifest_sizes(registry_htpasswd, monkeypatch)
    images = local_images(docker_client, tmp_path, Budget(bytes=4 * MB), sizes=sizes,
                          credentials=lambda _: registry_htpasswd.auth_config)
    before = registry_htpasswd.mark()
    with pytest.raises(RegistryFailed) as refused:
        ensure(images, big)
    assert refused.value.reason is Reason.IMAGE_CACHE_FULL
    assert "compressed" in str(refused.value)
    repo = big.repository.split("/", 1)[1]
    answered = [e.kind for e in registry_htpasswd.entries(before)
                if e.repository == repo and e.status == 200]
    assert answered == ["get_manifest"]  # the manifest (after the challenge), no layer
    assert not pulled_images.present(big) and sizes.asked == 1
    images.close()


def test_prefetch_bytes_bounded_by_the_manifests(
        docker_client: docker.DockerClient, registry_htpasswd: Registry,
        pulled_images: Pulled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    targets = pushed(docker_client, registry_htpasswd, pulled_images, 3, 2 * MB)
    images = local_images(docker_client, tmp_path, None, prefetch_count=10,
                          prefetch_bytes=5 * MB, sizes=manifest_sizes(registry_htpasswd,
                                                                      monkeypatch),
                          credentials=lambda _: registry_htpasswd.auth_config)
    futures = images.prefetch(targets)  # ~4 MB each as estimated: one fits under 5 MB
    assert len(futures) == 1 and futures[0].result(timeout=120) is not None
    assert images.ahead == targets[:1]
    assert not pulled_images.present(targets[1])
    images.close()


def test_a_prefetch_without_room_holds_back_the_images_due_after_it(
        docker_client: docker.DockerClient, registry_htpasswd: Registry,
        pulled_images: Pulled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pulls ahead go in the order the probes are due: when one finds no room, the images
    due after it are not pulled into the room the next probe's image needs."""
    [big] = pushed(docker_client, registry_htpasswd, pulled_images, 1, 6 * MB)
    later = pushed(docker_client, registry_htpasswd, pulled_images, 2, MB)
    images = local_images(docker_client, tmp_path, Budget(bytes=4 * MB), prefetch_count=10,
                          prefetch_threads=1,
                          sizes=manifest_sizes(registry_htpasswd, monkeypatch),
                          credentials=lambda _: registry_htpasswd.auth_config)
    futures = images.prefetch([big, *later])
    assert [f.result(timeout=120) for f in futures] == [None, None, None]
    assert not any(pulled_images.present(t) for t in (big, *later))
    assert images.ahead == []
    assert images.stats.snapshot().prefetches == {"failed": 1}  # the others were not tried
    images.close()


def test_an_engine_that_stops_answering_is_engine_unreachable(
        docker_client: docker.DockerClient, tmp_path: Path) -> None:
    """Not the registry's failure, and no docker or requests exception past the stage."""
    proxy = EngineProxy(tmp_path / "engine.sock")
    client = docker.DockerClient(base_url=proxy.url, version="1.41", timeout=2)
    try:
        images = local_images(client, tmp_path, Budget(bytes=MB))
        proxy.freeze()
        with pytest.raises(EngineUnreachable):
            images.ensure("127.0.0.1:1/a/b", "sha256:" + "a" * 64, time.monotonic() + 5)
        images.close()
    finally:
        proxy.thaw()
        client.close()
        proxy.close()


def watching(path: Path, repositories: list[str]) -> Catalogue:
    """A catalogue following ``repositories`` (at ``:v1``) in their registry."""
    envs = "".join(f'      - id: env-{i}\n        image: "{repo}:v1"\n'
                   for i, repo in enumerate(repositories))
    path.write_text("version: 1\nsuites:\n  cached:\n    description: images envcheck pulls\n"
                    "    defaults: {pull: watch, workdir: /, user: root}\n"
                    "    environments:\n" + envs, encoding="utf-8")
    return load_catalogue([path])


def test_a_new_stage_adopts_only_tagged_images_of_the_repositories_it_uses(
        docker_client: docker.DockerClient, registry_anonymous: Registry,
        pulled_images: Pulled, tmp_path: Path) -> None:
    reg = registry_anonymous
    mine_repo, theirs_repo = new_repository(), new_repository()
    mine = target(reg, mine_repo, push_sized(docker_client, reg, mine_repo, "v1", 1 * MB))
    theirs = target(reg, theirs_repo, push_sized(docker_client, reg, theirs_repo, "v1", 1 * MB))
    pulled_images.add(mine, theirs)
    api = docker_client.api
    # another catalogue's stage on this engine, with a data directory (a ledger) of its own,
    # pulled both: tagged as envcheck's, in its ledger
    other = RegistryImages.open(api, watching(tmp_path / "other.yaml", [mine.repository,
                                                                       theirs.repository]),
                                RegistrySettings(tmp_path / "other"))
    assert other.images is not None
    for t in (mine, theirs):
        assert ensure(other.images, t) > 0
    other.close()
    # a stage whose catalogue names one of them adopts that one, and leaves the other's
    stage = RegistryImages.open(api, watching(tmp_path / "mine.yaml", [mine.repository]),
                                RegistrySettings(tmp_path / "mine", image_cache="1KiB"))
    assert stage.images is not None
    assert [e.reference for e in stage.images.cache.ledger.entries()] == [mine.reference]
    # its budget evicts its own (nothing pins, uses or holds it once the minimum age is off)
    stage.images.cache.min_age_s = 0.0
    evicted = stage.images.cache.make_room(0)
    assert [e.entry.reference for e in evicted] == [mine.reference]
    assert not pulled_images.present(mine) and pulled_images.present(theirs)
    stage.close()
    # a node's stage has no catalogue: it adopts none at start, and one when a task uses it
    node = RegistryImages.on_engine(api, RegistrySettings(tmp_path / "node"), {})
    assert node.images is not None and node.images.cache.ledger.entries() == []
    assert ensure(node.images, theirs) == 0.0  # on the engine: no pull
    assert [e.reference for e in node.images.cache.ledger.entries()] == [theirs.reference]
    node.close()
