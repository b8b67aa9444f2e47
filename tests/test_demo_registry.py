"""``scripts/demo_registry.py``, what ``scripts/run.sh`` runs for the demo's registry, on a tiny
image: the registry it becomes (loopback only, its config and storage where it is told), a push
through the engine that leaves no local reference to the registry's copy and is not repeated,
the tag move (a new digest, the local build removed), and SIGTERM stopping it all."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
import requests

from tests.conftest import ROOT
from tests.polling import stop, wait_for
from tests.ports import free_port
from tests.registry_images import ACCEPT, _tiny_tar

pytestmark = pytest.mark.docker

SCRIPT = ROOT / "scripts" / "demo_registry.py"


def helper(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, Path, subprocess.Popen[bytes]]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "serve", "--dir",
                             str(tmp_path / "registry"), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: requests.get(f"http://127.0.0.1:{port}/v2/", timeout=2).ok,
                 timeout_s=30, what="the demo registry", proc=proc)
        yield port, tmp_path / "registry", proc
    finally:
        if proc.poll() is None:
            stop(proc, timeout_s=10)


@pytest.fixture
def tiny(docker_client: docker.DockerClient) -> Iterator[str]:
    """A local image of one file, ``NAME:latest`` as the demo's images are named."""
    name = f"envcheck-test/demo{uuid.uuid4().hex[:12]}"
    docker_client.api.import_image_from_data(_tiny_tar(uuid.uuid4().bytes), repository=name,
                                             tag="latest")
    try:
        yield name
    finally:
        for image in docker_client.images.list(name):
            docker_client.api.remove_image(image.id, force=True)


def tag_digest(port: int, name: str) -> str | None:
    answer = requests.head(f"http://127.0.0.1:{port}/v2/{name}/manifests/latest",
                           headers={"Accept": ACCEPT}, timeout=10)
    return answer.headers.get("Docker-Content-Digest") if answer.ok else None


def test_push_then_move_a_tag(served: tuple[int, Path, subprocess.Popen[bytes]], tiny: str,
                              docker_client: docker.DockerClient) -> None:
    port, folder, proc = served
    # the process run.sh signals is the registry itself, serving its own config on loopback
    assert Path(f"/proc/{proc.pid}/exe").resolve().name == "docker-registry"
    config = (folder / "config.yml").read_text()
    assert f"addr: 127.0.0.1:{port}\n" in config
    assert f"rootdirectory: {folder / 'data'}\n" in config

    pushed = helper("push", "--port", str(port), tiny)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    first = tag_digest(port, tiny)
    assert first is not None and f"pushed 127.0.0.1:{port}/{tiny}:latest {first}" in pushed.stdout
    # the engine keeps the image under its own name only: the daemon pulls the digest it sees
    [local] = docker_client.images.list(tiny)
    assert local.tags == [f"{tiny}:latest"] and not local.attrs["RepoDigests"]
    again = helper("push", "--port", str(port), tiny)
    assert f"is there ({first}): kept" in again.stdout

    moved = helper("move", "--port", str(port), "--after", "0", tiny)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    second = tag_digest(port, tiny)
    assert second is not None and second != first
    assert f": {first} -> {second}" in moved.stdout
    with pytest.raises(docker.errors.ImageNotFound):  # the rebuild is the registry's alone
        docker_client.images.get(f"127.0.0.1:{port}/{tiny}@{second}")
    assert [i.id for i in docker_client.images.list(tiny)] == [local.id]

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) is not None
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/v2/", timeout=2)


def test_a_helper_waiting_to_move_ends_quietly_on_sigterm() -> None:
    waiting = subprocess.Popen([sys.executable, str(SCRIPT), "move", "--port", "9", "--after",
                                "600", "envcheck-test/none"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert waiting.stdout is not None
        assert "moves in 600 s" in waiting.stdout.readline()  # said once it is waiting
        _, err = stop(waiting, timeout_s=60)  # a hang guard: a loaded host exits slowly
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 0 and err == "", err
