"""The issue's end to end, on the real engine and each store backend: a simulated trainer
(``bench/trainer.py``) draws the daemon's allowlist, reports its rollouts through the client's
reporter, and one healthy-looking environment's sandboxes fail 10% of the time on "the
cluster". envcheck flags it within the sequential test's bound, probes it at once, the probe
passes ("fails on the cluster, passes here"), the tainted interval covers the failing samples,
and the trainer drops exactly those."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.test_daemon import Daemons, write_catalogue
from tests.test_daemon_rollouts import TESTS, TOKEN

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
FLAKY, STEADY = "demo-healthy", "demo-healthy-twin"
IMAGE = "envcheck-demo/healthy:latest"


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    d = Daemons(tmp_path)
    yield d
    d.close()


def test_a_trainer_drops_exactly_the_samples_of_a_tainted_interval(
        daemons: Daemons, tmp_path: Path, store_url: str) -> None:
    catalogue = tmp_path / "probes" / "fleet.yaml"
    write_catalogue(catalogue, [(FLAKY, IMAGE), (STEADY, IMAGE)], fields={FLAKY: TESTS})
    text = catalogue.read_text(encoding="utf-8").replace("tests: null", "tests: 1h").replace(
        "shell_s: 2", "shell_s: 10")  # a loaded host's slow shell is no failure here
    catalogue.write_text(text, encoding="utf-8")
    d = daemons.start(catalogue, concurrency=1, database=store_url,
                      env={"ENVCHECK_API_TOKEN": TOKEN})
    d.wait("both environments allowed", lambda: sorted(
        d.get("/v1/suites/daemon/allowlist").json()["allowed"]) == [FLAKY, STEADY], timeout=120)

    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "trainer.py"), "--api", d.url, "--token", TOKEN,
         "--suite", "daemon", "--flaky", FLAKY, "--failure-rate", "0.1", "--timeout", "180"],
        check=False, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["dropped_exactly_the_failing_samples"] is True
    assert set(report["dropped_by_environment"]) == {FLAKY}
    assert report["kept"] > 0 and report["dropped"] > 0
    # flagged within the test's bound: Wald's expected sample number, with room for chance
    # and for a step of rollouts between two looks
    assert report["flagged_after_rollouts"] <= 3 * report["expected_rollouts"] + 20, report
    assert report["confirmed"] == "cluster_only"
    assert report["reason"].endswith("(fails on the cluster, passes here)")
    [interval] = report["intervals"]
    assert interval["env_id"] == FLAKY and interval["kind"] == "rollouts"
    assert interval["basis"] == "first_failing_rollouts"
    assert datetime.fromisoformat(interval["start"]) <= datetime.fromisoformat(
        report["first_failure"])
    assert interval["end"] is None  # still untrusted: it still fails on the cluster
    assert report["reporter"]["dropped_overflow"] == 0
    assert report["reporter"]["dropped_rejected"] == 0
    assert d.stop() == 0
