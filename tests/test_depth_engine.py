"""Adaptive depth on the real engine, through ``envcheck check`` and its store: with the
default the flaky and order-dependent demos are still quarantined within the cycles the feed
test allows (4), the healthy one never; an environment long healthy (thresholds shortened
for the test) gets a light check, and a new image digest the whole protocol again."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envcheck.core.results import ProbeKind
from envcheck.store import open_store
from tests.conftest import ROOT, envcheck_cmd

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DEMO_TESTS = ROOT / "probes" / "demo-tests.yaml"
FOUND = ("demo-tests-flaky", "demo-tests-order-dependent")
HEALTHY = "demo-tests-healthy"
BASE_IMAGE = "envcheck-demo/hack-resistant:latest"


def envcheck(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*envcheck_cmd(), *args], env=env, capture_output=True, text=True,
                          timeout=900, check=False)


def docker(*args: str) -> None:
    subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300, check=True)


def private_env(data: Path) -> dict[str, str]:
    env = {**os.environ, "ENVCHECK_DATA_DIR": str(data), "COLUMNS": "200"}
    env.pop("ENVCHECK_DATABASE_URL", None)
    return env


def stored_tests(data: Path, env_id: str) -> list[dict[str, Any]]:
    """The environment's tests results, oldest first: status, reason and depth."""
    with open_store(f"sqlite:///{data / 'envcheck.db'}") as store:
        found = store.history(env_id, ProbeKind.TESTS, limit=50)
    return [{"status": str(r.status), "reason": str(r.reason), "digest": r.image_digest,
             **r.details.get("depth", {})} for r in reversed(found)]


def test_the_adaptive_default_finds_the_flaky_demos_in_as_few_cycles(tmp_path: Path) -> None:
    env = private_env(tmp_path / "data")
    selection = [arg for e in (*FOUND, HEALTHY) for arg in ("--env", e)]
    cycles = 0
    while cycles < 4:  # tests/test_feed_e2e.py allows 4
        cycles += 1
        proc = envcheck(env, "check", str(DEMO_TESTS), "--probe", "tests", *selection)
        assert proc.returncode == 1, proc.stderr  # the flaky ones fail by design
        listed = {q["env_id"] for q in json.loads(
            envcheck(env, "quarantine", "list", "--json").stdout)}
        assert HEALTHY not in listed
        if listed >= set(FOUND):
            break
    assert listed == set(FOUND), f"after {cycles} cycles: {listed}"
    history = json.loads(envcheck(env, "quarantine", "history", "--json").stdout)
    assert HEALTHY not in {t["env_id"] for t in history if t["quarantined"]}
    healthy = stored_tests(tmp_path / "data", HEALTHY)
    # a new identity: every probe within its first day runs the whole protocol
    assert [(r["status"], r["mode"], r["runs"]) for r in healthy] == [("pass", "full", 9)] * \
        cycles
    for env_id in FOUND:
        first = stored_tests(tmp_path / "data", env_id)[0]
        assert first["mode"] == "full" and first["runs"] >= 9, first


@pytest.fixture
def image() -> Iterator[str]:
    """A tag of its own on the healthy task, retagged by the test to a new digest."""
    tag = f"envcheck-test/depth-{uuid.uuid4().hex[:8]}:latest"
    docker("tag", BASE_IMAGE, tag)
    try:
        yield tag
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120,
                       check=False)


def test_a_long_healthy_environment_gets_a_light_check_a_new_digest_the_whole_protocol(
        tmp_path: Path, image: str) -> None:
    demo = DEMO_TESTS.read_text()
    head = demo[:demo.index("    environments:")]
    catalogue = tmp_path / "depth.yaml"
    # "long healthy" shortened to two full validations (the SPRT decides healthy after 15
    # clean runs) and a second
    catalogue.write_text(head.replace("        timeout_s: 60s\n", "        timeout_s: 60s\n"
                                      "        adaptive: {light_after_runs: 18, "
                                      "light_after_s: 1s}\n")
                         + f"    environments:\n      - id: depth-healthy\n"
                           f"        image: {image}\n")
    data = tmp_path / "data"
    env = private_env(data)

    def cycle() -> dict[str, Any]:
        proc = envcheck(env, "check", str(catalogue), "--probe", "tests")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return stored_tests(data, "depth-healthy")[-1]

    first = cycle()
    assert (first["status"], first["mode"], first["runs"]) == ("pass", "full", 9), first
    assert first["why"] == "no evidence yet"
    second = cycle()
    assert (second["mode"], second["runs"]) == ("full", 9) and "has not decided" in second[
        "why"], second
    time.sleep(1.0)  # the clean streak must span light_after_s
    light = cycle()
    assert (light["status"], light["mode"], light["runs"]) == ("pass", "light", 2), light
    assert light["failed_runs"] == 0 and light["digest"] == first["digest"]
    assert light["why"].startswith("healthy for 18 runs")
    # the same task under a new image digest: no evidence for it, the whole protocol again
    build = subprocess.run(["docker", "build", "-q", "-t", image, "-"],
                           input=f"FROM {BASE_IMAGE}\nLABEL envcheck.test=depth\n",
                           capture_output=True, text=True, timeout=300, check=False)
    assert build.returncode == 0, build.stderr
    moved = cycle()
    assert moved["digest"] != first["digest"]
    assert (moved["status"], moved["mode"], moved["runs"]) == ("pass", "full", 9), moved
    assert moved["why"] == "new image digest: no evidence for it yet"
    listed = json.loads(envcheck(env, "quarantine", "list", "--json").stdout)
    assert listed == []
