"""`envcheck check` end to end: the real console script, the real engine, a real store."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import docker
import pytest

from envcheck.sandbox.docker import DockerRuntime
from envcheck.sandbox.labels import LABEL_OWNER
from envcheck.store import open_store
from tests.conftest import DEMO, envcheck_cmd
from tests.polling import stop, wait_for

pytestmark = pytest.mark.docker


def run_check(cli_env: dict[str, str], *args: str, timeout: float = 120
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*envcheck_cmd(), "check", str(DEMO), *args], env=cli_env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def json_lines(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_healthy_exits_zero_and_stores(cli_env: dict[str, str], data_dir: Path) -> None:
    proc = run_check(cli_env, "--env", "demo-healthy", "--probe", "terminal", "--json")
    assert proc.returncode == 0, proc.stderr
    [line] = json_lines(proc.stdout)
    assert set(line) >= {"env", "probe", "status", "reason", "duration_s", "image_digest",
                         "summary", "details"}
    assert (line["env"], line["probe"], line["status"]) == ("demo-healthy", "terminal", "pass")
    with open_store(f"sqlite:///{data_dir / 'envcheck.db'}") as store:
        [stored] = store.latest_results(["demo-healthy"])
        [run] = store.runs()
    assert stored.status == "pass"
    assert stored.image_digest == line["image_digest"]
    assert run.state == "finished"


def test_failure_exits_one(cli_env: dict[str, str]) -> None:
    proc = run_check(cli_env, "--env", "demo-tool-missing", "--env", "demo-healthy")
    assert proc.returncode == 1, proc.stderr
    assert "tool_missing" in proc.stdout
    assert "demo-healthy" in proc.stdout


def test_missing_image_exits_three_not_one(cli_env: dict[str, str]) -> None:
    proc = run_check(cli_env, "--env", "demo-image-missing", "--probe", "terminal", "--json")
    assert proc.returncode == 3, proc.stderr
    [line] = json_lines(proc.stdout)
    assert (line["status"], line["reason"]) == ("error", "image_missing")


def test_engine_down_is_an_error_for_every_probe(cli_env: dict[str, str],
                                                 data_dir: Path) -> None:
    env = {**cli_env, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    proc = run_check(env, "--json")
    assert proc.returncode == 3, proc.stderr
    lines = json_lines(proc.stdout)
    kinds = {ln["probe"] for ln in lines}
    assert len(lines) == 9 * len(kinds)
    assert "terminal" in kinds
    assert {(ln["status"], ln["reason"]) for ln in lines} == {("error", "engine_unreachable")}
    with open_store(f"sqlite:///{data_dir / 'envcheck.db'}") as store:
        assert {r.status for r in store.latest_results()} == {"error"}


@pytest.mark.parametrize(("args", "message"), [
    (("--env", "no-such-env"), "unknown environment"),
    (("--probe", "no-such-kind"), "not available"),
])
def test_bad_selection_exits_two(cli_env: dict[str, str], args: tuple[str, ...],
                                 message: str) -> None:
    proc = run_check(cli_env, *args)
    assert proc.returncode == 2
    assert message in proc.stderr


def _wait_for_container(proc: subprocess.Popen[str], timeout: float = 60) -> list[str]:
    """Containers started by ``proc`` (its owner label names its pid)."""
    client = docker.from_env(timeout=10)

    def started() -> list[str]:
        return [c["Id"] for c in client.api.containers(all=True, filters={"label": LABEL_OWNER})
                if f":{proc.pid}:" in c["Labels"][LABEL_OWNER]]

    try:
        return wait_for(started, timeout_s=timeout, what="the check's first container",
                        interval_s=0.1, proc=proc)
    finally:
        client.close()


def _start_slow_check(cli_env: dict[str, str]) -> subprocess.Popen[str]:
    # demo-slow-shell takes ~8 s per probe: long enough to be caught in flight.
    return subprocess.Popen([*envcheck_cmd(), "check", str(DEMO), "--env", "demo-slow-shell",
                             "--probe", "terminal"],
                            env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_sigkill_leftovers_are_reaped_and_run_marked(cli_env: dict[str, str], data_dir: Path,
                                                     runtime: DockerRuntime) -> None:
    proc = _start_slow_check(cli_env)
    try:
        leftovers = _wait_for_container(proc)
    finally:
        stop(proc, 10, signal.SIGKILL)
    assert set(leftovers) <= set(runtime.containers()), "SIGKILL cannot clean up by itself"
    again = run_check(cli_env, "--env", "demo-healthy")
    assert again.returncode == 0, again.stderr
    assert not set(leftovers) & set(runtime.containers()), "the next run reaps leftovers"
    with open_store(f"sqlite:///{data_dir / 'envcheck.db'}") as store:
        states = sorted(run.state for run in store.runs())
    assert states == ["finished", "interrupted"]


def test_sigterm_removes_containers(cli_env: dict[str, str], data_dir: Path,
                                    runtime: DockerRuntime) -> None:
    proc = _start_slow_check(cli_env)
    try:
        started = _wait_for_container(proc)
    finally:
        _, stderr = stop(proc, 60)
    assert proc.returncode == 130, stderr
    assert not set(started) & set(runtime.containers())
    with open_store(f"sqlite:///{data_dir / 'envcheck.db'}") as store:
        [run] = store.runs()
        assert run.state == "interrupted"
