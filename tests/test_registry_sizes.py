"""The room a pull reserves, from its manifest's size, on the real engine and registry: a layer
counted once among the pulls under way in this process (the images of a dataset share a
base, and at the start nothing is pulled yet, so each pull's size held the base), and counted
again once the pull that claimed it ended without it (failed, refused for room, or past its
deadline)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import docker
import pytest

from envcheck.core.clock import SystemClock
from envcheck.core.errors import RegistryFailed
from envcheck.core.results import Reason
from envcheck.registry.cache import Budget
from envcheck.registry.pull import Pulled as PullDone
from envcheck.registry.pull import PullTarget
from tests.pulls import MB, Pulled, layered, local_images, manifest_sizes, target
from tests.registry_images import new_repository
from tests.registryd import Registry

pytestmark = pytest.mark.docker

BASE = 6 * MB  # random bytes: compressed as large


def sharing_a_base(client: docker.DockerClient, registry: Registry, pulled: Pulled
                   ) -> tuple[PullTarget, PullTarget]:
    """Two images of a 6 MiB base and a 1 MiB layer of their own each, in the registry."""
    repo = new_repository()
    first, second = (target(registry, repo, d)
                     for d in layered(client, registry, repo, BASE, [MB, MB]))
    pulled.add(first, second)
    return first, second


def test_pulls_ahead_at_once_count_their_shared_base_once(
        docker_client: docker.DockerClient, registry_htpasswd: Registry,
        pulled_images: Pulled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Estimated 2 x (6 + 1) and 2 x 1 MiB: 16 MiB fit the 20 MiB budget, where the base
    counted in both (28 MiB) left the second prefetch no room."""
    first, second = sharing_a_base(docker_client, registry_htpasswd, pulled_images)
    sizes = manifest_sizes(registry_htpasswd, monkeypatch)
    images = local_images(docker_client, tmp_path, Budget(bytes=20 * MB), sizes=sizes,
                          prefetch_count=2, prefetch_threads=2,
                          credentials=lambda _: registry_htpasswd.auth_config)
    # the first pull is held until the second has begun (or given up): the second's size
    # and room are asked while the first is under way, however fast the engine pulls
    second_began = threading.Event()
    pull = images.puller.pull

    def held(t: PullTarget, deadline: float) -> PullDone:
        if t == second:
            second_began.set()
        elif t == first:
            second_began.wait(120)
        return pull(t, deadline)

    monkeypatch.setattr(images.puller, "pull", held)
    futures = images.prefetch([first, second])
    assert len(futures) == 2
    futures[1].add_done_callback(lambda _done: second_began.set())
    assert all(f.result(timeout=180) is not None for f in futures)
    assert pulled_images.present(first) and pulled_images.present(second)
    assert images.stats.snapshot().prefetches == {"ok": 2}
    assert images.cache.usage() <= 20 * MB
    images.close()
    assert sizes.claimed() == frozenset()  # every claim ended with its pull


def test_a_pull_that_ends_without_the_base_gives_its_claim_back(
        docker_client: docker.DockerClient, registry_htpasswd: Registry,
        pulled_images: Pulled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = sharing_a_base(docker_client, registry_htpasswd, pulled_images)
    clock = Shifted()
    sizes = manifest_sizes(registry_htpasswd, monkeypatch, clock=clock)

    def second_size() -> int:
        size = sizes.size(second, clock.monotonic() + 60)
        sizes.ended(second)
        assert size is not None
        return size

    assert second_size() > BASE + MB  # nothing claimed, nothing on the engine: all of it
    soon = clock.monotonic() + 60
    assert (sizes.size(first, soon) or 0) > BASE + MB  # the first to ask counts the base
    assert second_size() < 2 * MB  # while the first is under way: its own layer alone
    sizes.ended(first)
    assert second_size() > BASE + MB
    # a claim lasts to its pull's deadline at most, whatever its caller does
    sizes.size(first, soon)
    clock.offset = 61.0
    assert second_size() > BASE + MB and sizes.claimed() == frozenset()

    # the engine refuses the pull (no credentials for the registry): the base is not on the
    # engine, and the next size counts it again
    refused = local_images(docker_client, tmp_path / "refused", Budget(bytes=20 * MB),
                           sizes=sizes, credentials=lambda _: None)
    with pytest.raises(RegistryFailed) as failed:
        refused.ensure(first.repository, first.digest, time.monotonic() + 120)
    assert failed.value.reason is Reason.REGISTRY_AUTH_FAILED
    assert not pulled_images.present(first)
    assert sizes.claimed() == frozenset() and second_size() > BASE + MB
    refused.close()

    # a prefetch refused for room (14 MiB estimated, 10 MiB of budget), and the one due after
    # it, given up before its pull (its estimate claimed its own layer): both claims go
    no_room = local_images(docker_client, tmp_path / "no-room", Budget(bytes=10 * MB),
                           sizes=sizes, credentials=lambda _: registry_htpasswd.auth_config,
                           prefetch_threads=1)
    futures = no_room.prefetch([first, second])
    assert [f.result(timeout=120) for f in futures] == [None, None]
    no_room.close()
    assert no_room.stats.snapshot().prefetches == {"failed": 1}
    assert sizes.claimed() == frozenset() and second_size() > BASE + MB
    # a prefetch past its bytes (14 MiB estimated, 1 MiB ahead at most): not even begun
    bounded = local_images(docker_client, tmp_path / "bounded", None, sizes=sizes,
                           prefetch_bytes=MB)
    assert bounded.prefetch([first]) == []
    bounded.close()
    assert sizes.claimed() == frozenset() and second_size() > BASE + MB
    assert not pulled_images.present(first)


class Shifted(SystemClock):
    """The system clock, moved forward on demand: a pull's deadline passes without waiting."""

    offset = 0.0

    def monotonic(self) -> float:
        return super().monotonic() + self.offset
