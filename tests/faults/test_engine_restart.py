"""The engine stops mid-cycle and starts again: the containers in flight do not outlive it.

The real engine sits behind a socket proxy that the test cuts while a probe is inside a test
run that never returns (the tests-hang demo image), then restores: the probe's removal of its
container fails while the engine is gone, so the container is left on the engine. envcheck
must remove it once the engine answers again, in the same process and without a restart, and
at a clean shutdown even when the engine came back only just before it. The engine is read
through its real socket, by the labels envcheck puts on every container.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import pytest

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Environment
from envcheck.core.errors import EngineUnreachable
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.executors.local import LocalExecutor
from envcheck.sandbox.base import SandboxSpec
from envcheck.sandbox.compose_project import read_project
from envcheck.sandbox.docker import API_VERSION, DockerRuntime
from envcheck.sandbox.labels import LABEL_ENV, LABEL_RUN, LABEL_TAG
from tests.conftest import DEMO, SESSION_TAG
from tests.engine_proxy import ENGINE, EngineProxy
from tests.polling import wait_for
from tests.test_daemon import Daemons

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ENV_ID = "fault-engine-hang"
DEADLINE_S = 120.0  # a bound on waiting, not a speed check: a loaded engine removes slowly

CATALOGUE = f"""version: 1
suites:
  engine-restart:
    defaults:
      workdir: /workspace
      user: agent
      shell: /bin/bash
      tools: [git, python3]
      timeouts: {{ start_s: 15, shell_s: 2, exec_s: 30, probe_s: 5m }}
      # once, within seconds of a daemon's start; never again during a test
      schedules: {{ terminal: null, dependencies: null, tests: 1h, datasource: null,
                   jitter_s: 0 }}
      tests:
        command: JUNIT={{junit}} /opt/task/run_tests.sh {{tests}}
        junit_path: /tmp/envcheck-junit.xml
        fail_to_pass: [tests/test_stats.py::test_median_even_length]
        # never returns: the probe is in flight until the test run's timeout
        pass_to_pass: [tests/test_wait.py::test_waits_for_a_server]
        oracle: {{ path: /opt/task/oracle.sh }}
        timeout_s: 2m
    environments:
      - {{ id: {ENV_ID}, image: 'envcheck-demo/tests-hang:latest' }}
"""


class Engine:
    """The real engine behind a proxy that can be cut (the engine stops) and restored (it
    starts again, at the same address)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.proxy = EngineProxy(path)

    @property
    def url(self) -> str:
        return self.proxy.url

    def cut(self) -> None:
        self.proxy.cut()

    def restore(self) -> None:
        self.proxy.close()  # removes the dead socket file, as a restarted engine does
        self.proxy = EngineProxy(self.path)

    def close(self) -> None:
        self.proxy.close()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    e = Engine(tmp_path / "engine.sock")
    yield e
    e.close()


@pytest.fixture
def real() -> Iterator[docker.DockerClient]:
    """The real engine, never through the proxy."""
    client = docker.DockerClient(base_url=f"unix://{ENGINE}", timeout=30, version=API_VERSION)
    yield client
    client.close()


@pytest.fixture
def hang_env(tmp_path: Path) -> Environment:
    path = tmp_path / "catalogue" / "engine-restart.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(CATALOGUE, encoding="utf-8")
    [env] = load_catalogue([path]).environments
    return env


def _ids(client: docker.DockerClient, *labels: str) -> set[str]:
    return {c["Id"] for c in client.api.containers(all=True, filters={"label": list(labels)})}


def _in_test_run(client: docker.DockerClient, ids: set[str]) -> bool:
    """Is a probe inside the test run that never returns, in one of these containers? Its
    container exists a moment before that: cut earlier, and the probe loses the engine while
    creating or starting it instead."""
    for cid in ids:
        with contextlib.suppress(docker.errors.APIError):  # not running (yet, or any more)
            processes = client.api.top(cid).get("Processes") or []
            if any("test_wait" in " ".join(p) for p in processes):
                return True
    return False


def _outage_mid_probe(engine: Engine, real: docker.DockerClient, executor: LocalExecutor,
                      env: Environment) -> set[str]:
    """Cut the engine while a probe of ``env`` is in flight; the probe's containers, which
    its own removal could not reach, left on the (real) engine."""
    run_id = f"engine-restart-{uuid.uuid4().hex[:8]}"
    mine = (f"{LABEL_TAG}={SESSION_TAG}", f"{LABEL_RUN}={run_id}")
    with ThreadPoolExecutor(1) as pool:
        probe = pool.submit(executor.check, env, [ProbeKind.TESTS], run_id)
        wait_for(lambda: _in_test_run(real, _ids(real, *mine)),
                 timeout_s=DEADLINE_S, what="the probe's hanging test run", interval_s=0.1)
        in_flight = _ids(real, *mine)
        engine.cut()
        [result] = probe.result(timeout=60)
    _assert_outage(result)
    left = _ids(real, *mine)
    assert left and left <= in_flight, "the outage left the in-flight container behind"
    return left


def _assert_outage(result: ProbeResult) -> None:
    assert (result.status, result.reason) == (Status.ERROR, Reason.ENGINE_UNREACHABLE), \
        "an engine outage is envcheck's failure, never the environment's"


@pytest.fixture
def executor(engine: Engine, real: docker.DockerClient,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalExecutor]:
    monkeypatch.setenv("DOCKER_HOST", engine.url)
    ex = LocalExecutor.from_env(concurrency=1, timeout_s=10)
    yield ex
    ex.close()
    # a failed test must not leak: whatever this test's probes left, on the real engine
    for cid in _ids(real, f"{LABEL_TAG}={SESSION_TAG}", f"{LABEL_ENV}={ENV_ID}"):
        real.api.remove_container(cid, force=True, v=True)


