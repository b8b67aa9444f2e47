"""Harbor compose tasks on the real engine with the real ``docker-compose``: the demo tasks'
verdicts through ``envcheck check`` with nothing of their projects left behind, a SIGKILLed
check's containers and networks reaped by the next run, the hardening of a project as the
engine holds it, what Compose reads that a sandbox refuses, and a sidecar's missing image as
envcheck's own error."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import struct
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from envcheck.catalogue.harbor_env import image_tag
from envcheck.catalogue.models import Limits
from envcheck.catalogue.treehash import tree_hash
from envcheck.core.errors import ComposeFailed
from envcheck.core.results import Reason
from envcheck.sandbox.base import ENGINE_DEFAULT_CAPABILITIES, SandboxSpec
from envcheck.sandbox.compose_project import ComposeProject, read_project, run_model
from envcheck.sandbox.docker import DockerRuntime
from envcheck.sandbox.labels import (
    LABEL_ENV,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_SANDBOX,
    LABEL_TAG,
)
from tests.conftest import ROOT, SESSION_TAG, envcheck_cmd
from tests.polling import stop, wait_for

pytestmark = pytest.mark.docker

HARBOR = ROOT / "probes" / "harbor"
COMPOSE_TASKS = ("compose-task", "compose-sidecar-fails", "compose-never-healthy")
BASE_IMAGE = "envcheck/base:bookworm"
MiB = 1024 * 1024


def write_catalogue(root: Path, tasks: str) -> Path:
    """A catalogue of one Harbor dataset: the task folder or glob ``tasks``, one oracle run."""
    path = root / "compose.yaml"
    path.write_text(f"""\
version: 1
suites:
  h:
    defaults:
      shell: /bin/bash
      tools: [bash, python3]
      limits: {{ memory_mb: 512, cpus: 1.0, pids: 256 }}
      timeouts: {{ start_s: 15, shell_s: 2, exec_s: 30 }}
      schedules: {{ terminal: 5m, dependencies: null, tests: 6h }}
datasets:
  - id: h
    format: harbor
    path: {tasks}
    suite: h
    reruns: 1
""")
    return path


def check(cli_env: dict[str, str], catalogue: Path, *args: str, timeout: float = 300
          ) -> tuple[int, list[dict[str, Any]], str]:
    proc = subprocess.run([*envcheck_cmd(), "check", str(catalogue), "--json", *args],
                          env=cli_env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc.returncode, lines, proc.stderr


def ours(*labels: str) -> dict[str, list[str]]:
    """An engine filter for what this session's runs made (and ``labels``)."""
    return {"label": [f"{LABEL_TAG}={SESSION_TAG}", *labels]}


def left_of(runtime: DockerRuntime, *labels: str) -> tuple[list[str], list[str]]:
    """The containers and networks on the engine carrying envcheck's labels and ``labels``."""
    api = runtime.client.api
    filters = ours(LABEL_MANAGED, *labels)
    containers = [c["Id"] for c in api.containers(all=True, filters=filters)]
    networks = [n["Name"] for n in api.networks(filters=filters)]
    return containers, networks


def project_networks_of(runtime: DockerRuntime, env_id: str) -> list[str]:
    """Compose project networks (``envcheck-<key>_<name>``) that belong to ``env_id``."""
    return [n["Name"] for n in runtime.client.api.networks(filters={"name": "envcheck-"})
            if n["Name"].startswith("envcheck-")
            and (n.get("Labels") or {}).get(LABEL_ENV) == env_id
            and (n.get("Labels") or {}).get(LABEL_TAG) == SESSION_TAG]


# --- the demo tasks through `envcheck check` ----------------------------------------------


def test_demo_compose_tasks_judged_and_nothing_left(tmp_path: Path, cli_env: dict[str, str],
                                                     runtime: DockerRuntime) -> None:
    catalogue = write_catalogue(tmp_path, str(HARBOR / "compose-*"))
    code, lines, stderr = check(cli_env, catalogue, "--probe", "tests")
    assert code == 1, stderr
    found = {line["env"]: line for line in lines}
    assert set(found) >= set(COMPOSE_TASKS), stderr
    assert {line["probe"] for line in lines} == {"tests"}

    ok = found["compose-task"]
    assert (ok["status"], ok["reason"]) == ("pass", "ok"), ok["summary"]

    exited = found["compose-sidecar-fails"]
    assert (exited["status"], exited["reason"]) == ("fail", "service_start_failed")
    assert exited["details"]["service"] == "api"
    assert "settings.conf" in exited["evidence"][0]["output_tail"]

    unhealthy = found["compose-never-healthy"]
    assert (unhealthy["status"], unhealthy["reason"]) == ("fail", "service_unhealthy")
    assert unhealthy["details"]["service"] == "api"
    assert "index not loaded" in json.dumps(unhealthy["evidence"])

    for env_id in COMPOSE_TASKS:
        assert left_of(runtime, f"{LABEL_ENV}={env_id}") == ([], []), env_id
        assert project_networks_of(runtime, env_id) == [], env_id


