"""The test registry itself (tests/registryd.py): each mode takes a push through the real
engine, its access log counts what was asked, the API moves and deletes tags and builds an
index, the proxy misbehaves on command, and setup keeps the packaged service stopped."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import docker
import pytest
import requests

from tests.ports import listening_addresses
from tests.registry_images import ACCEPT, RegistryApi, new_repository, push_tiny
from tests.registry_proxy import RegistryProxy, too_many_requests
from tests.registryd import Registry, request_kind

pytestmark = pytest.mark.docker


def test_request_kinds() -> None:
    assert request_kind("GET", "/v2/") == "ping"
    assert request_kind("HEAD", "/v2/a/b/manifests/v1") == "head_manifest"
    assert request_kind("GET", "/v2/a/manifests/sha256:ab") == "get_manifest"
    assert request_kind("GET", "/v2/a/blobs/sha256:ab") == "get_blob"
    assert request_kind("PUT", "/v2/a/manifests/v1") == "put_manifest"


@pytest.mark.parametrize("mode", ["anonymous", "htpasswd", "token"])
def test_each_mode_takes_a_push_and_logs_it(mode: str, request: pytest.FixtureRequest,
                                            docker_client: docker.DockerClient) -> None:
    registry: Registry = request.getfixturevalue(f"registry_{mode}")
    assert listening_addresses(registry.port) == {"0100007F"}, "127.0.0.1 only"
    repo = new_repository()
    digest = push_tiny(docker_client, registry, repo, "v1")
    api = RegistryApi(registry)
    assert api.digest(repo, "v1") == digest
    before = registry.mark()
    api.digest(repo, "v1")
    assert registry.counts(before, repo)["head_manifest"] == 1
    assert registry.counts(before, repo)["get_manifest"] == 0
    if mode != "anonymous":  # a request without credentials is challenged
        resp = requests.head(f"{registry.url}/v2/{repo}/manifests/v1", timeout=10,
                             headers={"Accept": ACCEPT})
        assert resp.status_code == 401
        scheme = "Bearer" if mode == "token" else "Basic"
        assert resp.headers["WWW-Authenticate"].startswith(scheme)
    if mode == "token":  # the engine's push went through the issuer with the password
        assert registry.issuer is not None
        assert any(r.user == registry.user and r.status == 200 for r in registry.issuer.requests)


def test_tags_move_delete_and_index(registry_htpasswd: Registry,
                                    docker_client: docker.DockerClient) -> None:
    api = RegistryApi(registry_htpasswd)
    repo = new_repository()
    first = push_tiny(docker_client, registry_htpasswd, repo, "v1")
    second = push_tiny(docker_client, registry_htpasswd, repo, "v2")
    assert first != second
    assert api.tag(repo, "v2", "v1") == second  # moved
    assert api.digest(repo, "v1") == second
    index = api.put_index(repo, "multi", {"linux/amd64": first, "linux/arm64": second})
    body, media_type, digest = api.manifest(repo, "multi")
    assert digest == index and media_type.endswith("manifest.list.v2+json")
    assert first.encode() in body and b"arm64" in body
    api.delete(repo, second)  # both tags that pointed at it are gone
    assert api.digest(repo, "v1") is None and api.digest(repo, "v2") is None
    api.close()


def test_stopped_registry_refuses_then_comes_back(registry_anonymous: Registry) -> None:
    with registry_anonymous.stopped(), pytest.raises(requests.ConnectionError):
        requests.get(f"{registry_anonymous.url}/v2/", timeout=5)
    assert requests.get(f"{registry_anonymous.url}/v2/", timeout=5).status_code == 200


def test_proxy_passes_answers_hangs_and_refuses(registry_htpasswd: Registry,
                                                registry_proxy: RegistryProxy) -> None:
    url = f"http://{registry_proxy.host}/v2/"
    session = requests.Session()
    assert session.get(url, timeout=5).status_code == 401  # the registry's challenge
    status, headers, body = too_many_requests(retry_after="7")
    registry_proxy.answer(status, headers, body, times=1)
    resp = session.get(url, timeout=5)  # the pooled connection was dropped: the fault is met
    assert (resp.status_code, resp.headers["Retry-After"]) == (429, "7")
    assert b"TOOMANYREQUESTS" in resp.content
    assert session.get(url, timeout=5).status_code == 401  # once only
    registry_proxy.hang()
    with pytest.raises(requests.ReadTimeout):
        session.get(url, timeout=(2, 0.5))
    registry_proxy.passthrough()
    registry_proxy.refuse()
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=5)
    session.close()


def test_the_packaged_service_stays_stopped() -> None:
    """scripts/setup.sh installs docker-registry with its service kept stopped and disabled:
    no registry runs on the packaged config (every interface, :5000)."""
    packaged = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"docker-registry") and b"/etc/docker/registry/config.yml" in argv:
            packaged.append(cmdline.parent.name)
    assert packaged == [], f"the packaged docker-registry service runs (pids {packaged})"
    if shutil.which("systemctl"):
        state = subprocess.run(["systemctl", "is-enabled", "docker-registry.service"],
                               check=False, capture_output=True, text=True,
                               timeout=30).stdout.strip()
        assert state != "enabled"
