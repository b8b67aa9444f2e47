"""A compose task's project brought up for one run, as Harbor brings it up, and taken down.

``up --detach --wait`` (Compose honours ``depends_on`` conditions and health checks) within
the task's timeout, nothing built or pulled; the agent's container is then the run's sandbox.
When ``up`` fails the engine is asked first (its failure is envcheck's ``error``), then each
service's container says what went wrong: one that did not start or exited
(``service_start_failed``) or did not become healthy (``service_unhealthy``), with its log's
tail. ``down`` runs whatever happened; the runtime then removes by label whatever is left.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import docker

from envcheck.core.errors import ComposeFailed
from envcheck.core.results import Reason
from envcheck.sandbox.base import SandboxSpec
from envcheck.sandbox.compose_cli import ComposeCall, run_compose
from envcheck.sandbox.compose_project import ComposeProject, run_model
from envcheck.sandbox.engine import engine_call

__all__ = ["bring_up"]

log = logging.getLogger("envcheck.sandbox.docker")

LABEL_PROJECT = "com.docker.compose.project"
LABEL_SERVICE = "com.docker.compose.service"
LOG_TAIL_LINES = 30
DOWN_TIMEOUT_S = 60.0
_MARGIN_S = 30.0  # Compose's own bookkeeping beyond its --wait-timeout


@contextmanager
def bring_up(client: docker.DockerClient, project: ComposeProject, spec: SandboxSpec, *,
             name: str, images: dict[str, str], labels: dict[str, str], up_timeout_s: float,
             host: str, preflight: Callable[[], None]) -> Iterator[tuple[str, float]]:
    """Bring the project up as ``name``; yield the agent container's id and how long ``up``
    took. Raise :class:`ComposeFailed` for the task's defect, envcheck's errors for its own."""
    model = run_model(project, name=name, images=images, spec=spec, labels=labels)
    _images_present(client, model, preflight)
    with tempfile.TemporaryDirectory(prefix="envcheck-compose-") as tmp:
        path = Path(tmp) / "compose.json"
        path.write_text(json.dumps(model), encoding="utf-8")
        base = ["--project-name", name, "-f", str(path)]
        try:
            wait = max(int(up_timeout_s), 1)
            call = run_compose([*base, "up", "--detach", "--wait", "--wait-timeout", str(wait),
                                "--no-build", "--pull", "never"],
                               timeout_s=wait + _MARGIN_S, host=host)
            with engine_call(preflight):  # a dying engine fails up too: envcheck's error
                client.ping()
            agent = _containers(client, name, preflight).get(project.agent)
            if not call.ok or agent is None:
                raise _diagnose(client, name, project, call, wait, preflight)
            yield str(agent["Id"]), call.duration_s
        finally:
            down = run_compose([*base, "down", "--volumes", "--remove-orphans", "--timeout",
                                "1"], timeout_s=DOWN_TIMEOUT_S, host=host)
            if not down.ok:
                log.warning("compose down of %s failed (the runtime removes it by label): %s",
                            name, down.tail(5))


def _images_present(client: docker.DockerClient, model: dict[str, Any],
                    preflight: Callable[[], None]) -> None:
    """A named image not on the host is the operator's to pull (envcheck never pulls), as for
    a single-container task: ``image_missing``, not the task's defect."""
    for svc in model["services"].values():
        image = str(svc["image"])
        with engine_call(preflight, image):
            client.images.get(image)  # ImageNotFound -> ImageMissing


def _containers(client: docker.DockerClient, name: str, preflight: Callable[[], None]
                ) -> dict[str, dict[str, Any]]:
    """The project's containers by service, inspected."""
    with engine_call(preflight):
        found = client.api.containers(all=True, filters={"label": f"{LABEL_PROJECT}={name}"})
        inspected = [client.api.inspect_container(info["Id"]) for info in found]
    return {str(c["Config"]["Labels"].get(LABEL_SERVICE)): c for c in inspected}


def _log_tail(client: docker.DockerClient, container: dict[str, Any],
              preflight: Callable[[], None]) -> str:
    with engine_call(preflight):
        raw = client.api.logs(container["Id"], tail=LOG_TAIL_LINES)
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    health = (container["State"].get("Health") or {}).get("Log") or []
    if health:
        text += f"\n[last health check, exit {health[-1].get('ExitCode')}]: " \
                f"{str(health[-1].get('Output') or '').strip()}"
    return text.strip()


def _diagnose(client: docker.DockerClient, name: str, project: ComposeProject,
              call: ComposeCall, wait: int, preflight: Callable[[], None]) -> ComposeFailed:
    """Which service failed, and how: one that exited or never ran before one that is
    unhealthy, before one still starting; sidecars before the agent (they fail it)."""
    containers = _containers(client, name, preflight)
    order = sorted(project.services, key=lambda s: s == project.agent)
    found: list[tuple[int, str, Reason, str]] = []
    for service in order:
        container = containers.get(service)
        state = (container or {}).get("State") or {}
        if container is None or state.get("Status") == "created":
            continue  # never started: a service it depends on failed first
        health = (state.get("Health") or {}).get("Status")
        if state.get("Status") != "running" or state.get("Restarting"):
            found.append((0, service, Reason.SERVICE_START_FAILED,
                          f"exited with code {state.get('ExitCode')}"
                          if state.get("Status") in ("exited", "dead") else
                          f"is {state.get('Status')}: {state.get('Error') or 'not running'}"))
        elif health == "unhealthy":
            found.append((1, service, Reason.SERVICE_UNHEALTHY, "is unhealthy"))
        elif health == "starting":
            found.append((2, service, Reason.SERVICE_UNHEALTHY,
                          f"was not healthy within {wait}s"))
    command = "docker-compose up --wait"
    if not found:
        if call.ok:  # up said done, yet the agent's container is not there
            return ComposeFailed(Reason.SERVICE_START_FAILED, f"no container for the agent's "
                                 f"service {project.agent!r}", service=project.agent,
                                 log_tail=call.tail(), command=command,
                                 duration_s=call.duration_s)
        timed_out = " (timed out)" if call.returncode is None else ""
        return ComposeFailed(Reason.SERVICE_START_FAILED, f"compose up failed{timed_out}: "
                             f"{call.last_line()}", log_tail=call.tail(),
                             command=command, duration_s=call.duration_s)
    _, service, reason, what = min(found, key=lambda f: f[0])
    return ComposeFailed(reason, f"service {service!r} {what}", service=service,
                         log_tail=_log_tail(client, containers[service], preflight),
                         command=f"docker logs ({service})", duration_s=call.duration_s)

