"""The engine dies mid-cycle: envcheck reports its own failure, and nothing is quarantined."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from envcheck.sandbox.docker import DockerRuntime
from envcheck.sandbox.labels import LABEL_RUN
from envcheck.store import open_store
from envcheck.store.tables.runs import RunState
from tests.conftest import DEMO, SESSION_TAG, envcheck_cmd
from tests.engine_proxy import EngineProxy
from tests.polling import wait_for

pytestmark = pytest.mark.docker


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[EngineProxy]:
    p = EngineProxy(tmp_path / "engine.sock")
    yield p
    p.close()


def _check(cli_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*envcheck_cmd(), "check", str(DEMO), "--json", *args], env=cli_env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_engine_stopped_mid_cycle_quarantines_nothing(
    cli_env: dict[str, str], data_dir: Path, proxy: EngineProxy, runtime: DockerRuntime
) -> None:
    # Two clean cycles first: the broken demo environments get quarantined, the healthy
    # terminal stays healthy. That is the state the outage must not disturb.
    for _ in range(2):
        assert _check(cli_env, "--probe", "terminal").returncode == 1
    db = f"sqlite:///{data_dir / 'envcheck.db'}"
    with open_store(db) as store:
        before = {r.env_id: (r.state, r.quarantined) for r in store.env_states()}
        generation = store.generation()
    assert before["demo-tool-missing"] == ("broken", True)

    env = {**cli_env, "DOCKER_HOST": proxy.url}
    proc = subprocess.Popen([*envcheck_cmd(), "check", str(DEMO), "--json", "--probe",
                             "terminal", "--concurrency", "2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def mid_cycle() -> bool:
            """Some probes done (a result stored), one in flight (a container up)."""
            if not runtime.containers(SESSION_TAG):
                return False
            with open_store(db) as store:
                running = [r for r in store.runs(limit=1) if r.state == RunState.RUNNING]
                return bool(running) and bool(store.results_for_run(running[0].id))

        wait_for(mid_cycle, timeout_s=60, what="a stored result and a probe in flight",
                 interval_s=0.05, proc=proc)
        proxy.cut()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert len(lines) == 9, stderr
    statuses = {(ln["status"], ln["reason"]) for ln in lines}
    assert ("error", "engine_unreachable") in statuses, statuses
    assert "incident" in stderr
    healthy = [ln for ln in lines if ln["env"] == "demo-healthy"]
    assert healthy[0]["status"] in ("pass", "error"), "an outage never reads as a failure"
    with open_store(db) as store:
        after = {r.env_id: (r.state, r.quarantined) for r in store.env_states()}
        assert store.generation() == generation, "an outage must not make transitions"
        [incident] = store.incidents()
    assert after == before
    assert incident.kind == "engine_unreachable"
    # The engine is back: the next run reaps what the outage left behind.
    again = _check(cli_env, "--env", "demo-healthy", "--probe", "terminal")
    assert again.returncode == 0, again.stderr
    with open_store(db) as store:
        ours = {run.id for run in store.runs()}
    client = docker.from_env(timeout=10)
    try:
        left = client.api.containers(all=True, filters={"label": LABEL_RUN})
    finally:
        client.close()
    assert not [c for c in left if c["Labels"][LABEL_RUN] in ours], "leftovers were reaped"
