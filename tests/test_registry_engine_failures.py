"""What the engine says about a failed pull, classified on its text: first the texts the engine
and Docker Hub are known to send, then each case made for real (the real engine pulling from
the real test registry, faults through the proxy)."""

from __future__ import annotations

import time
from pathlib import Path

import docker
import pytest

from envcheck.core.errors import ImageNotFound, RegistryFailed
from envcheck.core.results import Reason
from envcheck.registry.engine_failures import classify, classify_event
from envcheck.registry.pull import Puller, PullLimits, PullTarget
from tests.pulls import Pulled, target
from tests.registry_images import new_repository, push_tiny
from tests.registry_proxy import RegistryProxy, too_many_requests
from tests.registryd import Registry

KNOWN = [  # (text, status, reason, transient): engine 20.10 and Docker Hub's own words
    ('Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused', 500,
     Reason.REGISTRY_UNREACHABLE, True),
    ('Head "http://127.0.0.1:5000/v2/a/manifests/v1": no basic auth credentials', 500,
     Reason.REGISTRY_AUTH_FAILED, False),
    ("unauthorized: authentication required", 401, Reason.REGISTRY_AUTH_FAILED, False),
    ("manifest for 127.0.0.1:5000/a@sha256:00 not found: manifest unknown: manifest unknown",
     404, Reason.IMAGE_NOT_FOUND, False),
    ("toomanyrequests: You have reached your pull rate limit. You may increase the limit by "
     "authenticating and upgrading: https://www.docker.com/increase-rate-limits", 500,
     Reason.REGISTRY_RATE_LIMITED, False),
    ("toomanyrequests: Too Many Requests (HAP429).", 500, Reason.REGISTRY_RATE_LIMITED, False),
    ("pull access denied for nosuch/repo, repository does not exist or may require 'docker "
     "login': denied: requested access to the resource is denied", 404,
     Reason.REGISTRY_AUTH_FAILED, False),
    ('Get "https://registry.example/v2/": dial tcp: lookup registry.example: no such host', 500,
     Reason.REGISTRY_UNREACHABLE, True),
    ('Get "https://r.example/v2/": net/http: request canceled while waiting for connection '
     "(Client.Timeout exceeded while awaiting headers) i/o timeout", 500,
     Reason.REGISTRY_UNREACHABLE, True),
    ("received unexpected HTTP status: 503 Service Unavailable", 500,
     Reason.REGISTRY_UNREACHABLE, True),
    ("failed to register layer: Error processing tar file(exit status 1): write "
     "/usr/lib/x.so: no space left on device", None, Reason.IMAGE_CACHE_FULL, False),
    ("open /var/lib/docker/tmp/x: permission denied", 500, Reason.REGISTRY_UNREACHABLE, False),
]


@pytest.mark.parametrize(("text", "status", "reason", "transient"), KNOWN)
def test_known_texts(text: str, status: int | None, reason: Reason, transient: bool) -> None:
    failure = classify(text, status)
    assert (failure.reason, failure.transient) == (reason, transient)
    assert failure.disk_full is (reason is Reason.IMAGE_CACHE_FULL)


def test_the_text_wins_over_the_status() -> None:
    # a 429 and missing credentials arrive as 500; a disk that fills arrives as a stream event
    assert classify("toomanyrequests: slow down", 500).reason is Reason.REGISTRY_RATE_LIMITED
    assert classify("", 401).reason is Reason.REGISTRY_AUTH_FAILED
    assert classify("", 404).reason is Reason.IMAGE_NOT_FOUND
    event = {"errorDetail": {"message": "write /x: no space left on device"},
             "error": "write /x: no space left on device"}
    found = classify_event(event)
    assert found is not None and found.disk_full
    assert classify_event({"status": "Downloading", "id": "abc"}) is None


def test_error_names_the_registry_and_keeps_the_engine_text() -> None:
    error = classify("unauthorized: authentication required", 401).error("r.example:5000",
                                                                           "r.example:5000/a@x")
    assert isinstance(error, RegistryFailed)
    assert error.reason is Reason.REGISTRY_AUTH_FAILED and error.registry == "r.example:5000"
    assert error.details["engine_status"] == 401
    missing = classify("manifest unknown", 404).error("r.example", "r.example/a@x")
    assert isinstance(missing, ImageNotFound) and missing.registry == "r.example"


