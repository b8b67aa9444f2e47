"""Two processes pulling into one engine under one budget (a Ray node's worker processes share
its engine and its ledger): their decisions take turns under the lock beside the ledger and
each counts the room the other's pull reserved, so the engine never holds more of their
pulls than the budget, and both pulls end right.

Real parts: two subprocesses each opening the registry stage as a node's worker does, the
real engine, the real test registry; the engine's images sampled all through both pulls."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import docker
import docker.errors
import pytest

from envcheck.registry.cache import parse_budget
from envcheck.registry.ledger import SqliteLedger, ledger_path
from envcheck.registry.pull import PullTarget
from tests.conftest import ROOT
from tests.pulls import MB, Pulled, push_sized
from tests.registry_images import new_repository
from tests.registryd import Registry

pytestmark = [pytest.mark.docker]

BUDGET = "6MiB"  # one 4 MiB image fits, two do not


def held_bytes(client: docker.DockerClient, targets: list[PullTarget]) -> int:
    """What the engine holds complete of ``targets`` (one layer of their own each)."""
    total = 0
    for t in targets:
        try:
            attrs = client.api.inspect_image(t.reference)
        except docker.errors.NotFound:
            continue
        if t.reference in (attrs.get("RepoDigests") or []):
            total += int(attrs.get("Size") or 0)
    return total


def test_two_processes_sharing_an_engine_never_pass_its_budget_together(
        docker_client: docker.DockerClient, registry_anonymous: Registry,
        pulled_images: Pulled, tmp_path: Path) -> None:
    reg = registry_anonymous
    repo = new_repository()
    targets = [PullTarget(f"{reg.host}/{repo}", push_sized(docker_client, reg, repo, tag, 4 * MB))
               for tag in ("a", "b")]
    pulled_images.add(*targets)
    budget = parse_budget(BUDGET).bytes
    assert budget is not None and held_bytes(docker_client, targets) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = []
    for i, t in enumerate(targets):
        with open(tmp_path / f"child-{i}.log", "wb") as log:
            children.append(subprocess.Popen(
                [sys.executable, "-m", "tests.registry_budget_child", str(tmp_path), BUDGET,
                 t.repository, t.digest], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, text=True))
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(held_bytes(docker_client, targets))
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        sampler.start()
        for child in children:  # both at once
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        said = [child.communicate(timeout=300)[0].strip() for child in children]
    finally:
        stop.set()
        for child in children:
            if child.poll() is None:
                child.kill()
                child.communicate(timeout=30)
    sampler.join(timeout=30)
    logs = "\n".join((tmp_path / f"child-{i}.log").read_text()[-2000:] for i in range(2))
    # both pulls ended right: each pulled in turn, the second evicting the first once it was
    # done (neither used nor held), never both on the engine at once
    assert said == [f"pulled {t.digest}" for t in targets], logs
    assert [c.returncode for c in children] == [0, 0], logs
    assert max(samples) <= budget, f"{max(samples)} bytes held, budget {budget}"
    assert max(samples) > 0  # the sampler saw the pulls
    assert held_bytes(docker_client, targets) <= budget
    present = [t for t in targets if pulled_images.present(t)]
    assert len(present) == 1
    engine_id = str(docker_client.info()["ID"])
    ledger = SqliteLedger(ledger_path(tmp_path, engine_id), engine_id)
    assert [e.reference for e in ledger.entries()] == [present[0].reference]
    assert ledger.pending() == []
    ledger.close()
