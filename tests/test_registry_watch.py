"""The tag watch on the real registry (Debian's docker-registry on 127.0.0.1, images pushed
through the real engine): what a look costs, asserted from the registry's own access log; a
moved tag; each failure class; the token flow; an index whose other platform changes."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import docker
import pytest

from envcheck.catalogue.loader import load_catalogue
from envcheck.core.results import Reason
from envcheck.registry import (
    ANONYMOUS,
    Change,
    Credentials,
    ImageReference,
    RegistryCredentials,
    RegistryFailure,
    TagLook,
    TagWatcher,
    TagWatchState,
    WatchSettings,
)
from envcheck.registry.fleet import RegistryImages
from tests.registry_images import RegistryApi, new_repository, push_tiny
from tests.registry_proxy import RegistryProxy, too_many_requests
from tests.registryd import Registry
from tests.token_issuer import IssuerKey

pytestmark = pytest.mark.docker


class ShiftedClock:
    """The system clock, moved forward on demand: tokens expire and watch intervals pass
    without waiting for them."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset)


def creds(registry: Registry) -> Credentials:
    return Credentials(registry.user, registry.password, source="the test's credentials")


def ref(host: str, repository: str, tag: str) -> ImageReference:
    return ImageReference.parse(f"{host}/{repository}:{tag}")


def looked(outcome: TagLook | RegistryFailure) -> TagLook:
    assert isinstance(outcome, TagLook), outcome
    return outcome


def failed(outcome: TagLook | RegistryFailure, reason: Reason) -> RegistryFailure:
    assert isinstance(outcome, RegistryFailure), outcome
    assert outcome.reason == reason, outcome
    return outcome


@pytest.fixture
def watcher() -> TagWatcher:
    w = TagWatcher()
    yield w  # type: ignore[misc]
    w.close()


def test_an_unchanged_tag_costs_one_head_and_nothing_else(
        registry_htpasswd: Registry, registry_proxy: RegistryProxy,
        docker_client: docker.DockerClient, watcher: TagWatcher) -> None:
    repo = new_repository()
    digest = push_tiny(docker_client, registry_htpasswd, repo, "v1")
    reference = ref(registry_proxy.host, repo, "v1")  # the proxy counts connections
    first = looked(watcher.look(reference, creds(registry_htpasswd)))
    assert first.digest == digest and first.index_digest is None
    assert first.media_type.endswith("manifest.v2+json")
    mark = registry_htpasswd.mark()
    looks = [looked(watcher.look(reference, creds(registry_htpasswd), previous=first))
             for _ in range(5)]
    assert {look.digest for look in looks} == {digest}
    assert [look.requests for look in looks] == [1] * 5
    # from the registry's own log: HEADs only, no manifest GET, no blob GET
    assert registry_htpasswd.counts(mark, repo) == {"head_manifest": 5}
    assert registry_proxy.connections == 1  # all over one kept-alive connection


def test_a_moved_tag_is_a_new_identity(registry_htpasswd: Registry,
                                       docker_client: docker.DockerClient,
                                       watcher: TagWatcher) -> None:
    repo = new_repository()
    old = push_tiny(docker_client, registry_htpasswd, repo, "v1")
    reference = ref(registry_htpasswd.host, repo, "v1")
    state, update = TagWatchState().observe(watcher.look(reference, creds(registry_htpasswd)),
                                            timedelta(minutes=5))
    assert update.change == Change.FIRST
    new = push_tiny(docker_client, registry_htpasswd, repo, "v1")  # rebuilt and pushed
    assert new != old
    state, update = state.observe(watcher.look(reference, creds(registry_htpasswd)),
                                  timedelta(minutes=5))
    assert (update.change, update.previous_digest) == (Change.MOVED, old)
    assert state.last is not None and state.last.digest == new


