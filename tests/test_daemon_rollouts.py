"""The training run's rollouts through the daemon, on the real engine and each store backend:
a trainer posts its rollouts to the daemon's API; the daemon judges them without waiting
for a probe, probes a flagged environment at once, ahead of its routine work, and says what
the probe found; many environments failing at once are an incident; quarantine on rollouts
alone is a setting.

Each daemon probes demo images' terminals every 2 s, one sandbox at a time (so routine work
always waits in the queue), and the healthy task's tests once an hour (``reruns: 2``); shells
get 10 s to answer, so a loaded host's slowness is not a failure here.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.test_daemon import HTTP_TIMEOUT_S, Daemon, Daemons, write_catalogue

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TOKEN = "rollouts-token-for-tests-0123456789"
HEALTHY = "demo-healthy"
OTHERS = {"demo-tool-missing": "tool-missing", "demo-workdir-readonly": "workdir-readonly",
          "demo-user-missing": "user-missing", "demo-shell-missing": "shell-missing"}
FLAGGED = "rollouts: rollout_failures"
SEQ = itertools.count()


# the healthy task's tests, validated in full in a few seconds
TESTS = ("tests: { command: 'JUNIT={junit} /opt/task/run_tests.sh {tests}', "
         "fail_to_pass: [tests/test_stats.py::test_median_even_length], "
         "pass_to_pass: [tests/test_stats.py::test_mean], "
         "oracle: { path: /opt/task/oracle.sh }, reruns: 2, timeout_s: 60s }")


def write_fleet(path: Path) -> None:
    """The demo images, terminals every 2 s (quarantined too), the healthy task's tests
    hourly."""
    write_catalogue(path, [(HEALTHY, "envcheck-demo/healthy:latest"),
                           *((env_id, f"envcheck-demo/{image}:latest")
                             for env_id, image in OTHERS.items())], fields={HEALTHY: TESTS})
    text = path.read_text(encoding="utf-8").replace("tests: null", "tests: 1h").replace(
        "jitter_s: 0", "jitter_s: 0, quarantined_factor: 1").replace(
        "shell_s: 2", "shell_s: 10")  # a loaded host's slow shell is no failure here
    assert "shell_s: 10" in text and "quarantined_factor: 1" in text
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    d = Daemons(tmp_path)
    yield d
    d.close()


def start(daemons: Daemons, tmp_path: Path, store_url: str, *args: str) -> Daemon:
    catalogue = tmp_path / "probes" / "fleet.yaml"
    write_fleet(catalogue)
    return daemons.start(catalogue, concurrency=1, database=store_url, args=args,
                         env={"ENVCHECK_API_TOKEN": TOKEN})


def post(d: Daemon, batches: dict[str, tuple[int, dict[str, int]]],
         at: datetime | None = None) -> None:
    """A trainer's batch, one request: per environment, clean rollouts and failed ones by
    outcome (the clean ones rewarded 1)."""
    when = (at or datetime.now(UTC)).isoformat()
    body = [{"env_id": env_id, "at": when, "producer": "trainer-1", "seq": next(SEQ),
             "outcome": outcome, "image_digest": "sha256:cluster",
             **({"reward": 1.0} if outcome == "ok" else {})}
            for env_id, (ok, failed) in batches.items()
            for outcome in ["ok"] * ok + [o for o, n in failed.items() for _ in range(n)]]
    answer = requests.post(d.url + "/v1/rollouts", json=body, timeout=HTTP_TIMEOUT_S,
                           headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["counted"] == len(body)


def environment(d: Daemon, env_id: str) -> dict[str, Any]:
    answer = d.get(f"/v1/environments/{env_id}")
    assert answer.status_code == 200, answer.text
    doc: dict[str, Any] = answer.json()
    return doc


def test_a_flagged_environment_is_probed_ahead_of_the_queue_and_passes_here(
        daemons: Daemons, tmp_path: Path, store_url: str) -> None:
    d = start(daemons, tmp_path, store_url)
    d.wait("the healthy task validated",
           lambda: environment(d, HEALTHY)["state"] == "healthy", timeout=90)
    # the trainer's rollouts: the healthy task's sandboxes fail 15% of the time on the
    # cluster, the others' never
    post(d, {HEALTHY: (170, {"sandbox_lost": 20, "verifier_error": 10}),
             **{env_id: (200, {}) for env_id in OTHERS}})
    d.wait("the flag", lambda: environment(d, HEALTHY)["reason"].startswith(FLAGGED))
    flagged = environment(d, HEALTHY)
    assert flagged["state"] == "degraded"
    rollouts = flagged["rollouts"]
    assert rollouts["flagged"] and rollouts["image_digest"] == "sha256:cluster"
    assert rollouts["by_outcome"] == {"ok": 170, "sandbox_lost": 20, "verifier_error": 10}
    assert rollouts["failure_rate"] == pytest.approx(0.15)
    assert rollouts["fleet_rate"] == 0.0 and rollouts["flagged_at"] is not None
    # each environment is judged in its turn of the same pass: the others may come just after
    d.wait("the others' rollouts judged",
           lambda: all(environment(d, e)["rollouts"] is not None for e in OTHERS))
    for env_id in OTHERS:
        assert environment(d, env_id)["rollouts"]["flagged"] is False
    d.wait("the escalation", lambda: d.events("rollouts flagged an environment: probing "
                                              "it now"))
    [escalated] = d.events("rollouts flagged an environment: probing it now")
    assert escalated["env"] == HEALTHY and set(escalated["kinds"]) == {"terminal", "tests"}

    d.wait("the probes' verdict", lambda: environment(d, HEALTHY)["rollouts"]["confirmed"],
           timeout=90)
    doc = environment(d, HEALTHY)
    assert doc["rollouts"]["confirmed"] == "cluster_only", doc["reason"]
    assert doc["reason"] == FLAGGED + " (fails on the cluster, passes here)"
    assert doc["state"] == "degraded"
    # ahead of the queue: the flagged task's two kinds are the next probes to start (one
    # taken before the escalation may start beside its log line), though four others'
    # terminals are due every 2 s; its tests probe, due hourly, validated in full
    since = datetime.fromisoformat(escalated["ts"])

    def after() -> list[Any]:
        return sorted((r for r in d.rows() if r.started_at >= since),
                      key=lambda r: r.started_at)

    d.wait("routine work to go on", lambda: {r.env_id for r in after()} - {HEALTHY})
    firsts = [(r.env_id, r.kind) for r in after()[:3]]
    assert {(HEALTHY, "terminal"), (HEALTHY, "tests")} <= set(firsts), firsts
    with d.store() as store:
        tests = [r for r in store.latest_results([HEALTHY]) if r.kind.value == "tests"]
    [result] = tests
    assert result.status.value == "pass" and result.started_at >= since
    depth = result.details["depth"]
    assert depth["mode"] == "full" and depth["why"].startswith("rollout failures: "), depth
    assert d.stop() == 0


def test_a_storm_is_an_incident_and_quarantine_on_rollouts_is_a_setting(
        daemons: Daemons, tmp_path: Path, store_url: str) -> None:
    d = start(daemons, tmp_path, store_url, "--rollout-quarantine")
    d.wait("the first probes", lambda: len(d.rows()) >= 5)
    # an hour and a half ago, every sandbox but one environment's failed to start
    storm = datetime.now(UTC) - timedelta(minutes=90)
    post(d, {HEALTHY: (200, {}),
             **{env_id: (100, {"sandbox_start_failed": 100}) for env_id in OTHERS}}, at=storm)
    d.wait("the incident", lambda: d.get("/v1/incidents").json()["count"] == 1)
    [incident] = d.get("/v1/incidents").json()["incidents"]
    assert (incident["kind"], incident["failing"], incident["total"]) == ("rollout_storm", 4, 5)
    assert incident["held_back"] == 1000
    for env_id in [HEALTHY, *OTHERS]:
        doc = environment(d, env_id)
        assert not doc["rollouts"] or not doc["rollouts"]["flagged"], env_id
        assert "rollouts" not in doc["reason"]
        assert not [t for t in doc["history"] if "rollout" in t["reason"]], env_id
    assert d.events("rollouts flagged an environment: probing it now") == []

    # now, one environment's sandboxes fail on their own: quarantined on rollouts alone
    post(d, {HEALTHY: (85, {"verifier_timeout": 15})})
    d.wait("the quarantine", lambda: (environment(d, HEALTHY)["quarantine"] or {}).get(
        "reason") == "flaky: " + FLAGGED)
    doc = environment(d, HEALTHY)
    assert doc["state"] == "flaky" and doc["allowed"] is False
    assert doc["rollouts"]["by_outcome"] == {"ok": 85, "verifier_timeout": 15}, \
        "the storm's hour stays held back"
    assert HEALTHY in {e["env_id"] for e in d.get("/v1/quarantine").json()["quarantined"]}
    assert d.stop() == 0
