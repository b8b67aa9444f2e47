"""The wrong-fix development set (bench/strength_devset.py), smoke-tested on one instance: its
image built by the set's build script (sdist and wheels from PyPI, cached; the image offline
from the local base image: a build that cannot be done fails here), its record a valid task
through ``envcheck check``, and one hand-written wrong fix that the weakened test accepts and
the original test refuses. The whole set runs as a benchmark, not here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, envcheck_cmd

sys.path.insert(0, str(ROOT / "bench"))

import strength_devset
import strength_devset_build

pytestmark = pytest.mark.docker

INSTANCE = "pallets__flask-4992"  # flask's config tests: a second a run
WRONG = "load-error-swallowed"


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The instance's image built (or kept), then its record, and one wrong fix under the
    weakened and the original test patch, through ``envcheck check --json``, by id."""
    strength_devset_build.build_all([INSTANCE])
    folder = tmp_path_factory.mktemp("devset")
    strength_devset.OUT = folder
    catalogue, parts = strength_devset.write_catalogue([INSTANCE], with_wrong=True)
    text = catalogue.read_text(encoding="utf-8")
    catalogue.write_text(text.replace("  strength: {}\n", ""), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "ENVCHECK_DATABASE_URL"}
    env["ENVCHECK_DATA_DIR"] = str(folder / "data")
    ids = [parts["original"][0], f"{INSTANCE}-wrong-{WRONG}-weak",
           f"{INSTANCE}-wrong-{WRONG}-orig"]
    args = [a for i in ids for a in ("-e", i)]
    done = subprocess.run([*envcheck_cmd(), "check", str(catalogue), "-p", "tests", "--json",
                           *args], env=env, capture_output=True, text=True, timeout=600,
                          check=False, cwd=ROOT)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    found = {line["env"]: line for line in lines if line.get("probe") == "tests"}
    assert set(found) == set(ids), done.stdout[-2000:] + done.stderr[-2000:]
    return found


def test_the_image_is_the_release_the_record_patches() -> None:
    spec = strength_devset_build.sources()["instances"][INSTANCE]
    assert spec["sdist"] == "flask==2.2.3"
    records = strength_devset.records()
    assert records[INSTANCE]["FAIL_TO_PASS"] == ["tests/test_config.py::test_config_from_file_toml"]


def test_the_record_is_a_valid_task(checked: dict[str, dict[str, Any]]) -> None:
    result = checked[INSTANCE]
    assert (result["status"], result["reason"]) == ("pass", "ok"), result["summary"]


def test_a_wrong_fix_passes_the_weakened_test(checked: dict[str, dict[str, Any]]) -> None:
    result = checked[f"{INSTANCE}-wrong-{WRONG}-weak"]
    assert (result["status"], result["reason"]) == ("pass", "ok"), result["summary"]


def test_the_original_test_refuses_it(checked: dict[str, dict[str, Any]]) -> None:
    result = checked[f"{INSTANCE}-wrong-{WRONG}-orig"]
    assert (result["status"], result["reason"]) == ("fail", "oracle_does_not_fix"), \
        result["summary"]


def test_every_instance_has_a_weakened_patch_and_three_wrong_fixes() -> None:
    for instance_id in strength_devset_build.sources()["instances"]:
        folder: Path = strength_devset.instance_dir(instance_id)
        assert (folder / "weak.test_patch").read_text(encoding="utf-8").startswith("diff --git")
        assert len(strength_devset.wrong_fixes(instance_id)) >= 3, instance_id
