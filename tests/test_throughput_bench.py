"""``bench/throughput.py`` runs end to end on the real engine, small: one environment, one probe
at a time. What it must show whatever the machine's speed: after the seed, reused evidence starts
no container (counted from the engine's own events), every such probe is an identity check,
and nothing is left behind. No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def test_after_the_seed_reused_probes_create_no_container(tmp_path: Path) -> None:
    out = tmp_path / "thru.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "throughput.py"), "--envs", "1",
         "--concurrency", "1", "--after-cycles", "1", "--tests-checks", "0", "--no-each-kind",
         "--shell-s", "30",
         "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    made = report["creates"]

    def created(row: dict[str, object]) -> int:
        runs = row["runs"]
        assert isinstance(runs, list)
        return sum(made.get(run, 0) for run in runs)

    # one container per environment and full cycle, shared by its terminal and dependencies probes
    assert created(report["seed"]) == 1
    [before] = [r for r in report["rows"] if r["side"] == "before"]
    [after] = [r for r in report["rows"] if r["side"] == "after"]
    assert created(before) == 1 and before["reused"] == 0
    assert created(after) == 0
    assert after["reused"] == after["probes"] == 2
    assert report["left"] == []
