"""Pulls by digest on the real engine from the real test registry: tagged as envcheck's cache,
confirmed by the digest the engine records, cut at a deadline with nothing left that looks
complete, retried only when the failure may pass, limited per registry, counted."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from envcheck.core.errors import RegistryFailed
from envcheck.core.results import Reason
from envcheck.registry.pull import (
    CACHE_REPOSITORY,
    Puller,
    PullLimits,
    PullTarget,
    cache_tag,
    holds,
    registry_of,
)
from envcheck.registry.reference import ImageReference
from envcheck.registry.stats import OUTCOME_OK, OUTCOME_TIMEOUT
from tests.polling import wait_for
from tests.pulls import MB, Pulled, push_sized, target
from tests.registry_images import new_repository, push_tiny
from tests.registry_proxy import RegistryProxy
from tests.registryd import Registry

pytestmark = pytest.mark.docker


class FreezeOnProgress(logging.Handler):
    """Freezes the proxy (the registry hangs) at the pull's first progress line with bytes:
    the pull is then mid-blob."""

    def __init__(self, proxy: RegistryProxy) -> None:
        super().__init__()
        self.proxy = proxy
        self.frozen_at = 0

    def emit(self, record: logging.LogRecord) -> None:
        downloaded = getattr(record, "downloaded_bytes", 0)
        if not self.frozen_at and record.getMessage() == "pull progress" and downloaded > 0:
            self.proxy.freeze()
            self.frozen_at = int(downloaded)


def test_cache_tag_and_targets() -> None:
    t = PullTarget("127.0.0.1:5000/ns/img", "sha256:" + "ab" * 32)
    assert cache_tag(t) == (f"{CACHE_REPOSITORY}/127.0.0.1-5000/ns/img", "ab" * 32)
    assert registry_of("ubuntu") == "docker.io"
    assert registry_of("ghcr.io/org/img") == "ghcr.io"
    hub = PullTarget("ubuntu", "sha256:" + "cd" * 32)  # one spelling per repository
    assert hub == PullTarget("docker.io/library/ubuntu", hub.digest)
    assert hub.repository == "docker.io/library/ubuntu"
    assert cache_tag(hub) == (f"{CACHE_REPOSITORY}/docker.io/library/ubuntu", "cd" * 32)
    engine_says = {"RepoDigests": [f"ubuntu@{hub.digest}"]}  # the engine's short spelling
    assert holds(engine_says, hub)
    assert not holds({"RepoDigests": [f"ubuntu@sha256:{'ef' * 32}"]}, hub)
    assert PullTarget.of(ImageReference.parse("ghcr.io/o/e:v3"), hub.digest) == PullTarget(
        "ghcr.io/o/e", hub.digest)
    long = PullTarget("r.example/" + "/".join(["segment"] * 30), "sha256:" + "ef" * 32)
    assert len(f"{CACHE_REPOSITORY}/{long.repository}") > 255  # too long with the prefix
    assert len(cache_tag(long)[0]) <= 255 and cache_tag(long)[0].startswith(CACHE_REPOSITORY)
    for bad in ("sha256:abc", "latest", "md5:" + "a" * 32):
        with pytest.raises(ValueError, match="sha256 digest"):
            PullTarget("r.example/img", bad)
    with pytest.raises(ValueError, match="without a tag"):
        PullTarget("r.example/img:v1", "sha256:" + "ab" * 32)


def test_pull_by_digest_is_tagged_confirmed_and_counted(
        docker_client: docker.DockerClient, registry_htpasswd: Registry,
        pulled_images: Pulled) -> None:
    repo = new_repository()
    digest = push_sized(docker_client, registry_htpasswd, repo, "v1", 3 * MB)
    t = target(registry_htpasswd, repo, digest)
    pulled_images.add(t)
    puller = Puller(docker_client.api, credentials=lambda _: registry_htpasswd.auth_config)
    before = registry_htpasswd.mark()
    pulled = puller.pull(t, time.monotonic() + 120)
    # the moving tag was never asked for: the manifest by digest, then the blobs
    asked = registry_htpasswd.entries(before)
    assert not [e for e in asked if e.path.endswith("/manifests/v1")]
    assert any(e.path.endswith(f"/manifests/{digest}") for e in asked)
    attrs = docker_client.api.inspect_image(pulled.image_id)
    assert t.reference in attrs["RepoDigests"]
    name, tag = cache_tag(t)
    assert f"{name}:{tag}" in attrs["RepoTags"]  # prune does not take it for dangling
    assert pulled.downloaded >= 3 * MB and pulled.attempts == 1 and pulled.seconds > 0
    snap = puller.stats.snapshot()
    assert snap.pulls == {(registry_htpasswd.host, OUTCOME_OK): 1}
    assert snap.pull_bytes[registry_htpasswd.host] == pulled.downloaded
    assert snap.pull_seconds[(registry_htpasswd.host, OUTCOME_OK)] > 0


def test_deadline_cancels_a_pull_hanging_mid_blob(
        docker_client: docker.DockerClient, registry_htpasswd: Registry,
        registry_proxy: RegistryProxy, pulled_images: Pulled) -> None:
    """The registry stops answering mid-blob: the pull is cut at its deadline, the engine
    cancels it, and no image that looks complete is left (nor envcheck's tag)."""
    repo = new_repository()
    digest = push_sized(docker_client, registry_htpasswd, repo, "v1", 48 * MB)
    t = PullTarget(f"{registry_proxy.host}/{repo}", digest)
    pulled_images.add(t)
    puller = Puller(docker_client.api, credentials=lambda _: registry_htpasswd.auth_config,
                    limits=PullLimits(log_every_s=0.0))
    mid_blob = FreezeOnProgress(registry_proxy)
    logger = logging.getLogger("envcheck.registry.pull")
    level = logger.level
    logger.addHandler(mid_blob)
    logger.setLevel(logging.INFO)
    with pytest.raises(RegistryFailed) as failed:
        try:
            puller.pull(t, time.monotonic() + 6)
        finally:
            logger.removeHandler(mid_blob)
            logger.setLevel(level)
    assert mid_blob.frozen_at > 0, "the registry was frozen once bytes flowed"
    assert failed.value.reason is Reason.REGISTRY_UNREACHABLE
    assert failed.value.details["timeout"] is True
    assert puller.stats.snapshot().pulls == {(registry_proxy.host, OUTCOME_TIMEOUT): 1}
    registry_proxy.thaw()  # the registry wakes: a pull still running would now complete
    time.sleep(3)
    assert not pulled_images.present(t) and not pulled_images.tagged(t)


def test_deadline_cancels_a_pull_before_the_engine_answers(
        docker_client: docker.DockerClient, registry_htpasswd: Registry,
        registry_proxy: RegistryProxy, pulled_images: Pulled) -> None:
    """A registry that hangs on the manifest keeps the engine from answering at all: the
    connection is shut all the same, and nothing is pulled once the registry wakes."""
    repo = new_repository()
    digest = push_tiny(docker_client, registry_htpasswd, repo, "v1")
    t = PullTarget(f"{registry_proxy.host}/{repo}", digest)
    pulled_images.add(t)
    registry_proxy.freeze()
    puller = Puller(docker_client.api, credentials=lambda _: registry_htpasswd.auth_config)
    with pytest.raises(RegistryFailed, match="deadline passed pulling"):
        puller.pull(t, time.monotonic() + 3)
    registry_proxy.thaw()
    time.sleep(3)
    assert not pulled_images.present(t)


def test_transient_failure_retried_until_the_registry_is_back(
        docker_client: docker.DockerClient, registry_anonymous: Registry,
        pulled_images: Pulled) -> None:
    repo = new_repository()
    digest = push_tiny(docker_client, registry_anonymous, repo, "v1")
    t = target(registry_anonymous, repo, digest)
    pulled_images.add(t)
    puller = Puller(docker_client.api, limits=PullLimits(attempts=6))
    registry_anonymous.stop()
    try:
        def start_after_first_failure() -> None:
            wait_for(lambda: puller.stats.snapshot().pulls, timeout_s=60,
                     what="a first failed attempt", interval_s=0.02)
            registry_anonymous.start()

        starter = threading.Thread(target=start_after_first_failure, daemon=True)
        starter.start()
        pulled = puller.pull(t, time.monotonic() + 120)
        starter.join(30)
    finally:
        registry_anonymous.start()
    assert pulled.attempts >= 2
    pulls = puller.stats.snapshot().pulls
    assert pulls[(registry_anonymous.host, Reason.REGISTRY_UNREACHABLE.value)] >= 1
    assert pulls[(registry_anonymous.host, OUTCOME_OK)] == 1


def test_limits_per_registry_and_in_all_make_a_pull_wait(
        docker_client: docker.DockerClient, registry_htpasswd: Registry,
        registry_proxy: RegistryProxy, pulled_images: Pulled) -> None:
    """With one pull per registry, a pull waits while another holds the registry's slot (a
    hanging one here), and its deadline passes waiting, before it asks the engine; with one
    pull in all, so does a pull from another registry."""
    repo = new_repository()
    first = push_tiny(docker_client, registry_htpasswd, repo, "v1")
    second = push_tiny(docker_client, registry_htpasswd, repo, "v2")
    t1 = PullTarget(f"{registry_proxy.host}/{repo}", first)
    t2 = PullTarget(f"{registry_proxy.host}/{repo}", second)
    pulled_images.add(t1, t2)
    puller = Puller(docker_client.api, limits=PullLimits(per_registry=1, total=4),
                    credentials=lambda _: registry_htpasswd.auth_config)
    registry_proxy.freeze()

    def hang_with(by: Puller) -> Callable[[], None]:
        def hang() -> None:
            with contextlib.suppress(RegistryFailed):
                by.pull(t1, time.monotonic() + 8)
        return hang

    hung = threading.Thread(target=hang_with(puller), daemon=True)
    hung.start()
    wait_for(lambda: registry_proxy.connections > 0, timeout_s=30,
             what="the first pull to reach the registry")
    connections = registry_proxy.connections
    with pytest.raises(RegistryFailed, match=f"waiting for a pull slot for {registry_proxy.host}"):
        puller.pull(t2, time.monotonic() + 2)
    assert registry_proxy.connections == connections  # the second never reached the registry
    hung.join(30)
    registry_proxy.thaw()
    # one pull in all: a pull from another registry waits for the engine's one slot
    engine_wide = Puller(docker_client.api, limits=PullLimits(per_registry=2, total=1),
                         credentials=lambda _: registry_htpasswd.auth_config)
    registry_proxy.freeze()
    hung = threading.Thread(target=hang_with(engine_wide), daemon=True)
    hung.start()
    wait_for(lambda: registry_proxy.connections > connections, timeout_s=30,
             what="the hanging pull to reach the registry")
    direct = PullTarget(f"{registry_htpasswd.host}/{repo}", second)
    with pytest.raises(RegistryFailed, match="waiting for a pull slot on this engine"):
        engine_wide.pull(direct, time.monotonic() + 2)
    hung.join(30)
    registry_proxy.thaw()
    assert not pulled_images.present(direct)


def test_no_secret_in_logs_or_errors(docker_client: docker.DockerClient,
                                     registry_htpasswd: Registry, pulled_images: Pulled,
                                     caplog: pytest.LogCaptureFixture,
                                     tmp_path: Path) -> None:
    repo = new_repository()
    digest = push_tiny(docker_client, registry_htpasswd, repo, "v1")
    t = target(registry_htpasswd, repo, digest)
    pulled_images.add(t)
    caplog.set_level("DEBUG")
    wrong = Puller(docker_client.api, credentials=lambda _: {
        "username": "envcheck", "password": "wrong-" + str(registry_htpasswd.password)})
    with pytest.raises(RegistryFailed) as failed:
        wrong.pull(t, time.monotonic() + 60)
    Puller(docker_client.api, credentials=lambda _: registry_htpasswd.auth_config,
           limits=PullLimits(log_every_s=0.0)).pull(t, time.monotonic() + 60)
    texts = [str(vars(r)) for r in caplog.records] + [str(failed.value),
                                                      repr(failed.value.details)]
    assert any(r.getMessage() == "pull progress" for r in caplog.records)
    assert registry_htpasswd.password
    assert not [x for x in texts if str(registry_htpasswd.password) in x]
