"""A compose task's project changes no address of the host: the whole life of a project (its
network created, its services' veths plugged into the bridge, all of it taken down), watched
with ``ip monitor`` on the real engine, announces no address on the project's bridge or its
veths, while the services still reach each other by name. Any such address, the engine's
gateway address on the bridge or a kernel's IPv6 link-local one, makes a browser on the host
abort every request in flight (the dashboard's lazily loaded parts among them)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from envcheck.catalogue.models import Limits
from envcheck.sandbox.base import SandboxSpec
from envcheck.sandbox.compose_project import read_project
from envcheck.sandbox.docker import DockerRuntime
from tests.host_addresses import HostAddressWatch

pytestmark = pytest.mark.docker

BASE_IMAGE = "envcheck/base:bookworm"
# The kernel announces a link's IPv6 link-local address when duplicate address detection
# begins, a second or two after the link is up: the project stays up this long.
SETTLE_S = 3.0


def test_project_network_adds_no_address_to_the_host(tmp_path: Path,
                                                     runtime: DockerRuntime) -> None:
    folder = tmp_path / "task"
    (folder / "environment").mkdir(parents=True)
    compose = folder / "environment" / "docker-compose.yaml"
    compose.write_text(f"""\
services:
  main:
    image: {BASE_IMAGE}
    command: ["sleep", "infinity"]
    depends_on: [side]
  side:
    image: {BASE_IMAGE}
    command: ["sleep", "infinity"]
""")
    project = read_project(folder, compose, host=runtime.host)
    spec = SandboxSpec(env_id=f"compose-quiet-{uuid.uuid4().hex[:8]}", image=BASE_IMAGE,
                       run_id=uuid.uuid4().hex, limits=Limits(memory_mb=256, cpus=1.0))
    api = runtime.client.api
    with HostAddressWatch() as watch, \
            runtime.compose(project, spec, images={}, up_timeout_s=60) as sandbox:
        [network] = api.inspect_container(sandbox.container_id)["NetworkSettings"][
            "Networks"].values()
        bridge = f"br-{network['NetworkID'][:12]}"
        found = sandbox.exec(["getent", "hosts", "side"], timeout_s=10)
        assert found.exit_code == 0 and found.text.split()[0], found.text
        time.sleep(SETTLE_S)
    assert watch.lines, "ip monitor saw nothing of the project's links"
    assert any(bridge in line for line in watch.lines), watch.lines
    assert watch.address_changes_of({bridge}) == []