# --- a SIGKILLed check ----------------------------------------------------------------------


def _owner_of(runtime: DockerRuntime, items: list[dict[str, Any]], pid: int) -> str | None:
    for item in items:
        owner = (item.get("Labels") or {}).get(LABEL_OWNER, "")
        if f":{pid}:" in owner:
            return str(owner)
    return None


def test_sigkill_leaves_project_the_next_run_reaps(tmp_path: Path, cli_env: dict[str, str],
                                                  runtime: DockerRuntime) -> None:
    catalogue = write_catalogue(tmp_path, str(HARBOR / "compose-*"))
    api = runtime.client.api
    proc = subprocess.Popen([*envcheck_cmd(), "check", str(catalogue), "--env", "compose-task",
                             "--probe", "tests"],
                            env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)

    def in_flight() -> str | None:
        """The check's owner label, once a running container and a network of it exist."""
        filters = ours(f"{LABEL_ENV}=compose-task")
        running = [c for c in api.containers(filters=filters) if c["State"] == "running"]
        owner = _owner_of(runtime, running, proc.pid)
        if owner is None:
            return None
        return owner if _owner_of(runtime, api.networks(filters=filters), proc.pid) else None

    try:
        owner = wait_for(in_flight, timeout_s=120, what="the compose task's project up",
                         interval_s=0.1, proc=proc)
    finally:
        stop(proc, 10, signal.SIGKILL)
    containers, networks = left_of(runtime, f"{LABEL_OWNER}={owner}")
    assert containers, "SIGKILL cannot remove the project's containers by itself"
    assert networks, "SIGKILL cannot remove the project's network by itself"
    assert all(n.startswith("envcheck-") for n in networks), networks

    code, lines, stderr = check(cli_env, catalogue, "--env", "compose-sidecar-fails",
                                "--probe", "tests")
    assert code == 1, stderr
    assert [(r["status"], r["reason"]) for r in lines] == [("fail", "service_start_failed")]
    assert left_of(runtime, f"{LABEL_OWNER}={owner}") == ([], []), "the next run reaps them"
    assert not {c["Id"] for c in api.containers(all=True)} & set(containers)
    assert not {n["Name"] for n in api.networks()} & set(networks)


# --- hardening, on the engine -----------------------------------------------------------------


def _task(root: Path, compose: str) -> tuple[Path, Path]:
    """A task folder under ``root`` whose environment/docker-compose.yaml is ``compose``."""
    folder = root / "task"
    (folder / "environment").mkdir(parents=True)
    path = folder / "environment" / "docker-compose.yaml"
    path.write_text(compose)
    return folder, path


def _default_gateways(table: str) -> set[str]:
    """The gateways of the default routes in ``ip route`` or ``/proc/net/route`` output."""
    found = set()
    for line in table.splitlines():
        words = line.split()
        if words[:1] == ["default"] and "via" in words:
            found.add(words[words.index("via") + 1])
        elif len(words) > 2 and words[1] == "00000000" and words[0] != "Iface":
            found.add(socket.inet_ntoa(struct.pack("<I", int(words[2], 16))))
    return found


def _caps(names: list[str] | None) -> set[str]:
    return {name.upper().removeprefix("CAP_") for name in names or ()}


