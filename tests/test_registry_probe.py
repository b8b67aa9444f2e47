"""Environments whose images live in a registry (``pull: watch``), through ``envcheck check``
as a user runs it, on the real engine and the real test registry.

One image is a real sandbox image: the demo's healthy task with a label of its own (its layers
shared with the demo's, so the push and the pull move a manifest and a config, not 400 MB),
pushed, removed from the engine, then checked: the ``image`` kind looks the tag up (one HEAD),
the terminal probe pulls the digest the look saw and runs on it. The failures use tiny images.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.conftest import envcheck_cmd
from tests.registry_images import RegistryApi, new_repository, push_built, push_tiny
from tests.registryd import Registry

pytestmark = pytest.mark.docker

DEMO_IMAGE = "envcheck-demo/healthy:latest"


def push_labelled(client: docker.DockerClient, registry: Registry, repository: str,
                  tag: str, label: str) -> str:
    """The demo's healthy image with a label, pushed as ``repository:tag`` and removed from
    the engine again: the registry's digest."""
    return push_built(client, registry, repository, tag,
                      f"FROM {DEMO_IMAGE}\nLABEL org.envcheck.test={label}\n")


def catalogue(directory: Path, image: str, extra: str = "") -> Path:
    path = directory / "watched.yaml"
    path.write_text(textwrap.dedent(f"""\
        version: 1
        suites:
          watched:
            description: images envcheck follows in a registry
            defaults:
              pull: watch
              workdir: /workspace
              user: agent
              tools: [git, python3]
            environments:
              - id: watched
                image: "{image}"
        """) + textwrap.dedent(extra), encoding="utf-8")
    return path