# --- each for real --------------------------------------------------------------------------
@pytest.fixture
def pushed(docker_client: docker.DockerClient, registry_htpasswd: Registry,
           pulled_images: Pulled) -> PullTarget:
    repo = new_repository()
    t = target(registry_htpasswd, repo, push_tiny(docker_client, registry_htpasswd, repo, "v1"))
    pulled_images.add(t)
    return t


def _fails(puller: Puller, t: PullTarget) -> RegistryFailed | ImageNotFound:
    with pytest.raises((RegistryFailed, ImageNotFound)) as failed:
        puller.pull(t, time.monotonic() + 60)
    assert isinstance(failed.value, RegistryFailed | ImageNotFound)
    return failed.value


@pytest.mark.docker
def test_wrong_password_is_auth_failed_and_not_retried(
        docker_client: docker.DockerClient, registry_htpasswd: Registry,
        pushed: PullTarget) -> None:
    puller = Puller(docker_client.api, credentials=lambda _: {"username": "envcheck",
                                                              "password": "wrong"})
    error = _fails(puller, pushed)
    assert isinstance(error, RegistryFailed)
    assert error.reason is Reason.REGISTRY_AUTH_FAILED
    assert error.registry == registry_htpasswd.host
    assert sum(puller.stats.snapshot().pulls.values()) == 1  # one attempt


@pytest.mark.docker
def test_missing_credentials_is_auth_failed(docker_client: docker.DockerClient,
                                            pushed: PullTarget, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))  # the Docker CLI's config: empty
    error = _fails(Puller(docker_client.api), pushed)
    assert isinstance(error, RegistryFailed)
    assert error.reason is Reason.REGISTRY_AUTH_FAILED
    assert "no basic auth credentials" in str(error.details["engine_message"])


@pytest.mark.docker
def test_unknown_digest_and_repository_are_not_found(
        docker_client: docker.DockerClient, registry_htpasswd: Registry,
        pushed: PullTarget) -> None:
    puller = Puller(docker_client.api, credentials=lambda _: registry_htpasswd.auth_config)
    for t in (PullTarget(pushed.repository, "sha256:" + "0" * 64),
              PullTarget(f"{registry_htpasswd.host}/no/such-repository", pushed.digest)):
        error = _fails(puller, t)
        assert isinstance(error, ImageNotFound), error
        assert "manifest unknown" in str(error.details["engine_message"])
    assert sum(puller.stats.snapshot().pulls.values()) == 2  # not retried


@pytest.mark.docker
def test_stopped_registry_is_unreachable_after_retries(
        docker_client: docker.DockerClient, registry_htpasswd: Registry,
        pushed: PullTarget) -> None:
    puller = Puller(docker_client.api, credentials=lambda _: registry_htpasswd.auth_config,
                    limits=PullLimits(attempts=2))
    with registry_htpasswd.stopped():
        error = _fails(puller, pushed)
    assert isinstance(error, RegistryFailed)
    assert error.reason is Reason.REGISTRY_UNREACHABLE
    assert "connection refused" in str(error.details["engine_message"])
    assert puller.stats.snapshot().pulls == {
        (registry_htpasswd.host, Reason.REGISTRY_UNREACHABLE.value): 2}


@pytest.mark.docker
@pytest.mark.slow
def test_429_is_rate_limited_and_backs_off_that_registry_alone(
        docker_client: docker.DockerClient, registry_htpasswd: Registry,
        registry_proxy: RegistryProxy, pushed: PullTarget, pulled_images: Pulled) -> None:
    through_proxy = PullTarget(f"{registry_proxy.host}/{pushed.repository.split('/', 1)[1]}",
                               pushed.digest)
    pulled_images.add(through_proxy)
    registry_proxy.answer(*too_many_requests())
    puller = Puller(docker_client.api, credentials=lambda _: registry_htpasswd.auth_config)
    error = _fails(puller, through_proxy)
    assert isinstance(error, RegistryFailed)
    assert error.reason is Reason.REGISTRY_RATE_LIMITED
    assert "toomanyrequests" in str(error.details["engine_message"])
    answered = registry_proxy.answered
    again = _fails(puller, through_proxy)  # backing off: the engine is not even asked
    assert isinstance(again, RegistryFailed)
    assert again.reason is Reason.REGISTRY_RATE_LIMITED and "backoff_left_s" in again.details
    assert registry_proxy.answered == answered
    puller.pull(pushed, time.monotonic() + 60)  # the same engine, another registry: pulled
