"""The registry stage's pure parts: references, an index's platform entry, what each answer
means, the token challenge, the watch state and the per-registry backoff; and the transport's
proxy and CA-file choices."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests

from envcheck.core.clock import SYSTEM_CLOCK
from envcheck.core.errors import ImageNotFound, RegistryFailed
from envcheck.core.results import Reason
from envcheck.registry import (
    Change,
    ImageReference,
    InvalidReference,
    RegistryBackoff,
    RegistryFailure,
    TagLook,
    TagWatchState,
)
from envcheck.registry.auth import parse_challenge
from envcheck.registry.failures import from_exception, from_response, rate_remaining
from envcheck.registry.manifests import Platform, platform_digest
from envcheck.registry.transport import Deadline, DeadlinePassed, Timeouts, Transport

AT = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
D1, D2, D3 = (f"sha256:{c * 64}" for c in "123")


@pytest.mark.parametrize(("text", "registry", "api_host", "repository", "tag", "digest"), [
    ("python", "docker.io", "registry-1.docker.io", "library/python", "latest", None),
    ("python:3.12-slim", "docker.io", "registry-1.docker.io", "library/python", "3.12-slim",
     None),
    ("index.docker.io/org/env:v1", "docker.io", "registry-1.docker.io", "org/env", "v1", None),
    ("ghcr.io/org/env:v1", "ghcr.io", "ghcr.io", "org/env", "v1", None),
    ("127.0.0.1:5000/ns/img", "127.0.0.1:5000", "127.0.0.1:5000", "ns/img", "latest", None),
    (f"localhost:5000/ns/img:v2@{D1}", "localhost:5000", "localhost:5000", "ns/img", "v2", D1),
    (f"ns/img@{D2}", "docker.io", "registry-1.docker.io", "ns/img", None, D2),
])
def test_references_as_the_engine_reads_them(text: str, registry: str, api_host: str,
                                             repository: str, tag: str | None,
                                             digest: str | None) -> None:
    parsed = ImageReference.parse(text)
    assert (parsed.registry, parsed.api_host, parsed.repository, parsed.tag, parsed.digest) == (
        registry, api_host, repository, tag, digest)
    assert parsed.pinned == (digest is not None)
    assert ImageReference.parse(str(parsed)) == parsed


@pytest.mark.parametrize(("text", "says"), [
    ("", "empty"), ("Ns/Img:v1", "not a repository name"), ("ns/img:.v1", "not a tag"),
    ("ns/img@sha256:abc", "not a digest"), (" ns/img", "whitespace"),
    ("https://ghcr.io/org/env", "scheme"), ("ns//img", "not a repository name"),
    (f"ns/img@sha256:{'A' * 64}", "64 lowercase hex"),
])
def test_a_malformed_reference_is_one_clear_error(text: str, says: str) -> None:
    with pytest.raises(InvalidReference, match=says):
        ImageReference.parse(text)


def test_loopback_registries_and_pinning() -> None:
    assert ImageReference.parse("127.0.0.1:5000/a/b").loopback
    assert ImageReference.parse("[::1]:5000/a/b").loopback
    assert ImageReference.parse("localhost/a/b").loopback
    assert not ImageReference.parse("ghcr.io/a/b").loopback
    pinned = ImageReference.parse("ghcr.io/a/b:v1").at(D1)
    assert str(pinned) == f"ghcr.io/a/b@{D1}" and pinned.pinned


def index(*entries: tuple[str, dict[str, str]]) -> bytes:
    return json.dumps({"schemaVersion": 2, "manifests": [
        {"digest": d, "platform": p, "mediaType": "x", "size": 1} for d, p in entries]}).encode()


def test_the_engines_platform_entry_of_an_index() -> None:
    body = index((D1, {"os": "linux", "architecture": "arm64"}),
                 (D3, {"os": "unknown", "architecture": "unknown"}),
                 (D2, {"os": "linux", "architecture": "amd64"}))
    assert platform_digest(body, Platform.parse("linux/amd64")) == D2
    assert platform_digest(body, Platform.parse("linux/arm64/v8")) == D1  # variant left out
    assert platform_digest(body, Platform.parse("linux/s390x")) is None
    exact = index((D1, {"os": "linux", "architecture": "arm", "variant": "v6"}),
                  (D2, {"os": "linux", "architecture": "arm", "variant": "v7"}))
    assert platform_digest(exact, Platform.parse("linux/arm/v7")) == D2
    with pytest.raises(ValueError, match="not a platform"):
        Platform.parse("amd64")
    with pytest.raises(ValueError, match="no list of manifests"):
        platform_digest(b"{}", Platform.parse("linux/amd64"))


def classify(status: int, body: bytes = b"", headers: dict[str, str] | None = None,
             credentials: str | None = "DOCKER_CONFIG") -> RegistryFailure:
    return from_response(status, headers or {}, body, "reg.example", AT,
                         credentials=credentials)


def test_what_each_answer_means() -> None:
    limited = classify(429, b'{"errors":[{"code":"TOOMANYREQUESTS","message":"slow down"}]}',
                       {"Retry-After": "42", "ratelimit-remaining": "0;w=21600"})
    assert (limited.reason, limited.retry_after_s, limited.rate_remaining) == (
        Reason.REGISTRY_RATE_LIMITED, 42.0, 0)
    # Docker Hub's pull limit also comes as 403 or 503 bodies saying so
    assert classify(403, b"toomanyrequests: You have reached your pull rate limit").reason \
        == Reason.REGISTRY_RATE_LIMITED
    refused = classify(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}')
    assert refused.reason == Reason.REGISTRY_AUTH_FAILED
    assert "refused the credentials from DOCKER_CONFIG" in refused.message
    assert "has none" in classify(401, credentials=None).message
    assert classify(403).reason == Reason.REGISTRY_AUTH_FAILED
    for code in ("MANIFEST_UNKNOWN", "NAME_UNKNOWN"):
        gone = classify(404, json.dumps({"errors": [{"code": code, "message": "x"}]}).encode())
        assert gone.reason == Reason.IMAGE_NOT_FOUND and gone.not_found
    # a 404 from something that is no registry is not the image's absence
    assert classify(404, b"<html>not here</html>").reason == Reason.REGISTRY_UNREACHABLE
    assert classify(404, headers={"Docker-Distribution-Api-Version": "registry/2.0"}).not_found
    down = classify(503, b"upstream connect error")
    assert down.reason == Reason.REGISTRY_UNREACHABLE and "upstream connect error" in down.message
    assert rate_remaining({"ratelimit-remaining": "76;w=21600"}) == 76
    assert rate_remaining({}) is None


def test_network_failures_are_unreachable() -> None:
    try:
        requests.get("http://127.0.0.1:1/v2/", timeout=5)
    except requests.RequestException as exc:
        found = from_exception(exc, "127.0.0.1:1", AT)
    assert found is not None and found.reason == Reason.REGISTRY_UNREACHABLE
    assert found.extra == {"network": "connection_refused"}
    assert from_exception(KeyError("a bug"), "r", AT) is None  # not the network's


def test_failures_as_envchecks_errors() -> None:
    assert isinstance(classify(404, b'{"errors":[{"code":"NAME_UNKNOWN"}]}').error(),
                      ImageNotFound)
    error = classify(401).error()
    assert isinstance(error, RegistryFailed)
    assert (error.reason, error.registry) == (Reason.REGISTRY_AUTH_FAILED, "reg.example")


def test_challenges() -> None:
    bearer = parse_challenge('Bearer realm="https://auth.docker.io/token",'
                             'service="registry.docker.io",scope="repository:a/b:pull,push"')
    assert bearer is not None
    assert (bearer.scheme, bearer.realm, bearer.service, bearer.scope) == (
        "bearer", "https://auth.docker.io/token", "registry.docker.io",
        "repository:a/b:pull,push")
    basic = parse_challenge('Basic realm="envcheck-test"')
    assert basic is not None and basic.scheme == "basic"
    assert parse_challenge('Bearer realm="file:///etc/passwd"') is None
    assert parse_challenge("Negotiate") is None


def look(digest: str, at: datetime = AT) -> TagLook:
    return TagLook(ImageReference.parse("reg.example/a/b:v1"), digest, None, "m",
                   "linux/amd64", at)


def missing(at: datetime) -> RegistryFailure:
    return RegistryFailure(Reason.IMAGE_NOT_FOUND, "reg.example", "gone", at)


def test_watch_state_moves_and_confirms_a_missing_tag() -> None:
    interval = timedelta(minutes=5)
    state, update = TagWatchState().observe(look(D1), interval)
    assert update.change == Change.FIRST
    state, update = state.observe(look(D1), interval)
    assert update.change == Change.UNCHANGED
    state, update = state.observe(look(D2), interval)
    assert (update.change, update.previous_digest) == (Change.MOVED, D1)
    state, update = state.observe(missing(AT), interval)
    assert update.change == Change.MISSING_ONCE
    unreachable = RegistryFailure(Reason.REGISTRY_UNREACHABLE, "reg.example", "down",
                                  AT + interval)
    state, update = state.observe(unreachable, interval)  # says nothing either way
    assert update.change == Change.FAILED and state.missing_since == AT
    _, update = state.observe(missing(AT + interval / 2), interval)
    assert update.change == Change.MISSING_ONCE
    _, update = state.observe(missing(AT + interval), interval)
    assert update.change == Change.NOT_FOUND
    # a tag that came back in between starts the count again
    state, _ = state.observe(look(D2, AT + interval / 2), interval)
    _, update = state.observe(missing(AT + interval), interval)
    assert update.change == Change.MISSING_ONCE


def test_backoff_is_per_registry() -> None:
    backoff = RegistryBackoff(default_s=60, max_s=600)
    hit = RegistryFailure(Reason.REGISTRY_RATE_LIMITED, "a", "429", AT, retry_after_s=30)
    assert backoff.record(hit) is not None
    assert backoff.blocked("a", AT + timedelta(seconds=29)) is not None
    assert backoff.blocked("a", AT + timedelta(seconds=30)) is None
    assert backoff.blocked("b", AT) is None
    silent = RegistryFailure(Reason.REGISTRY_RATE_LIMITED, "b", "429", AT)
    waits = [(backoff.record(silent).until - AT).total_seconds()  # type: ignore[union-attr]
             for _ in range(5)]
    assert waits == [60, 120, 240, 480, 600]  # doubling without Retry-After, capped
    backoff.clear("b")
    assert backoff.blocked("b", AT) is None
    assert backoff.record(missing(AT)) is None  # only a rate limit backs off


def test_transport_ca_files_proxies_and_deadline(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    certs = tmp_path / "certs.d"
    (certs / "reg.example:5000").mkdir(parents=True)
    (certs / "reg.example:5000" / "ca.crt").write_text("one")
    (certs / "two.example").mkdir()
    for name in ("a.crt", "b.crt"):
        (certs / "two.example" / name).write_text(name)
    (certs / "two.example" / "client.cert").write_text("c")
    (certs / "two.example" / "client.key").write_text("k")
    (certs / "127.0.0.1:5443").mkdir()
    transport = Transport(certs_dir=certs, clock=SYSTEM_CLOCK, insecure={"plain.example"})
    assert transport._tls_for("reg.example:5000") == (
        str(certs / "reg.example:5000" / "ca.crt"), None)
    verify, cert = transport._tls_for("two.example")
    assert isinstance(verify, str) and Path(verify).read_text() == "a.crt\nb.crt"
    assert cert == (str(certs / "two.example" / "client.cert"),
                    str(certs / "two.example" / "client.key"))
    assert transport._tls_for("none.example") == (True, None)
    assert transport.base_url("127.0.0.1:5000", loopback=True) == "http://127.0.0.1:5000"
    assert transport.base_url("127.0.0.1:5443", loopback=True) == "https://127.0.0.1:5443"
    assert transport.base_url("plain.example", loopback=False) == "http://plain.example"
    assert transport.base_url("ghcr.io", loopback=False) == "https://ghcr.io"
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "skip.example")
    assert transport._proxies_for("https://ghcr.io/v2/", "ghcr.io")["https"] == \
        "http://proxy.example:3128"
    assert transport._proxies_for("https://skip.example/v2/", "skip.example") == {}
    transport.close()
    assert not Path(verify).exists()  # the combined bundle goes with the transport
    with pytest.raises(DeadlinePassed):
        Deadline(0, SYSTEM_CLOCK).clip(Timeouts())
    assert Deadline(2, SYSTEM_CLOCK).clip(Timeouts(5, 10))[1] <= 2
