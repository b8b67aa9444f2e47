"""Infrastructure incidents for people: a failure storm recorded with what it held back, listed
by ``envcheck incidents [--since]`` and ``GET /v1/incidents``, on both backends."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import requests

from envcheck.api.app import create_app, serve_in_thread
from envcheck.core.clock import since
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.feed.assess import HELD_BACK_SHOWN, assess_cycle, held_back
from envcheck.store import Store, open_store
from tests.conftest import envcheck_cmd
from tests.test_api import environments, seed

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def storm(store: Store) -> tuple[str, list[ProbeResult]]:
    """A cycle in which every environment's terminal fails at once (engine trouble)."""
    envs = environments()
    run_id = store.start_run("daemon", [])
    results = [ProbeResult(e.id, ProbeKind.TERMINAL, Status.FAIL, Reason.SHELL_MISSING,
                           "no shell", 0.1, f"sha256:{e.id}", "spec", datetime.now(UTC))
               for e in envs]
    for r in results:
        store.record(run_id, r)
    store.finish_run(run_id)
    before = {(e.id, ProbeKind.TERMINAL): Status.PASS for e in envs}
    states = {s.env_id: s.state for s in store.env_states()}
    outcome = assess_cycle(store, run_id, envs, results, before)
    assert outcome.incident is not None and outcome.incident[0] == "failure_storm"
    assert outcome.transitions == []  # held back: no state moved
    assert {s.env_id: s.state for s in store.env_states()} == states
    return run_id, results


@pytest.fixture
def stormy(store_url: str) -> Iterator[tuple[Store, str, list[ProbeResult]]]:
    with open_store(store_url) as store:
        seed(store)
        run_id, results = storm(store)
        yield store, run_id, results


def test_an_incident_says_what_it_held_back(
        stormy: tuple[Store, str, list[ProbeResult]]) -> None:
    store, run_id, results = stormy
    [incident] = store.incidents()
    assert incident.run_id == run_id
    assert incident.held_back == len(results)
    assert incident.held_back_failures == [
        {"env_id": r.env_id, "kind": "terminal", "status": "fail", "reason": "shell_missing"}
        for r in results]
    assert store.incidents(since=datetime.now(UTC) + timedelta(minutes=1)) == []


def test_held_back_names_the_first_failures_and_counts_all() -> None:
    results = [ProbeResult(f"e{i}", ProbeKind.TESTS, *((Status.FAIL, Reason.TIMEOUT) if i % 2
                                                       else (Status.PASS, Reason.OK)), "", 0.1)
               for i in range(3 * HELD_BACK_SHOWN)]
    count, failures = held_back(results)
    assert count == 3 * HELD_BACK_SHOWN
    assert len(failures) == HELD_BACK_SHOWN
    assert failures[0]["env_id"] == "e1"


@pytest.mark.parametrize(("text", "expected"), [
    ("24h", NOW - timedelta(hours=24)), ("30m", NOW - timedelta(minutes=30)),
    ("7d", NOW - timedelta(days=7)), ("2w", NOW - timedelta(weeks=2)),
    ("2026-12-01", datetime(2026, 12, 1, tzinfo=UTC)),
    ("2026-12-01T08:30+01:00", datetime(2026, 12, 1, 7, 30, tzinfo=UTC)),
])
def test_since_takes_an_age_or_a_date(text: str, expected: datetime) -> None:
    assert since(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "h", "-3h", "12x", ""])
def test_since_refuses_anything_else_and_says_what_it_takes(text: str) -> None:
    with pytest.raises(ValueError, match="neither an age"):
        since(text, NOW)


def test_envcheck_incidents(stormy: tuple[Store, str, list[ProbeResult]], store_url: str,
                            cli_env: dict[str, str]) -> None:
    _, run_id, results = stormy

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*envcheck_cmd(), "incidents", "--database", store_url, *args],
                              check=False, env=cli_env, capture_output=True, text=True,
                              timeout=60)

    listed = run("--since", "1h", "--json")
    assert listed.returncode == 0, listed.stderr
    [doc] = json.loads(listed.stdout)
    assert (doc["run_id"], doc["kind"], doc["trigger"]) == (run_id, "failure_storm", "daemon")
    assert doc["held_back"] == len(results) and len(doc["held_back_failures"]) == len(results)
    table = run("--since", "2h")
    assert table.returncode == 0 and "incidents: 1" in table.stdout and run_id in table.stdout
    assert "failure_storm" in table.stdout
    future = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    assert json.loads(run("--since", future, "--json").stdout) == []
    bad = run("--since", "last tuesday")
    assert bad.returncode == 2
    assert "--since" in bad.stderr and "neither an age" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_get_incidents(stormy: tuple[Store, str, list[ProbeResult]]) -> None:
    store, run_id, results = stormy
    with serve_in_thread(create_app(store)) as url, requests.Session() as http:
        http.trust_env = False
        doc = http.get(f"{url}/v1/incidents", params={"since": "24h"}, timeout=(2, 10)).json()
        assert doc["count"] == 1
        [incident] = doc["incidents"]
        assert (incident["run_id"], incident["kind"]) == (run_id, "failure_storm")
        assert incident["held_back"] == len(results)
        assert incident["held_back_failures"][0]["status"] == "fail"
        assert http.get(f"{url}/v1/incidents", timeout=(2, 10)).json()["count"] == 1
        bad = http.get(f"{url}/v1/incidents", params={"since": "soon"}, timeout=(2, 10))
        assert bad.status_code == 400
        assert "neither an age" in bad.json()["reason"]
        too_many = http.get(f"{url}/v1/incidents", params={"limit": 0}, timeout=(2, 10))
        assert too_many.status_code == 422