def test_wrong_password_and_no_credentials_name_the_registry(
        registry_htpasswd: Registry, docker_client: docker.DockerClient,
        watcher: TagWatcher, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    repo = new_repository()
    push_tiny(docker_client, registry_htpasswd, repo, "v1")
    reference = ref(registry_htpasswd.host, repo, "v1")
    wrong_password = "not-the-password-b41c9e"
    wrong = failed(watcher.look(reference, Credentials("envcheck", wrong_password,
                                                       source="ENVCHECK_TEST_CREDS")),
                   Reason.REGISTRY_AUTH_FAILED)
    assert wrong.status == 401 and registry_htpasswd.host in wrong.message
    assert "ENVCHECK_TEST_CREDS" in wrong.message
    none = failed(watcher.look(reference, ANONYMOUS), Reason.REGISTRY_AUTH_FAILED)
    assert "has none" in none.message and registry_htpasswd.host in none.message
    for text in (caplog.text, str(wrong), str(wrong.error()), repr(wrong.details())):
        assert wrong_password not in text


def test_a_stopped_registry_is_unreachable(registry_anonymous: Registry,
                                           docker_client: docker.DockerClient,
                                           watcher: TagWatcher) -> None:
    repo = new_repository()
    push_tiny(docker_client, registry_anonymous, repo, "v1")
    reference = ref(registry_anonymous.host, repo, "v1")
    looked(watcher.look(reference))
    with registry_anonymous.stopped():
        down = failed(watcher.look(reference), Reason.REGISTRY_UNREACHABLE)
    assert down.extra["network"] == "connection_refused"
    assert "refused" in down.message and registry_anonymous.host in down.message
    looked(watcher.look(reference))  # back


def test_a_hanging_registry_costs_the_look_its_deadline_not_more(
        registry_htpasswd: Registry, registry_proxy: RegistryProxy,
        docker_client: docker.DockerClient) -> None:
    repo = new_repository()
    push_tiny(docker_client, registry_htpasswd, repo, "v1")
    reference = ref(registry_proxy.host, repo, "v1")
    # each read may wait 10 minutes: only the look's deadline can end it
    hanging = TagWatcher(WatchSettings(deadline_s=2, read_timeout_s=600))
    try:
        looked(hanging.look(reference, creds(registry_htpasswd)))
        registry_proxy.hang()
        outcome: list[TagLook | RegistryFailure] = []
        worker = threading.Thread(target=lambda: outcome.append(
            hanging.look(reference, creds(registry_htpasswd))), daemon=True)
        worker.start()
        worker.join(timeout=120)  # a guard against a hang, not a timing assertion
        assert not worker.is_alive(), "the look outlived its deadline"
        down = failed(outcome[0], Reason.REGISTRY_UNREACHABLE)
        assert "deadline" in down.message
    finally:
        registry_proxy.passthrough()
        hanging.close()


def test_429_backs_off_that_registry_alone(
        registry_htpasswd: Registry, registry_anonymous: Registry,
        registry_proxy: RegistryProxy, docker_client: docker.DockerClient,
        watcher: TagWatcher) -> None:
    repo = new_repository()
    push_tiny(docker_client, registry_htpasswd, repo, "v1")
    other_repo = new_repository()
    push_tiny(docker_client, registry_anonymous, other_repo, "v1")
    limited = ref(registry_proxy.host, repo, "v1")
    looked(watcher.look(limited, creds(registry_htpasswd)))
    status, headers, body = too_many_requests(retry_after="120", remaining="0;w=21600")
    registry_proxy.answer(status, headers, body)
    hit = failed(watcher.look(limited, creds(registry_htpasswd)), Reason.REGISTRY_RATE_LIMITED)
    assert (hit.status, hit.retry_after_s, hit.rate_remaining) == (429, 120.0, 0)
    assert registry_proxy.answered == 1
    # the next look waits out Retry-After without asking the registry
    again = failed(watcher.look(limited, creds(registry_htpasswd)),
                   Reason.REGISTRY_RATE_LIMITED)
    assert again.requests == 0 and registry_proxy.answered == 1
    assert "backing off" in again.message
    # another registry is looked at as before
    looked(watcher.look(ref(registry_anonymous.host, other_repo, "v1")))


def test_a_5xx_with_text_is_unreachable(registry_htpasswd: Registry,
                                        registry_proxy: RegistryProxy,
                                        docker_client: docker.DockerClient,
                                        watcher: TagWatcher) -> None:
    repo = new_repository()
    push_tiny(docker_client, registry_htpasswd, repo, "v1")
    reference = ref(registry_proxy.host, repo, "v1")
    looked(watcher.look(reference, creds(registry_htpasswd)))
    registry_proxy.answer(500, {"Content-Type": "text/plain"}, b"storage backend down")
    down = failed(watcher.look(reference, creds(registry_htpasswd)),
                  Reason.REGISTRY_UNREACHABLE)
    assert down.status == 500
    registry_proxy.passthrough()


def test_a_deleted_tag_is_not_found_on_two_looks_an_interval_apart(
        registry_htpasswd: Registry, docker_client: docker.DockerClient) -> None:
    clock = ShiftedClock()
    watcher = TagWatcher(clock=clock)
    interval = timedelta(minutes=5)
    repo = new_repository()
    digest = push_tiny(docker_client, registry_htpasswd, repo, "v1")
    reference = ref(registry_htpasswd.host, repo, "v1")
    state, _ = TagWatchState().observe(watcher.look(reference, creds(registry_htpasswd)),
                                       interval)
    RegistryApi(registry_htpasswd).delete(repo, digest)
    first = failed(watcher.look(reference, creds(registry_htpasswd)), Reason.IMAGE_NOT_FOUND)
    assert first.code == "MANIFEST_UNKNOWN"
    state, update = state.observe(first, interval)
    assert update.change == Change.MISSING_ONCE
    # a second look within the interval is still one look's word
    state, update = state.observe(watcher.look(reference, creds(registry_htpasswd)), interval)
    assert update.change == Change.MISSING_ONCE
    clock.offset += interval.total_seconds()
    state, update = state.observe(watcher.look(reference, creds(registry_htpasswd)), interval)
    assert update.change == Change.NOT_FOUND
    assert update.failure is not None and update.failure.not_found
    watcher.close()


def test_token_flow_caches_the_token_for_its_lifetime(
        registry_token: Registry, docker_client: docker.DockerClient,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    clock = ShiftedClock()
    watcher = TagWatcher(clock=clock)
    repo = new_repository()
    digest = push_tiny(docker_client, registry_token, repo, "v1")
    reference = ref(registry_token.host, repo, "v1")
    mark = registry_token.mark()
    first = looked(watcher.look(reference, creds(registry_token)))
    assert (first.digest, first.token_requests) == (digest, 1)
    # the first contact: a bare HEAD (401, the challenge), a token, the HEAD again
    assert registry_token.counts(mark, repo) == {"head_manifest": 2, "token": 1}
    mark = registry_token.mark()
    for _ in range(5):
        assert looked(watcher.look(reference, creds(registry_token))).requests == 1
    assert registry_token.counts(mark, repo) == {"head_manifest": 5}
    assert registry_token.issuer is not None
    clock.offset += 300  # the issuer's expires_in: the token is asked for again, once
    mark = registry_token.mark()
    renewed = looked(watcher.look(reference, creds(registry_token)))
    assert renewed.token_requests == 1
    assert registry_token.counts(mark, repo) == {"head_manifest": 1, "token": 1}
    # no credentials: the issuer refuses an anonymous token; a wrong password, any token
    none = failed(watcher.look(reference, ANONYMOUS), Reason.REGISTRY_AUTH_FAILED)
    assert "has none" in none.message
    wrong = failed(watcher.look(reference, Credentials("envcheck", "wrong-pass-77aa",
                                                       source="the wrong ones")),
                   Reason.REGISTRY_AUTH_FAILED)
    assert registry_token.issuer.realm in wrong.message and "the wrong ones" in wrong.message
    assert "wrong-pass-77aa" not in caplog.text + wrong.message
    assert registry_token.password not in caplog.text
    assert "eyJ" not in caplog.text  # no JWT (a token) in any log line
    watcher.close()


def test_another_platform_changing_in_the_index_is_not_a_move(
        registry_htpasswd: Registry, docker_client: docker.DockerClient,
        watcher: TagWatcher) -> None:
    repo = new_repository()
    amd64, arm64, arm64_rebuilt, amd64_rebuilt = (
        push_tiny(docker_client, registry_htpasswd, repo, tag) for tag in "abcd")
    api = RegistryApi(registry_htpasswd)
    index = api.put_index(repo, "multi", {"linux/arm64": arm64, "linux/amd64": amd64})
    reference = ref(registry_htpasswd.host, repo, "multi")
    mark = registry_htpasswd.mark()
    first = looked(watcher.look(reference, creds(registry_htpasswd)))
    assert (first.digest, first.index_digest) == (amd64, index)
    # the first contact's bare HEAD and its retry, then the index fetched once, by digest
    assert registry_htpasswd.counts(mark, repo) == {"head_manifest": 2, "get_manifest": 1}
    assert registry_htpasswd.entries(mark)[-1].path.endswith(f"/manifests/{index}")
    state, _ = TagWatchState().observe(first, timedelta(minutes=5))

    moved_index = api.put_index(repo, "multi", {"linux/arm64": arm64_rebuilt,
                                                "linux/amd64": amd64})
    mark = registry_htpasswd.mark()
    second = looked(watcher.look(reference, creds(registry_htpasswd), previous=first))
    assert (second.digest, second.index_digest) == (amd64, moved_index)
    state, update = state.observe(second, timedelta(minutes=5))
    assert update.change == Change.UNCHANGED
    assert registry_htpasswd.counts(mark, repo) == {"head_manifest": 1, "get_manifest": 1}
    # nothing new: a HEAD alone, the index's entry remembered by the watcher...
    mark = registry_htpasswd.mark()
    assert looked(watcher.look(reference, creds(registry_htpasswd))).digest == amd64
    assert registry_htpasswd.counts(mark, repo) == {"head_manifest": 1}
    # ... or, by a watcher that never saw it (a restart), taken from the previous look
    fresh = TagWatcher()
    looked(fresh.look(ref(registry_htpasswd.host, repo, "a"), creds(registry_htpasswd)))
    mark = registry_htpasswd.mark()
    assert looked(fresh.look(reference, creds(registry_htpasswd), previous=second)).digest \
        == amd64
    assert registry_htpasswd.counts(mark, repo) == {"head_manifest": 1}
    fresh.close()

    api.put_index(repo, "multi", {"linux/arm64": arm64_rebuilt, "linux/amd64": amd64_rebuilt})
    state, update = state.observe(watcher.look(reference, creds(registry_htpasswd),
                                               previous=second), timedelta(minutes=5))
    assert (update.change, update.previous_digest) == (Change.MOVED, amd64)
    assert state.last is not None and state.last.digest == amd64_rebuilt
    api.close()


def test_the_proxy_of_the_environment_is_honoured(
        registry_htpasswd: Registry, registry_proxy: RegistryProxy,
        docker_client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = new_repository()
    digest = push_tiny(docker_client, registry_htpasswd, repo, "v1")
    reference = ref(registry_htpasswd.host, repo, "v1")
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://{registry_proxy.host}")
    through = TagWatcher()
    assert looked(through.look(reference, creds(registry_htpasswd))).digest == digest
    through.close()
    assert registry_proxy.connections >= 1  # the look went through the proxy
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    before = registry_proxy.connections
    direct = TagWatcher()
    assert looked(direct.look(reference, creds(registry_htpasswd))).digest == digest
    direct.close()
    assert registry_proxy.connections == before


def test_the_engines_ca_files_for_a_tls_registry(
        registry_tls: Registry, docker_client: docker.DockerClient, tmp_path: Path) -> None:
    assert registry_tls.ca_file is not None
    repo = new_repository()
    digest = push_tiny(docker_client, registry_tls, repo, "v1")  # the engine tries TLS first
    reference = ref(registry_tls.host, repo, "v1")
    certs = tmp_path / "certs.d"
    (certs / registry_tls.host).mkdir(parents=True)
    shutil.copy(registry_tls.ca_file, certs / registry_tls.host / "ca.crt")
    trusting = TagWatcher(WatchSettings(certs_dir=certs))
    assert looked(trusting.look(reference)).digest == digest  # TLS, verified by the CA file
    trusting.close()
    # no CA file for it: a loopback registry is spoken to in plain HTTP, which it refuses
    plain = TagWatcher(WatchSettings(certs_dir=tmp_path / "none"))
    refused = failed(plain.look(reference), Reason.REGISTRY_UNREACHABLE)
    assert refused.status == 400
    plain.close()
    # a CA file that did not sign its certificate: the handshake fails
    other = tmp_path / "other.d"
    (other / registry_tls.host).mkdir(parents=True)
    IssuerKey.generate().write_bundle(other / registry_tls.host / "ca.crt")
    distrusting = TagWatcher(WatchSettings(certs_dir=other))
    untrusted = failed(distrusting.look(reference), Reason.REGISTRY_UNREACHABLE)
    assert untrusted.extra["network"] == "tls"
    distrusting.close()


def test_a_token_without_expires_in_lives_the_specs_60_s(
        registry_token: Registry, docker_client: docker.DockerClient) -> None:
    assert registry_token.issuer is not None
    repo = new_repository()
    push_tiny(docker_client, registry_token, repo, "v1")
    reference = ref(registry_token.host, repo, "v1")
    clock = ShiftedClock()
    watcher = TagWatcher(clock=clock)
    registry_token.issuer.policy.expires_in = None
    try:
        assert looked(watcher.look(reference, creds(registry_token))).token_requests == 1
        clock.offset += 50
        assert looked(watcher.look(reference, creds(registry_token))).token_requests == 0
        clock.offset += 11  # 61 s after it was issued
        assert looked(watcher.look(reference, creds(registry_token))).token_requests == 1
    finally:
        registry_token.issuer.policy.expires_in = 300
        watcher.close()


def test_other_kinds_take_the_watchs_look_within_its_jitter(
        registry_anonymous: Registry, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """The image kind looks every interval give or take its jitter: a look that old is still
    the watch's, and another kind's probe takes it rather than sending its own HEAD."""
    repo = new_repository()
    push_tiny(docker_client, registry_anonymous, repo, "v1")
    path = tmp_path / "watched.yaml"
    path.write_text(
        "version: 1\nsuites:\n  s:\n    defaults:\n      pull: watch\n"
        "      schedules: {image: 5m, jitter_s: 40}\n    environments:\n"
        f"      - id: e\n        image: \"{registry_anonymous.host}/{repo}:v1\"\n",
        encoding="utf-8")
    env = load_catalogue([path]).environments[0]
    clock = ShiftedClock()
    config = tmp_path / "docker-config.json"
    config.write_text("{}", encoding="utf-8")
    looker = TagWatcher()
    try:
        fleet = RegistryImages(looker, RegistryCredentials(docker_config=str(config)), None,
                               clock=clock)
        mark = registry_anonymous.mark()
        assert fleet.identity(env, fresh=True).change == Change.FIRST
        clock.offset = 300 + 20  # past the interval, within its jitter: the watch's look
        assert fleet.identity(env, fresh=False).change == Change.UNCHANGED
        assert registry_anonymous.counts(mark, repo) == {"head_manifest": 1}
        clock.offset = 300 + 41  # past both: a look of the probe's own
        assert fleet.identity(env, fresh=False).change == Change.UNCHANGED
        assert registry_anonymous.counts(mark, repo) == {"head_manifest": 2}
    finally:
        looker.close()
