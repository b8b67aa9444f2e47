"""Harbor task folders through envcheck's own entry points: ``envcheck check`` on the demo
dataset from a clean state (no task image on the engine) gives every task its verdict, the
images built by the check cycle itself; ``envcheck validate`` names a broken task's folder,
file and key."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import pytest

from envcheck.catalogue.harbor_env import image_tag
from envcheck.catalogue.treehash import tree_hash
from envcheck.sandbox.docker import DockerRuntime
from tests.conftest import ROOT, envcheck_cmd
from tests.test_harbor_probe import EXPECTED

DEMO = ROOT / "probes" / "harbor"
pytestmark = pytest.mark.docker


def catalogue(root: Path, reruns: int) -> Path:
    text = (ROOT / "probes" / "demo-harbor.yaml").read_text()
    path = root / "harbor.yaml"
    path.write_text(re.sub(r"reruns: \d+ ", f"reruns: {reruns} ", text))
    assert f"reruns: {reruns}" in path.read_text()
    return path


@pytest.fixture
def tasks(tmp_path: Path, runtime: DockerRuntime) -> Iterator[Path]:
    """The demo tasks, each Dockerfile marked with a fresh comment: content no image on the
    engine was built from (a clean state that leaves other runs' images alone)."""
    root = tmp_path / "catalogue"
    shutil.copytree(DEMO, root / "harbor")
    mark = uuid.uuid4().hex
    tags = []
    for folder in (root / "harbor").iterdir():
        dockerfile = folder / "environment" / "Dockerfile"
        dockerfile.write_text(f"{dockerfile.read_text()}# run {mark}\n")
        tags.append(image_tag(folder.name, tree_hash(folder / "environment")))
    for tag in tags:
        with pytest.raises(docker.errors.ImageNotFound):
            runtime.client.images.get(tag)
    yield root
    for tag in tags:
        with contextlib.suppress(docker.errors.ImageNotFound):
            runtime.client.images.remove(tag, force=True)


def check(cli_env: dict[str, str], path: Path, *args: str) -> tuple[int, list[dict[str, str]]]:
    proc = subprocess.run([*envcheck_cmd(), "check", str(path), "--json", *args], env=cli_env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines() if line]


def test_check_builds_and_judges_every_demo_task(cli_env: dict[str, str], tasks: Path) -> None:
    path = catalogue(tasks, reruns=8)
    code, lines = check(cli_env, path)
    assert code == 1
    found = {(r["env"], r["probe"]): (r["status"], r["reason"]) for r in lines}
    assert {env for env, _ in found} == {d.name for d in (tasks / "harbor").iterdir()}
    # 8 oracle runs of a coin-flip verifier all agree 0.8% of the time: two more tries
    for _ in range(2):
        if found["flaky-verifier", "tests"][0] == "flaky":
            break
        found.update({(r["env"], r["probe"]): (r["status"], r["reason"])
                      for r in check(cli_env, path, "-e", "flaky-verifier", "-p", "tests")[1]})
    for name, (status, reason) in EXPECTED.items():
        assert found[name, "tests"] == (status.value, reason.value), name
    # no image, no probe: the build failure is every kind's verdict; a compose task's terminal
    # probe is in its agent's container, its services beside it
    assert found["build-fails", "terminal"] == ("fail", "image_build_failed")
    assert found["compose-task", "terminal"] == ("pass", "ok")
    assert found["compose-sidecar-fails", "terminal"] == ("fail", "service_start_failed")
    assert found["hello-world", "terminal"] == ("pass", "ok")
    failed = next(r for r in lines if r["env"] == "build-fails" and r["probe"] == "tests")
    assert "/etc/hello-task.conf is missing" in json.dumps(failed)


def test_validate_names_the_broken_tasks_folder_file_and_key(tmp_path: Path,
                                                              cli_env: dict[str, str]) -> None:
    shutil.copytree(DEMO / "hello-world", tmp_path / "harbor" / "hello-world")
    toml = tmp_path / "harbor" / "hello-world" / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 60.0", 'timeout_sec = "soon"', 1))
    path = catalogue(tmp_path, reruns=3)
    proc = subprocess.run([*envcheck_cmd(), "validate", str(path)], env=cli_env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stdout
    message = " ".join(proc.stderr.split())
    assert f"{toml}" in message and "verifier.timeout_sec" in message, proc.stderr
    assert "Traceback" not in proc.stderr  # one readable message