@pytest.mark.parametrize("answer", ["ping", "next_check"])
def test_inflight_containers_reaped_once_engine_answers(
    engine: Engine, real: docker.DockerClient, executor: LocalExecutor, hang_env: Environment,
    answer: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="envcheck.sandbox.docker")
    left = _outage_mid_probe(engine, real, executor, hang_env)
    engine.restore()
    if answer == "ping":  # the daemon's readiness watcher pings the engine every few seconds
        def reaped() -> bool:
            executor.ping()  # a removal the loaded engine did not finish waits for the next
            return not (left & _ids(real, LABEL_TAG))
    else:  # the next check starts a sandbox
        [healthy] = [e for e in load_catalogue([DEMO]).environments if e.id == "demo-healthy"]
        [result] = executor.check(healthy, [ProbeKind.TERMINAL], uuid.uuid4().hex)
        assert result.status is Status.PASS, result

        def reaped() -> bool:
            return not (left & _ids(real, LABEL_TAG))
    # the same process, no restart: the leftovers are gone from the real engine
    wait_for(reaped, timeout_s=DEADLINE_S, what="the leftovers to be reaped", interval_s=0.5)
    assert any("reaped 1 leftover container" in r.getMessage() for r in caplog.records)


def test_executor_close_reaps_containers_after_engine_came_back(
    engine: Engine, real: docker.DockerClient, executor: LocalExecutor, hang_env: Environment,
) -> None:
    left = _outage_mid_probe(engine, real, executor, hang_env)
    engine.restore()  # back only just now: nothing has reached the engine since
    executor.close()
    assert not (left & _ids(real, LABEL_TAG)), "close removed the outage's leftovers"


def test_daemon_sigterm_leaves_no_container_after_engine_came_back(
    engine: Engine, real: docker.DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    catalogue = tmp_path / "daemon" / "engine-restart.yaml"
    catalogue.parent.mkdir(parents=True)
    catalogue.write_text(CATALOGUE, encoding="utf-8")
    daemons = Daemons(tmp_path)  # its own client reads the real engine
    try:
        monkeypatch.setenv("DOCKER_HOST", engine.url)
        d = daemons.start(catalogue, window=60.0)
        ours = (f"{LABEL_TAG}={d.tag}", f"{LABEL_ENV}={ENV_ID}")
        d.wait("the probe's hanging test run", lambda: _in_test_run(real, _ids(real, *ours)),
               timeout=DEADLINE_S)
        engine.cut()
        # the removal gives up only after the client's timeout and its retries: a loaded
        # machine needs a generous guard (a hang guard, not a speed target)
        d.wait("the probe's failed removal",
               lambda: any("left behind" in e["event"] for e in d.events()), timeout=240)
        assert _ids(real, *ours), "the outage left the in-flight container behind"
        engine.restore()  # and stop at once, before anything else reaches the engine
        assert d.stop(signal.SIGTERM, timeout=60) == 0
        assert _ids(real, f"{LABEL_TAG}={d.tag}") == set(), \
            "no container of the daemon survives its clean shutdown"
        errors = [r for r in d.rows() if r.env_id == ENV_ID]
        assert errors and all(r.status == "error" for r in errors), errors
    finally:
        daemons.close()  # kills a daemon still running; removes by tag on the real engine


COMPOSE_ENV = "fault-compose-outage"


def _project_left(real: docker.DockerClient) -> tuple[set[str], set[str]]:
    mine = [f"{LABEL_TAG}={SESSION_TAG}", f"{LABEL_ENV}={COMPOSE_ENV}"]
    networks = {n["Id"] for n in real.api.networks(filters={"label": mine})}
    return _ids(real, *mine), networks


def test_a_compose_projects_leftovers_reaped_once_engine_answers(
    engine: Engine, real: docker.DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine stops while a compose task's project is up: neither Compose's ``down`` nor
    the runtime's removal reaches it, so its containers and its network stay; once the engine
    answers, the same runtime removes them all (containers first, then the network)."""
    folder = tmp_path / "task"
    (folder / "environment").mkdir(parents=True)
    compose = folder / "environment" / "docker-compose.yaml"
    compose.write_text("services:\n"
                       "  main: {image: 'envcheck/base:bookworm', depends_on: [side]}\n"
                       "  side: {image: 'envcheck/base:bookworm', command: [sleep, infinity]}\n")
    monkeypatch.setenv("DOCKER_HOST", engine.url)
    runtime = DockerRuntime.from_env(timeout_s=10)
    try:
        project = read_project(folder, compose, host=runtime.host)
        spec = SandboxSpec(env_id=COMPOSE_ENV, image="envcheck/base:bookworm",
                           run_id=uuid.uuid4().hex)
        with (pytest.raises(EngineUnreachable),
              runtime.compose(project, spec, images={}, up_timeout_s=60) as sandbox):
            assert sandbox.exec(["true"], timeout_s=10).exit_code == 0
            engine.cut()
            sandbox.exec(["true"], timeout_s=10)
        containers, networks = _project_left(real)
        assert len(containers) == 2 and len(networks) == 1, "the outage left the project"
        engine.restore()

        def reaped() -> bool:
            runtime.ping()  # as the daemon's readiness watcher does every few seconds
            return _project_left(real) == (set(), set())
        wait_for(reaped, timeout_s=DEADLINE_S, what="the project to be reaped", interval_s=0.5)
    finally:
        runtime.close()
        containers, networks = _project_left(real)  # a failed test must not leak either
        for cid in containers:
            real.api.remove_container(cid, force=True, v=True)
        for nid in networks:
            real.api.remove_network(nid)