def test_project_up_is_hardened_on_internal_network(tmp_path: Path,
                                                    runtime: DockerRuntime) -> None:
    folder, path = _task(tmp_path, f"""\
services:
  main:
    image: {BASE_IMAGE}
    command: ["sleep", "infinity"]
    mem_limit: 64m
    depends_on: [side]
  side:
    image: {BASE_IMAGE}
    command: ["sleep", "infinity"]
    deploy:
      resources:
        limits:
          memory: 2g
""")
    project = read_project(folder, path, host=runtime.host)
    env_id = f"compose-hardening-{uuid.uuid4().hex[:8]}"
    spec = SandboxSpec(env_id=env_id, image=BASE_IMAGE, run_id=uuid.uuid4().hex,
                       limits=Limits(memory_mb=256, cpus=1.0))
    api = runtime.client.api
    with runtime.compose(project, spec, images={}, up_timeout_s=60) as sandbox:
        agent = api.inspect_container(sandbox.container_id)
        key = agent["Config"]["Labels"][LABEL_SANDBOX]
        found = [api.inspect_container(c["Id"])
                 for c in api.containers(all=True, filters={"label": f"{LABEL_SANDBOX}={key}"})]
        by_service = {c["Config"]["Labels"]["com.docker.compose.service"]: c for c in found}
        assert set(by_service) == {"main", "side"}
        assert by_service["main"]["Id"] == agent["Id"]
        for service, container in by_service.items():
            host = container["HostConfig"]
            assert _caps(host["CapDrop"]) == {"ALL"}, service
            assert _caps(host["CapAdd"]) == set(ENGINE_DEFAULT_CAPABILITIES), service
            assert any(o.startswith("no-new-privileges") for o in host["SecurityOpt"] or ())
            assert not host.get("Privileged"), service
            assert not host.get("PortBindings"), service
            assert host["NanoCpus"] == 1_000_000_000, service
            assert host["PidsLimit"] == Limits().pids, service
            labels = container["Config"]["Labels"]
            assert labels[LABEL_MANAGED] == "true" and labels[LABEL_SANDBOX] == key, service
            assert labels[LABEL_OWNER] and labels[LABEL_ENV] == env_id, service
        # the stricter of the task's limit (256m) and the service's own
        assert by_service["main"]["HostConfig"]["Memory"] == 64 * MiB
        assert by_service["side"]["HostConfig"]["Memory"] == 256 * MiB
        assert by_service["main"]["HostConfig"]["MemorySwap"] == 64 * MiB
        assert by_service["main"]["HostConfig"]["Init"] is True

        attached = {name for c in found for name in c["NetworkSettings"]["Networks"]}
        assert len(attached) == 1, attached
        [net_name] = attached
        network = api.inspect_network(net_name)
        assert network["Internal"] is True
        # the host's end of the bridge holds no address: the default route an engine before
        # 25 gives leads to no address of the host
        bridge = f"br-{network['Id'][:12]}"
        held = subprocess.run(["ip", "-o", "addr", "show", "dev", bridge], text=True,
                              capture_output=True, check=True, timeout=10).stdout
        assert held.strip() == "", held
        net_labels = network["Labels"] or {}
        assert net_labels[LABEL_MANAGED] == "true" and net_labels[LABEL_SANDBOX] == key
        assert net_labels[LABEL_OWNER] == by_service["main"]["Config"]["Labels"][LABEL_OWNER]

        # the routing table only: no traffic is sent anywhere
        routes = sandbox.exec(["sh", "-c", "ip route || cat /proc/net/route"], timeout_s=10)
        assert routes.exit_code == 0, routes.text
        gateways = _default_gateways(routes.text)
        gateway = {str(c.get("Gateway", "")).split("/")[0]
                   for c in (network.get("IPAM") or {}).get("Config") or ()}
    assert api.containers(all=True, filters={"label": f"{LABEL_SANDBOX}={key}"}) == []
    assert api.networks(filters={"label": f"{LABEL_SANDBOX}={key}"}) == []
    assert api.networks(names=[net_name]) == []
    if gateways:
        # An engine before 25 gives an internal bridge network a default route, via the
        # gateway address the engine would put on the host's end of the bridge. envcheck's
        # networks leave that address off (asserted above), so the route reaches nothing;
        # it must at least be the project's own network's, and only such an engine may have
        # one (docs/how-to/harbor.md).
        assert gateways <= gateway, (gateways, gateway, routes.text)
        version = str(runtime.client.version().get("Version", ""))
        assert int(version.split(".", maxsplit=1)[0]) < 25, routes.text