def check(path: Path, data: Path, *kinds: str, extra_env: dict[str, str] | None = None
          ) -> tuple[int, dict[str, dict[str, Any]], str]:
    env = {**os.environ, "ENVCHECK_DATA_DIR": str(data), "COLUMNS": "200", **(extra_env or {})}
    env.pop("ENVCHECK_DATABASE_URL", None)
    args = [arg for kind in kinds for arg in ("-p", kind)]
    done = subprocess.run([*envcheck_cmd(), "check", str(path), *args, "--json"], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    results = {r["probe"]: r for r in map(json.loads, done.stdout.splitlines())}
    return done.returncode, results, done.stderr


def pulled_images(client: docker.DockerClient, repository: str) -> list[Any]:
    return [img for img in client.images.list()
            if any(repository in d for d in img.attrs.get("RepoDigests") or [])]


@pytest.fixture
def repository(docker_client: docker.DockerClient) -> Iterator[str]:
    name = new_repository("envcheck-watched")
    yield name
    for img in pulled_images(docker_client, name):
        docker_client.images.remove(img.id, force=True)


def test_a_watched_tag_is_looked_up_then_pulled_by_digest_and_probed(
        tmp_path: Path, registry_anonymous: Registry, docker_client: docker.DockerClient,
        repository: str) -> None:
    reg = registry_anonymous
    first = push_labelled(docker_client, reg, repository, "v1", "first")
    path = catalogue(tmp_path, f"{reg.host}/{repository}:v1")
    data = tmp_path / "data"

    mark = reg.mark()
    code, results, stderr = check(path, data, "image", "terminal")
    assert code == 0, stderr
    image, terminal = results["image"], results["terminal"]
    assert (image["status"], image["reason"]) == ("pass", "ok")
    assert image["image_digest"] == first
    assert image["details"]["watch"]["digest"] == first
    # the terminal probe ran on the digest the look saw, pulled for it, its seconds apart
    assert (terminal["status"], terminal["image_digest"]) == ("pass", first)
    record = terminal["details"]["image"]
    assert record["digest"] == first and record["pulled"] is True
    assert record["local_id"].startswith("sha256:")
    counts = reg.counts(since=mark, repository=repository)
    assert counts["head_manifest"] == 1  # one look serves every kind of the cycle
    assert counts["get_manifest"] >= 1  # the pull, by digest

    # an unchanged tag: one HEAD, no manifest, no blob, nothing pulled
    mark = reg.mark()
    code, results, stderr = check(path, data, "image")
    assert code == 0, stderr
    assert results["image"]["image_digest"] == first
    assert reg.counts(since=mark, repository=repository) == {"head_manifest": 1}

    # the tag moves: the next check runs on the new digest
    second = push_labelled(docker_client, reg, repository, "v1", "second")
    assert second != first
    code, results, stderr = check(path, data, "image", "terminal")
    assert code == 0, stderr
    assert results["image"]["image_digest"] == second
    assert results["terminal"]["image_digest"] == second
    assert results["terminal"]["details"]["image"]["local_id"] != record["local_id"]


def test_a_deleted_tag_is_not_found_once_then_confirmed_a_watch_interval_later(
        tmp_path: Path, registry_anonymous: Registry, docker_client: docker.DockerClient,
        repository: str) -> None:
    reg = registry_anonymous
    digest = push_tiny(docker_client, reg, repository, "gone")
    path_file, data = catalogue(tmp_path, f"{reg.host}/{repository}:gone"), tmp_path / "data"
    # a watch interval of 1 s (the schedule floor lowered for the test)
    path_file.write_text(path_file.read_text().replace(
        "pull: watch", "pull: watch\n      schedules: {image: 1s}"))
    code, results, stderr = check(path_file, data, "image",
                                  extra_env={"ENVCHECK_MIN_SCHEDULE": "1"})
    assert code == 0, stderr
    assert results["image"]["image_digest"] == digest
    api = RegistryApi(reg)
    try:
        api.delete(repository, digest)
    finally:
        api.close()
    code, results, _ = check(path_file, data, "image", "terminal",
                             extra_env={"ENVCHECK_MIN_SCHEDULE": "1"})
    assert code == 3  # envcheck could not check: one look does not confirm a missing image
    for kind in ("image", "terminal"):
        assert (results[kind]["status"], results[kind]["reason"]) == ("error",
                                                                       "image_not_found")
    assert "confirmed only by a second look" in results["image"]["summary"]
    time.sleep(1.5)  # a watch interval later, in another process: the store remembers
    code, results, _ = check(path_file, data, "image", "terminal",
                             extra_env={"ENVCHECK_MIN_SCHEDULE": "1"})
    assert code == 1  # the environment's own failure now
    for kind in ("image", "terminal"):
        assert (results[kind]["status"], results[kind]["reason"]) == ("fail",
                                                                       "image_not_found")


def test_a_stopped_registry_is_envcheck_s_error_for_every_kind(
        tmp_path: Path, registry_anonymous: Registry, docker_client: docker.DockerClient,
        repository: str) -> None:
    reg = registry_anonymous
    push_tiny(docker_client, reg, repository, "v1")
    path = catalogue(tmp_path, f"{reg.host}/{repository}:v1")
    with reg.stopped():
        code, results, stderr = check(path, tmp_path / "data", "image", "terminal")
    assert code == 3, stderr
    for kind in ("image", "terminal"):
        assert (results[kind]["status"], results[kind]["reason"]) == ("error",
                                                                       "registry_unreachable")
        assert results[kind]["details"]["registry"]["registry"] == reg.host
    assert "Traceback" not in stderr


def test_a_wrong_password_is_an_auth_failure_naming_the_registry_never_the_password(
        tmp_path: Path, registry_htpasswd: Registry, docker_client: docker.DockerClient,
        repository: str) -> None:
    reg = registry_htpasswd
    push_tiny(docker_client, reg, repository, "v1")
    secret = tmp_path / "registry-password"
    secret.write_text("not-the-password-1f3b\n")
    path = catalogue(tmp_path, f"{reg.host}/{repository}:v1", f"""\
        registries:
          - host: "{reg.host}"
            username: {reg.user}
            password: {{file: {secret}}}
        """)
    code, results, stderr = check(path, tmp_path / "data", "image")
    assert code == 3, stderr
    result = results["image"]
    assert (result["status"], result["reason"]) == ("error", "registry_auth_failed")
    assert reg.host in result["summary"]
    everything = json.dumps(results) + stderr
    assert "not-the-password-1f3b" not in everything

    secret.write_text(f"{reg.password}\n")  # the right one: the tag is seen
    code, results, stderr = check(path, tmp_path / "data", "image")
    assert code == 0, stderr
    assert results["image"]["status"] == "pass"
    assert reg.password not in json.dumps(results) + stderr
