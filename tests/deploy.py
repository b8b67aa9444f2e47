"""What the deployment tests share: the deployment images (built once per session by the
project's own script, a cache hit when nothing changed), a catalogue of demo environments, and
reading a daemon's JSON log lines and metrics.

Registered as a plugin in tests/conftest.py, so the fixtures need no import."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.conftest import ROOT
from tests.test_alerts import samples

BUILD_SCRIPT = ROOT / "scripts" / "build_deploy_images.py"
ENVCHECK_IMAGE = "envcheck/envcheck:latest"
STACK_IMAGE = "envcheck/stack:bookworm"
IMAGE_UID = 10001  # images/envcheck/Dockerfile's ENVCHECK_UID
HTTP_TIMEOUT = (2, 5)

def write_catalogue(folder: Path, suite: str, envs: dict[str, str],
                    sources: dict[str, str] | None = None) -> Path:
    """``folder/fleet.yaml``: the environments (id -> image) probed every 2 s, at the same
    rate in quarantine; with ``sources`` (id -> URL) each also calls every data source."""
    defaults = {
        "workdir": "/workspace", "user": "agent", "shell": "/bin/bash",
        "tools": ["git", "python3"], "timeouts": {"start_s": 15, "shell_s": 2, "exec_s": 30},
        "schedules": {"terminal": "2s", "datasource": "2s", "dependencies": None,
                      "tests": None, "jitter_s": 0, "quarantined_factor": 1},
    }
    environments = [{"id": env_id, "image": image,
                     **({"data_sources": list(sources)} if sources else {})}
                    for env_id, image in envs.items()]
    doc: dict[str, Any] = {"version": 1, "suites": {suite: {
        "description": "envcheck deployment tests", "defaults": defaults,
        "environments": environments}}}
    if sources:
        doc["data_sources"] = [{"id": source_id, "url": url, "samples": 2}
                               for source_id, url in sources.items()]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def deploy_images() -> tuple[str, str]:
    """envcheck's image and the stack's services image, as scripts/test.sh's set-up builds
    them: up to date in a second when nothing changed."""
    proc = subprocess.run([sys.executable, str(BUILD_SCRIPT)], capture_output=True, text=True,
                          timeout=1800, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return ENVCHECK_IMAGE, STACK_IMAGE


def events(log: str, name: str | None = None) -> list[dict[str, Any]]:
    """The daemon's JSON log events (other lines skipped), optionally one kind of them."""
    found = []
    for line in log.splitlines():
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if name is None or event.get("event") == name:
                found.append(event)
    return found


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``/metrics`` of a daemon: sample name -> (labels, value) pairs."""
    return samples(requests.get(f"{url}/metrics", timeout=HTTP_TIMEOUT).text)


def total(samples: Iterable[tuple[dict[str, str], float]], **labels: str) -> float:
    return sum(v for s, v in samples if all(s.get(k) == x for k, x in labels.items()))