def test_a_task_allowed_the_internet_joins_only_the_operators_network(
        tmp_path: Path, runtime: DockerRuntime) -> None:
    """The operator's network (here an internal one of this test: no traffic leaves) is joined
    by every service beside the project's own internal network; nothing else is."""
    folder, path = _task(tmp_path, f"""\
services:
  main:
    image: {BASE_IMAGE}
    command: ["sleep", "infinity"]
  side:
    image: {BASE_IMAGE}
    command: ["sleep", "infinity"]
""")
    project = read_project(folder, path, host=runtime.host)
    api = runtime.client.api
    outside = f"envcheck-test-outside-{uuid.uuid4().hex[:8]}"
    api.create_network(outside, driver="bridge", internal=True)
    try:
        spec = SandboxSpec(env_id=f"compose-outside-{uuid.uuid4().hex[:8]}", image=BASE_IMAGE,
                           run_id=uuid.uuid4().hex, network=outside)
        with runtime.compose(project, spec, images={}, up_timeout_s=60) as sandbox:
            key = api.inspect_container(sandbox.container_id)["Config"]["Labels"][LABEL_SANDBOX]
            found = api.containers(all=True, filters={"label": f"{LABEL_SANDBOX}={key}"})
            assert len(found) == 2
            for info in found:
                networks = api.inspect_container(info["Id"])["NetworkSettings"]["Networks"]
                own = [name for name in networks if name != outside]
                assert outside in networks and len(own) == 1, networks
                assert api.inspect_network(own[0])["Internal"] is True
        assert api.inspect_network(outside)["Name"] == outside  # the operator's stays
    finally:
        api.remove_network(outside)


# --- what a sandbox refuses, as Compose reads it -------------------------------------------


@pytest.mark.parametrize(("service", "problem"), [
    ("privileged: true", "is privileged"),
    ("volumes: ['/var/run/docker.sock:/var/run/docker.sock']",
     "bind mount of /var/run/docker.sock"),
    ("cap_add: [SYS_ADMIN]", "cap_add SYS_ADMIN"),
    ("network_mode: host", "network_mode: host"),
    ("volumes: ['../..:/outside']", "outside the task's folder"),
], ids=["privileged", "docker-socket", "cap-sys-admin", "host-network", "bind-outside"])
def test_unsafe_compose_is_refused(tmp_path: Path, service: str, problem: str) -> None:
    folder, path = _task(tmp_path, f"""\
services:
  main:
    image: {BASE_IMAGE}
    {service}
""")
    with pytest.raises(ComposeFailed) as caught:
        read_project(folder, path)
    assert caught.value.reason is Reason.COMPOSE_INVALID
    assert problem in str(caught.value)
    assert "'main'" in str(caught.value)


@pytest.mark.parametrize(("volume", "problem"), [
    ("{driver_opts: {type: none, o: bind, device: /etc}}", "volume 'data': driver_opts"),
    ("{driver: some-plugin}", "volume 'data': driver some-plugin"),
], ids=["host-folder-by-driver-opts", "volume-plugin"])
def test_volume_reaching_host_is_refused(tmp_path: Path, volume: str, problem: str) -> None:
    folder, path = _task(tmp_path, f"""\
services:
  main:
    image: {BASE_IMAGE}
    volumes: ['data:/data']
volumes:
  data: {volume}
""")
    with pytest.raises(ComposeFailed) as caught:
        read_project(folder, path)
    assert caught.value.reason is Reason.COMPOSE_INVALID
    assert problem in str(caught.value)
    path.write_text(path.read_text().replace(f"data: {volume}", "data: {}"))
    assert read_project(folder, path).model["volumes"]["data"].get("driver_opts") is None


def _spec() -> SandboxSpec:
    return SandboxSpec(env_id="compose-model", image=BASE_IMAGE, run_id="run",
                       limits=Limits(memory_mb=256, cpus=1.0))


def _model(project: ComposeProject) -> dict[str, Any]:
    return run_model(project, name="envcheck-model", images={}, spec=_spec(),
                     labels={LABEL_MANAGED: "true"})


def test_bind_mount_inside_task_is_read_only_and_ports_dropped(tmp_path: Path) -> None:
    folder, path = _task(tmp_path, f"""\
services:
  main:
    image: {BASE_IMAGE}
    volumes: ['./data:/data']
    ports: ['8080:80']
""")
    (path.parent / "data").mkdir()
    project = read_project(folder, path)
    assert any("'main'" in note and "ports dropped" in note for note in project.notes)
    main = _model(project)["services"]["main"]
    [volume] = main["volumes"]
    assert (volume["type"], volume["target"], volume["read_only"]) == ("bind", "/data", True)
    assert Path(volume["source"]) == path.parent / "data"
    assert "ports" not in main
    assert project.model["services"]["main"].get("ports"), "the project read stays as read"


