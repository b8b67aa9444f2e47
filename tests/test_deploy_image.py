"""envcheck's own image (images/envcheck/) run as an operator runs it: on the host's engine
(socket mounted, host network), configured by environment variables, a mounted catalogue
folder and a token file, its data in a mounted folder, the host's pids (so its start-up
clean-up spares another envcheck's live sandbox). It drops to its unprivileged user,
answers its healthcheck, probes demo environments, serves the API and /metrics, and on
SIGTERM lets the probe in flight finish, removes its containers and exits 0."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import requests
from sqlalchemy import text
from typer.testing import CliRunner

from envcheck.cli.app import app
from envcheck.sandbox.base import SandboxSpec
from envcheck.sandbox.docker import DockerRuntime
from envcheck.sandbox.labels import LABEL_ENV, LABEL_TAG
from envcheck.store import open_store
from tests.conftest import SESSION_TAG
from tests.deploy import HTTP_TIMEOUT, IMAGE_UID, events, scrape, total, write_catalogue
from tests.polling import wait_for
from tests.ports import free_port, listening_addresses

TOKEN = "deploy-test-token-0123456789"
SLOW = "img-slow"  # its shell takes ~4 s to start: a probe is often in flight
GRACE_S = 150  # docker stop -t: the daemon's 120 s grace for probes in flight, and some


@pytest.fixture
def engine() -> Iterator[Any]:
    client = docker.from_env(timeout=60)
    yield client
    client.close()


def health(container: Any) -> str:
    container.reload()
    return str(container.attrs["State"].get("Health", {}).get("Status", ""))


def sandboxes(engine: Any, env_id: str | None = None) -> list[Any]:
    labels = [f"{LABEL_TAG}={SESSION_TAG}", *([f"{LABEL_ENV}={env_id}"] if env_id else [])]
    return list(engine.containers.list(all=True, filters={"label": labels}))


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_image_probes_serves_and_stops_cleanly(tmp_path: Path, engine: Any,
                                                   runtime: DockerRuntime,
                                                   deploy_images: tuple[str, str]) -> None:
    image, _ = deploy_images
    catalogue = tmp_path / "catalogue"
    write_catalogue(catalogue, "image", {"img-healthy": "envcheck-demo/healthy:latest",
                                         "img-broken": "envcheck-demo/shell-missing:latest",
                                         SLOW: "envcheck-demo/slow-shell:latest"})
    data = tmp_path / "data"
    data.mkdir()  # root's, as a host folder is: the entrypoint hands it to the daemon's user
    token = tmp_path / "api-token"
    token.write_text(TOKEN + "\n", encoding="utf-8")
    os.chown(token, IMAGE_UID, IMAGE_UID)
    token.chmod(0o400)
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    with contextlib.ExitStack() as cleanup:
        # a sandbox of another envcheck process on this host (this one), in use throughout
        held = cleanup.enter_context(runtime.sandbox(SandboxSpec(
            env_id="held-by-the-host", image="envcheck-demo/healthy:latest", run_id="held")))
        container = engine.containers.run(
            image, detach=True, name=f"envcheck-image-test-{SESSION_TAG}",
            network_mode="host", pid_mode="host",
            volumes={"/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},
                     str(catalogue): {"bind": "/etc/envcheck/catalogue", "mode": "ro"},
                     str(data): {"bind": "/var/lib/envcheck", "mode": "rw"},
                     str(token): {"bind": "/run/secrets/envcheck-api-token", "mode": "ro"}},
            environment={"ENVCHECK_PORT": str(port), "ENVCHECK_WINDOW": "2",
                         "ENVCHECK_MIN_SCHEDULE": "1s", "ENVCHECK_CONTAINER_TAG": SESSION_TAG,
                         "ENVCHECK_API_TOKEN_FILE": "/run/secrets/envcheck-api-token"},
            healthcheck={"interval": 1_000_000_000},  # the image's own check, every second
            labels={"org.envcheck.test": "deploy-image"})
        cleanup.callback(lambda: container.remove(force=True))

        def logs() -> str:
            return str(container.logs().decode(errors="replace"))[-6000:]

        # healthy: the image's HEALTHCHECK found /readyz 200 (store and engine usable)
        wait_for(lambda: health(container) == "healthy", timeout_s=90,
                 what="the container's healthcheck to pass", details=logs)
        assert listening_addresses(port) == {"0100007F"}, "the API listens on 127.0.0.1 only"

        # its start-up clean-up left the live host process's sandbox alone (--pid host)
        assert held.container_id in runtime.containers(SESSION_TAG)

        # the daemon runs as the image's user, with no capabilities, beside the socket's group
        [[uid, pid, *_]] = [row for row in container.top(ps_args="-o uid,pid,args")["Processes"]
                            if "envcheck daemon" in row[-1]]
        assert int(uid) == IMAGE_UID
        status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
        assert re.search(r"^CapEff:\s+0+$", status, re.MULTILINE), status
        socket_gid = os.stat("/var/run/docker.sock").st_gid
        groups = re.search(r"^Groups:\s*(.*)$", status, re.MULTILINE)
        assert groups is not None and str(socket_gid) in groups.group(1).split(), status

        # it probes the demo fleet: the broken image is quarantined, the healthy one is not
        def quarantined() -> set[str]:
            body = requests.get(f"{url}/v1/quarantine", timeout=HTTP_TIMEOUT).json()
            return {entry["env_id"] for entry in body["quarantined"]}
        wait_for(lambda: "img-broken" in quarantined(), timeout_s=90,
                 what="img-broken quarantined through the API", details=logs)
        healthy = requests.get(f"{url}/v1/environments/img-healthy", timeout=HTTP_TIMEOUT)
        assert healthy.status_code == 200 and healthy.json()["state"] == "healthy", healthy.text
        metrics = scrape(url)
        assert total(metrics["envcheck_probe_results_total"], kind="terminal", status="pass") > 0
        assert total(metrics["envcheck_probe_results_total"], kind="terminal", status="fail") > 0
        assert total(metrics["envcheck_environment_quarantined"], env="img-broken") == 1.0

        # the token file configures the API's mutations
        change = {"reason": "deployment test", "actor": "pytest"}
        refused = requests.post(f"{url}/v1/quarantine/img-healthy", json=change,
                                timeout=HTTP_TIMEOUT)
        assert refused.status_code == 401, refused.text
        accepted = requests.post(f"{url}/v1/quarantine/img-healthy", json=change,
                                 headers={"Authorization": f"Bearer {TOKEN}"},
                                 timeout=HTTP_TIMEOUT)
        assert accepted.status_code == 200 and accepted.json()["quarantined"], accepted.text

        # SIGTERM while the slow environment's probe is in flight
        wait_for(lambda: sandboxes(engine, SLOW), timeout_s=60, interval_s=0.1,
                 what="a probe of the slow environment in flight", details=logs)
        container.stop(timeout=GRACE_S)
        container.reload()
        assert container.attrs["State"]["ExitCode"] == 0, logs()
        assert {c.id for c in sandboxes(engine)} == {held.container_id}, \
            "the daemon left containers behind"
        log = container.logs().decode(errors="replace")
        names = [e["event"] for e in events(log)]
        stopping = names.index("daemon stopping")
        assert names[-1] == "daemon stopped", log[-3000:]
        [stopped] = events(log, "scheduler stopped")
        assert stopped["still_running"] == 0, stopped
        assert any(e["event"] == "probe result" and e["env"] == SLOW
                   for e in events(log)[stopping:]), "the probe in flight was not recorded"

    # the data stayed in the mounted folder, owned by the daemon's user
    assert (data / "envcheck.db").stat().st_uid == IMAGE_UID
    with open_store(f"sqlite:///{data / 'envcheck.db'}") as store:
        states = {row.env_id: row for row in store.env_states()}
        assert states["img-broken"].quarantined and states["img-healthy"].quarantined
        with store.engine.connect() as conn:
            rows = conn.execute(text("SELECT state, count(*) FROM check_run GROUP BY state"))
            runs = {str(state): int(n) for state, n in rows}
    assert set(runs) == {"finished"}, f"every run closed by the clean stop: {runs}"


@pytest.mark.parametrize(("variable", "value"), [
    ("ENVCHECK_PORT", "eighty"), ("ENVCHECK_CONCURRENCY", "0"), ("ENVCHECK_WINDOW", "0.5")])
def test_a_bad_setting_in_the_environment_is_named_and_refused(
        tmp_path: Path, variable: str, value: str) -> None:
    """The image and the unit configure the daemon by these variables: a bad one stops the
    start with exit 2, naming the variable, before anything starts."""
    catalogue = write_catalogue(tmp_path / "catalogue", "cli", {"x": "img/x:latest"})
    run = CliRunner().invoke(app, ["daemon", str(catalogue)],
                             env={variable: value, "COLUMNS": "300"})
    assert run.exit_code == 2, run.output
    assert f"(env var: '{variable}')" in run.output, run.output
