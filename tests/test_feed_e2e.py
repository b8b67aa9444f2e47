"""The feed end to end on the real engine: the demo fleet is checked repeatedly, the broken
and the flaky environments end up quarantined with the right reasons, the healthy one stays
on the allowlist, and ``envcheck gate`` exits accordingly."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, envcheck_cmd

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ENVS = ("demo-healthy", "demo-tool-missing", "demo-tests-flaky")


def envcheck(cli_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*envcheck_cmd(), *args], env=cli_env, capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Check the three environments until the flaky one has shown itself (at most 4 cycles;
    one cycle catches it with 97% probability at the default reruns)."""
    import os

    data = tmp_path_factory.mktemp("feed-e2e")
    env = {**os.environ, "ENVCHECK_DATA_DIR": str(data), "COLUMNS": "200"}
    env.pop("ENVCHECK_DATABASE_URL", None)
    selection = [arg for e in ENVS for arg in ("--env", e)]
    for cycle in range(4):
        proc = envcheck(env, "check", str(ROOT / "probes"), *selection)
        assert proc.returncode == 1, proc.stderr  # the fleet has failures by design
        listed = json.loads(envcheck(env, "quarantine", "list", "--json").stdout)
        if cycle >= 1 and {q["env_id"] for q in listed} >= {"demo-tool-missing",
                                                              "demo-tests-flaky"}:
            break
    return env


def test_broken_and_flaky_are_quarantined_with_reasons(fleet: dict[str, str]) -> None:
    listed = {q["env_id"]: q for q in json.loads(
        envcheck(fleet, "quarantine", "list", "--json").stdout)}
    assert set(listed) == {"demo-tool-missing", "demo-tests-flaky"}
    broken, flaky = listed["demo-tool-missing"], listed["demo-tests-flaky"]
    assert (broken["state"], broken["source"]) == ("broken", "auto")
    assert "tool_missing" in broken["reason"]
    assert broken["evidence"], "the results that decided are named"
    assert flaky["state"] == "flaky"
    assert "tests:" in flaky["reason"]


def test_gate_exits_by_the_allowlist(fleet: dict[str, str]) -> None:
    ok = envcheck(fleet, "gate", "--suite", "demo", "--env", "demo-healthy", "--json")
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["allowed"] == ["demo-healthy"]
    assert doc["ok"] is True
    blocked = envcheck(fleet, "gate", "--suite", "demo", "--env", "demo-tool-missing")
    assert blocked.returncode == 1
    assert "demo-tool-missing is excluded: quarantined" in blocked.stderr
    too_few = envcheck(fleet, "gate", "--suite", "demo", "--min-healthy", "0.9")
    assert too_few.returncode == 1
    assert "only 50% of demo is allowed" in too_few.stderr
    flaky_suite = envcheck(fleet, "gate", "--suite", "demo-tests")
    assert flaky_suite.returncode == 1, "its only environment is quarantined"


def test_exports_and_history_agree(fleet: dict[str, str]) -> None:
    exports = Path(fleet["ENVCHECK_DATA_DIR"]) / "exports"
    doc = json.loads((exports / "quarantine.json").read_text())
    assert doc["version"] == 1
    assert {e["env_id"] for e in doc["quarantined"]} == {"demo-tool-missing",
                                                        "demo-tests-flaky"}
    assert (exports / "allowlist-demo.txt").read_text() == "demo-healthy\n"
    history = json.loads(envcheck(fleet, "quarantine", "history", "--json").stdout)
    assert doc["generation"] == max(t["generation"] for t in history)
    entered = [t for t in history if t["quarantined"] and not t["was_quarantined"]]
    assert {t["env_id"] for t in entered} == {"demo-tool-missing", "demo-tests-flaky"}
    assert all(t["actor"] == "envcheck" for t in entered)


def test_taint_names_what_to_drop_since_when(fleet: dict[str, str]) -> None:
    """The broken environment's interval reaches back to its image's first result (every
    probe failed); the export file and ``envcheck taint`` say the same."""
    from envcheck.store import open_store

    exports = Path(fleet["ENVCHECK_DATA_DIR"]) / "exports"
    lines = [json.loads(x) for x in (exports / "taint.jsonl").read_text().splitlines()]
    printed = envcheck(fleet, "taint", "--since", "30d", "--json")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout)["intervals"] == lines
    by_env = {x["env_id"]: x for x in lines if x["basis"] != "manual"}
    assert {"demo-tool-missing", "demo-tests-flaky"} <= set(by_env)
    assert "demo-healthy" not in by_env
    broken = by_env["demo-tool-missing"]
    assert (broken["kind"], broken["reason"], broken["basis"], broken["end"]) == \
        ("terminal", "tool_missing", "identity", None)
    assert by_env["demo-tests-flaky"]["kind"] == "tests"
    with open_store(f"sqlite:///{fleet['ENVCHECK_DATA_DIR']}/envcheck.db") as store:
        first = min(r.started_at for r in store.history("demo-tool-missing")
                    if r.image_digest == broken["image_digest"])
    assert broken["start"] == first.isoformat()
    assert broken["evidence"] and broken["start"] < broken["flagged_at"]


def test_manual_quarantine_sticks_until_released(fleet: dict[str, str]) -> None:
    add = envcheck(fleet, "quarantine", "add", "demo-healthy", "--reason", "licence review",
                   "--actor", "alice")
    assert add.returncode == 0, add.stderr
    gate = envcheck(fleet, "gate", "--suite", "demo", "--env", "demo-healthy")
    assert gate.returncode == 1
    assert "quarantined (manual): licence review" in gate.stderr
    # another clean check does not release a manual entry
    again = envcheck(fleet, "check", str(ROOT / "probes"), "--env", "demo-healthy")
    assert again.returncode == 0, again.stderr
    assert envcheck(fleet, "gate", "--suite", "demo", "--env", "demo-healthy").returncode == 1
    release = envcheck(fleet, "quarantine", "release", "demo-healthy", "--reason", "cleared",
                       "--actor", "alice")
    assert release.returncode == 0, release.stderr
    assert envcheck(fleet, "gate", "--suite", "demo", "--env", "demo-healthy").returncode == 0
    empty_reason = envcheck(fleet, "quarantine", "add", "demo-healthy", "--reason", " ")
    assert empty_reason.returncode == 2