def test_run_model_limits_networks_and_labels(tmp_path: Path) -> None:
    folder, path = _task(tmp_path, f"""\
services:
  main:
    image: {BASE_IMAGE}
    mem_limit: 64m
    cpus: 4
  side:
    image: {BASE_IMAGE}
    deploy: {{resources: {{limits: {{memory: 2g, cpus: '0.5'}}}}}}
    networks: [default, back, v6]
networks:
  back: {{}}
  v6: {{enable_ipv6: true, driver_opts: {{com.docker.network.bridge.name: docker0}}}}
""")
    model = _model(read_project(folder, path))
    main, side = model["services"]["main"], model["services"]["side"]
    assert (main["mem_limit"], main["cpus"]) == (64 * MiB, 1.0)
    assert (side["mem_limit"], side["cpus"]) == (256 * MiB, 0.5)
    assert "deploy" not in side
    assert main["command"] == ["sh", "-c", "sleep infinity"]  # Harbor's keep-alive
    for name, network in model["networks"].items():
        assert network["internal"] is True, name
        assert network["labels"] == {LABEL_MANAGED: "true"}, name
        assert network["name"] == f"envcheck-model_{name}"
        # no address on the host's end, and (unless the network asks for IPv6) an MTU below
        # IPv6's minimum: a run adds no address to the host (tests/test_compose_network.py)
        quiet = {"com.docker.network.bridge.inhibit_ipv4": "true"}
        if name != "v6":
            quiet["com.docker.network.driver.mtu"] = "1279"
        assert network["driver_opts"] == quiet, name
    assert set(model["networks"]) == {"default", "back", "v6"}
    assert model["networks"]["v6"]["enable_ipv6"] is True


def test_agent_service_is_main_unless_named(tmp_path: Path) -> None:
    compose = f"""\
services:
  agent:
    image: {BASE_IMAGE}
"""
    folder, path = _task(tmp_path, compose)
    with pytest.raises(ComposeFailed) as caught:
        read_project(folder, path)
    assert caught.value.reason is Reason.COMPOSE_INVALID
    assert "no service 'main'" in str(caught.value)
    path.write_text(f"x-agent-service: agent\n{compose}")
    project = read_project(folder, path)
    assert project.agent == "agent"
    assert project.services == ["agent"]


# --- a sidecar's image not on the host ------------------------------------------------------


@pytest.fixture
def missing_sidecar(tmp_path: Path, runtime: DockerRuntime) -> Iterator[Path]:
    """compose-sidecar-fails, its sidecar naming an image no engine has; the agent's image
    (built from the changed folder) removed afterwards if this test made it."""
    folder = tmp_path / "tasks" / "compose-sidecar-fails"
    shutil.copytree(HARBOR / "compose-sidecar-fails", folder)
    compose = folder / "environment" / "docker-compose.yaml"
    text = compose.read_text()
    assert f"image: {BASE_IMAGE}" in text
    compose.write_text(text.replace(f"image: {BASE_IMAGE}", "image: envcheck-missing/nothing:1"))
    with pytest.raises(docker.errors.ImageNotFound):
        runtime.client.images.get("envcheck-missing/nothing:1")
    tag = image_tag(folder.name, tree_hash(folder / "environment"))
    try:
        runtime.client.images.get(tag)
        made = False
    except docker.errors.ImageNotFound:
        made = True
    yield folder
    if made:
        with contextlib.suppress(docker.errors.ImageNotFound, docker.errors.APIError):
            runtime.client.images.remove(tag, force=True)


def test_missing_sidecar_image_is_envcheck_error(tmp_path: Path, cli_env: dict[str, str],
                                                 missing_sidecar: Path,
                                                 runtime: DockerRuntime) -> None:
    catalogue = write_catalogue(tmp_path, str(missing_sidecar))
    code, lines, stderr = check(cli_env, catalogue, "--probe", "tests")
    assert code == 3, stderr
    [line] = lines
    assert (line["env"], line["status"], line["reason"]) == (
        "compose-sidecar-fails", "error", "image_missing")
    assert "envcheck-missing/nothing:1" in line["summary"]
    assert left_of(runtime, f"{LABEL_ENV}=compose-sidecar-fails") == ([], [])
