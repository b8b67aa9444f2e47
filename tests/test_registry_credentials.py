"""Registry credentials read as the Docker CLI reads them (``DOCKER_CONFIG``: ``auths``,
``credHelpers`` with a real ``docker-credential-*`` program on PATH) or from the catalogue's
source (an env var, a secret file), used by looks at the real registry; never shown."""

from __future__ import annotations

import base64
import json
import logging
import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import docker
import pytest

from envcheck.core.errors import RegistryFailed
from envcheck.core.results import Reason
from envcheck.registry import (
    Credentials,
    CredentialSource,
    ImageReference,
    RegistryCredentials,
    TagLook,
    TagWatcher,
)
from envcheck.registry.failures import from_error
from tests.registry_images import new_repository, push_tiny
from tests.registryd import Registry

HELPER = """#!/bin/sh
# docker-credential-envchecktest: the credential-helper protocol, for the tests
[ "$1" = get ] || exit 1
read -r server
echo "$server" >> "{log}"
{body}
"""


def write_config(folder: Path, doc: dict[str, object]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(doc))
    return folder


def install_helper(bin_dir: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    asked = bin_dir / "asked.log"
    helper = bin_dir / "docker-credential-envchecktest"
    helper.write_text(HELPER.format(log=asked, body=body))
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return asked


@pytest.fixture
def tagged(registry_htpasswd: Registry, docker_client: docker.DockerClient
           ) -> tuple[ImageReference, str]:
    repo = new_repository()
    digest = push_tiny(docker_client, registry_htpasswd, repo, "v1")
    return ImageReference.parse(f"{registry_htpasswd.host}/{repo}:v1"), digest


@pytest.mark.docker
def test_auths_of_the_docker_config(registry_htpasswd: Registry, tmp_path: Path,
                                    tagged: tuple[ImageReference, str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    reference, digest = tagged
    basic = base64.b64encode(f"{registry_htpasswd.user}:{registry_htpasswd.password}".encode())
    config = write_config(tmp_path / "docker", {"auths": {registry_htpasswd.host: {
        "auth": basic.decode()}}})
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    found = RegistryCredentials().for_registry(registry_htpasswd.host)
    assert found.username == registry_htpasswd.user and "auths" in found.source
    watcher = TagWatcher()
    outcome = watcher.look(reference, found)
    watcher.close()
    assert isinstance(outcome, TagLook) and outcome.digest == digest
    # another registry has no entry: anonymous
    assert RegistryCredentials().for_registry("127.0.0.1:1").anonymous


@pytest.mark.docker
def test_a_credential_helper_of_the_docker_config(
        registry_htpasswd: Registry, tmp_path: Path, tagged: tuple[ImageReference, str],
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    reference, digest = tagged
    answer = json.dumps({"ServerURL": registry_htpasswd.host,
                         "Username": registry_htpasswd.user,
                         "Secret": registry_htpasswd.password})
    asked = install_helper(tmp_path / "bin", f"echo '{answer}'", monkeypatch)
    config = write_config(tmp_path / "docker", {
        "auths": {registry_htpasswd.host: {"auth": base64.b64encode(b"x:wrong").decode()}},
        "credHelpers": {registry_htpasswd.host: "envchecktest"}})
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    resolver = RegistryCredentials()
    found = resolver.for_registry(registry_htpasswd.host)
    # credHelpers win over auths, as in the Docker CLI
    assert found.password == registry_htpasswd.password
    assert "docker-credential-envchecktest" in found.source
    assert asked.read_text().split() == [registry_htpasswd.host]
    resolver.for_registry(registry_htpasswd.host)  # kept for its ttl: the helper ran once
    assert asked.read_text().split() == [registry_htpasswd.host]
    watcher = TagWatcher()
    outcome = watcher.look(reference, found)
    watcher.close()
    assert isinstance(outcome, TagLook) and outcome.digest == digest
    assert registry_htpasswd.password not in caplog.text
    assert registry_htpasswd.password not in repr(found) + str(found)


def test_a_failing_or_hanging_helper_is_an_auth_failure_without_its_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_helper(tmp_path / "bin", "echo 'leaked-secret-xyz' >&2; echo 'leaked-secret-xyz'; "
                   "exit 3", monkeypatch)
    config = write_config(tmp_path / "docker", {"credsStore": "envchecktest"})
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    with pytest.raises(RegistryFailed) as failed:
        RegistryCredentials().for_registry("registry.example:5000")
    assert failed.value.reason == Reason.REGISTRY_AUTH_FAILED
    assert "registry.example:5000" in str(failed.value) and "status 3" in str(failed.value)
    assert "leaked-secret-xyz" not in str(failed.value)
    install_helper(tmp_path / "bin", "exec sleep 30", monkeypatch)
    with pytest.raises(RegistryFailed, match=r"did not answer within 0\.5 s"):
        RegistryCredentials(helper_timeout_s=0.5).for_registry("registry.example:5000")


def test_an_unreadable_docker_config_is_an_auth_failure(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    folder = tmp_path / "docker"
    folder.mkdir()
    (folder / "config.json").write_text('{"auths": {"x": {"auth": "secret-in-a-broken-file"')
    monkeypatch.setenv("DOCKER_CONFIG", str(folder))
    with pytest.raises(RegistryFailed, match="not a JSON document") as failed:
        RegistryCredentials().for_registry("x")
    assert "secret-in-a-broken-file" not in str(failed.value)


@pytest.mark.docker
def test_the_catalogue_source_wins_for_its_registry(
        registry_htpasswd: Registry, tmp_path: Path, tagged: tuple[ImageReference, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    reference, digest = tagged
    monkeypatch.setenv("DOCKER_CONFIG", str(write_config(tmp_path / "docker", {"auths": {
        registry_htpasswd.host: {"auth": base64.b64encode(b"x:wrong").decode()}}})))
    monkeypatch.setenv("ENVCHECK_TEST_REGISTRY", f"{registry_htpasswd.user}:"
                                                 f"{registry_htpasswd.password}")
    source = CredentialSource(env="ENVCHECK_TEST_REGISTRY")
    found = RegistryCredentials({registry_htpasswd.host: source}).for_registry(
        registry_htpasswd.host)
    assert found.source == "environment variable ENVCHECK_TEST_REGISTRY"
    watcher = TagWatcher()
    outcome = watcher.look(reference, found)
    watcher.close()
    assert isinstance(outcome, TagLook) and outcome.digest == digest


def test_catalogue_sources_that_cannot_serve(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    missing = CredentialSource(file=str(tmp_path / "nope"))
    assert missing.problem() == f"secret file {tmp_path / 'nope'} does not exist"
    monkeypatch.delenv("ENVCHECK_TEST_UNSET", raising=False)
    resolver = RegistryCredentials({"reg:1": CredentialSource(env="ENVCHECK_TEST_UNSET"),
                                    "reg:2": missing})
    with pytest.raises(RegistryFailed, match=r"reg:1.*ENVCHECK_TEST_UNSET is not set"):
        resolver.for_registry("reg:1")
    with pytest.raises(RegistryFailed, match="cannot read secret file"):
        resolver.for_registry("reg:2")
    (tmp_path / "nocolon").write_text("just-a-token-value\n")
    with pytest.raises(RegistryFailed, match="must hold user:password") as failed:
        RegistryCredentials({"reg:3": CredentialSource(file=str(tmp_path / "nocolon"))}
                            ).for_registry("reg:3")
    assert "just-a-token-value" not in str(failed.value)
    with pytest.raises(ValueError, match="exactly one"):
        CredentialSource()


def test_credentials_never_print() -> None:
    held = Credentials("user", "pa55-word-1234", source="somewhere")
    token = Credentials("user", identity_token="id-token-5678", source="somewhere")
    for text in (repr(held), str(held), repr(token), f"{token}"):
        assert "pa55-word-1234" not in text and "id-token-5678" not in text
    assert "password=***" in repr(held) and held.key != token.key


def test_a_failing_source_is_not_read_again_for_every_tag(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = install_helper(tmp_path / "bin", "exit 3", monkeypatch)
    monkeypatch.setenv("DOCKER_CONFIG", str(write_config(tmp_path / "docker",
                                                         {"credsStore": "envchecktest"})))
    resolver = RegistryCredentials()
    for _ in range(3):
        with pytest.raises(RegistryFailed) as failed:
            resolver.for_registry("registry.example:5000")
    assert len(asked.read_text().split()) == 1  # the helper ran once
    look_failure = from_error(failed.value, datetime.now(UTC))
    assert look_failure.reason == Reason.REGISTRY_AUTH_FAILED
    assert look_failure.registry == "registry.example:5000"
