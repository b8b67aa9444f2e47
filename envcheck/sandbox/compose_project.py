"""A Harbor task's compose file: read by Compose, checked, and rewritten into the project one
run brings up.

**Reading** is Compose's own (``config --format json``): the normalized project with every
path absolute, every short form long, ``extends`` and interpolation done. What Harbor adds
to the agent's service (its base compose files) is added here: built from ``environment/``
when it names neither image nor build, kept alive with ``sleep infinity`` when it names no
command.

**Refused** (``compose_invalid``), since the project runs beside envcheck on its engine:
privileged services, host namespaces (network, pid, ipc, uts, userns), devices, security
options other than ``no-new-privileges``, capabilities beyond the engine's defaults, other
runtimes or cgroup parents, external networks, volumes with a driver or driver options (a
bind mount by another name), and bind mounts or file secrets from outside the task's folder.
Published ports are dropped (the services reach each other by name).

**Rewritten** for a run: built services point at envcheck's images, nothing is pulled, every
service is hardened as a Harbor sandbox is (every capability dropped but the engine's
defaults, no new privileges, init, pids, memory and CPU limits: the stricter of the task's
and the service's own), every network is an internal bridge (no route out; its driver options
replaced by envcheck's: no address on the host's end of the bridge, and no IPv6 on the bridge
and its veths, so that a run adds no address to the host, which a browser on the host would
take for a network change) unless the task may reach the internet, and then the operator's
named network is joined as well; every container, network and volume carries envcheck's
labels.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envcheck.core.errors import ComposeFailed, SandboxFailed
from envcheck.core.results import Reason
from envcheck.sandbox.base import (
    ENGINE_DEFAULT_CAPABILITIES,
    BuildOptions,
    Sandbox,
    SandboxSpec,
)
from envcheck.sandbox.compose_cli import run_compose

__all__ = ["AGENT_KEY", "ComposeBuild", "ComposeProject", "ComposedTask", "read_project",
           "run_model"]

DEFAULT_AGENT = "main"  # Harbor's name for the agent's service
AGENT_KEY = "x-agent-service"  # a task naming its agent's service otherwise
KEEPALIVE = ["sh", "-c", "sleep infinity"]  # Harbor's command for the agent's service
OUTSIDE = "envcheck-outside"  # the project's name for the operator's network
INHIBIT_IPV4 = "com.docker.network.bridge.inhibit_ipv4"  # the bridge driver's option names
DRIVER_MTU = "com.docker.network.driver.mtu"
BELOW_IPV6_MTU = 1279  # IPv6 needs 1280 (RFC 8200): below it the kernel gives a link no IPv6
_HOST_MODES = ("network_mode", "pid", "ipc", "uts", "userns_mode", "cgroup")
_REFUSED_KEYS = ("devices", "device_cgroup_rules", "cgroup_parent", "runtime", "gpus",
                 "volumes_from")
_LIMIT_KEYS = ("cpus", "mem_limit", "memswap_limit", "pids_limit", "mem_reservation")


@dataclass(frozen=True, slots=True)
class ComposeBuild:
    """A service envcheck builds itself (offline, cached by content), as a Dockerfile task."""

    service: str
    context: Path
    options: BuildOptions

    def options_hash(self) -> str:
        """What the build takes besides its context's files."""
        o = self.options
        blob = json.dumps([o.dockerfile, list(o.args), o.target])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class ComposeProject:
    model: dict[str, Any]  # Compose's normalized project, the agent's defaults added
    agent: str
    builds: tuple[ComposeBuild, ...]
    notes: tuple[str, ...] = ()

    @property
    def services(self) -> list[str]:
        return sorted(self.model.get("services") or {})


def read_project(folder: Path, compose_file: Path, *, timeout_s: float = 60.0,
                 host: str = "") -> ComposeProject:
    """The task's project, as Compose reads it; ``ComposeFailed`` (``compose_invalid``) if it
    cannot be read or asks for what a sandbox refuses. ``folder`` is the task's folder."""
    env_dir = compose_file.parent
    call = run_compose(["--project-name", "envcheck", "--project-directory", str(env_dir),
                        "-f", str(compose_file), "config", "--format", "json"],
                       timeout_s=timeout_s, host=host)
    if not call.ok:
        raise ComposeFailed(Reason.COMPOSE_INVALID, f"{compose_file.name} cannot be read: "
                            f"{call.last_line()}", log_tail=call.tail(),
                            command="docker-compose config")
    try:
        model = json.loads(call.stdout)
    except ValueError as exc:
        raise ComposeFailed(Reason.COMPOSE_INVALID, f"Compose printed no project: {exc}",
                            log_tail=call.tail()) from None
    services: dict[str, Any] = model.get("services") or {}
    agent = str(model.get(AGENT_KEY) or DEFAULT_AGENT)
    if agent not in services:
        raise ComposeFailed(Reason.COMPOSE_INVALID, f"{compose_file.name} has no service "
                            f"{agent!r} for the agent (Harbor's 'main', or name it with "
                            f"{AGENT_KEY})")
    main = services[agent]
    if not main.get("build") and not main.get("image") and (env_dir / "Dockerfile").is_file():
        main["build"] = {"context": str(env_dir), "dockerfile": "Dockerfile"}
    if not main.get("command") and not main.get("entrypoint"):
        main["command"] = list(KEEPALIVE)
    refused = [problem for name, svc in sorted(services.items())
               for problem in _refusals(name, svc, folder)]
    refused += [f"network {name!r} is external" for name, net in
                sorted((model.get("networks") or {}).items()) if (net or {}).get("external")]
    # a volume's driver options can bind-mount any folder of the host (type none, o bind)
    volumes = sorted((model.get("volumes") or {}).items())
    refused += [f"volume {name!r}: driver_opts" for name, vol in volumes
                if (vol or {}).get("driver_opts")]
    refused += [f"volume {name!r}: driver {vol['driver']}" for name, vol in volumes
                if (vol or {}).get("driver") not in (None, "", "local")]
    refused += _file_sources(model, folder)
    if refused:
        raise ComposeFailed(Reason.COMPOSE_INVALID, f"{compose_file.name} asks for what a "
                            f"sandbox refuses: {'; '.join(refused)}")
    builds = []
    notes = []
    for name, svc in sorted(services.items()):
        if svc.get("ports"):
            notes.append(f"service {name!r}: published ports dropped (services reach each "
                         "other by name)")
        build = svc.get("build")
        if build:
            builds.append(_build(name, build, folder))
        elif not svc.get("image"):
            raise ComposeFailed(Reason.COMPOSE_INVALID, f"service {name!r} names neither an "
                                "image nor a build")
    return ComposeProject(model, agent, tuple(builds), tuple(notes))


def _inside(path: str, folder: Path) -> bool:
    return Path(path).resolve().is_relative_to(folder.resolve())


def _refusals(name: str, svc: dict[str, Any], folder: Path) -> list[str]:
    found = []
    if svc.get("privileged"):
        found.append(f"service {name!r} is privileged")
    for key in _HOST_MODES:
        value = str(svc.get(key) or "")
        if value == "host" or (key == "network_mode" and value not in ("", "none")
                               and not value.startswith("service:")):
            found.append(f"service {name!r}: {key}: {value}")
    found += [f"service {name!r}: {key}" for key in _REFUSED_KEYS if svc.get(key)]
    extra = sorted(set(svc.get("cap_add") or ()) - set(ENGINE_DEFAULT_CAPABILITIES))
    if extra:
        found.append(f"service {name!r}: cap_add {', '.join(extra)} (beyond the engine's "
                     "defaults)")
    options = [o for o in svc.get("security_opt") or () if not o.startswith("no-new-priv")]
    if options:
        found.append(f"service {name!r}: security_opt {', '.join(options)}")
    for volume in svc.get("volumes") or ():
        if volume.get("type") == "bind" and not _inside(str(volume.get("source")), folder):
            found.append(f"service {name!r}: bind mount of {volume.get('source')} (outside "
                         "the task's folder)")
    build = svc.get("build") or {}
    if build.get("dockerfile_inline"):
        found.append(f"service {name!r}: build.dockerfile_inline (write a Dockerfile)")
    return found


def _file_sources(model: dict[str, Any], folder: Path) -> list[str]:
    """Secrets and configs read from files are bind mounts: from the task's folder only."""
    return [f"{kind[:-1]} {name!r}: file {item['file']} (outside the task's folder)"
            for kind in ("secrets", "configs")
            for name, item in sorted((model.get(kind) or {}).items())
            if (item or {}).get("file") and not _inside(str(item["file"]), folder)]


def _build(name: str, build: dict[str, Any], folder: Path) -> ComposeBuild:
    context = Path(str(build.get("context") or "."))
    if not _inside(str(context), folder) or not context.is_dir():
        raise ComposeFailed(Reason.COMPOSE_INVALID, f"service {name!r}: build context "
                            f"{context} is not a folder of the task")
    args = tuple(sorted((str(k), "" if v is None else str(v))
                        for k, v in (build.get("args") or {}).items()))
    return ComposeBuild(name, context, BuildOptions(str(build.get("dockerfile") or "Dockerfile"),
                                                    args, build.get("target")))


def _bytes(value: Any) -> int | None:
    try:
        return int(str(value)) if value not in (None, "", 0, "0") else None
    except ValueError:
        return None


def _stricter(own: int | float | None, task: int | float) -> int | float:
    return task if own is None or own <= 0 else min(own, task)


def _harden(svc: dict[str, Any], spec: SandboxSpec, labels: dict[str, str],
            agent: bool) -> dict[str, Any]:
    limits = spec.limits
    deploy = svc.pop("deploy", None) or {}
    declared = (deploy.get("resources") or {}).get("limits") or {}
    memory = _stricter(_bytes(svc.get("mem_limit")) or _bytes(declared.get("memory")),
                       limits.memory_mb * 1024 * 1024)
    cpus = _stricter(float(svc.get("cpus") or declared.get("cpus") or 0), limits.cpus)
    pids = _stricter(int(svc.get("pids_limit") or declared.get("pids") or 0), limits.pids)
    for key in (*_LIMIT_KEYS, "build", "ports", "security_opt", "cap_drop", "cap_add"):
        svc.pop(key, None)
    svc.update({
        "pull_policy": "never",
        "cap_drop": ["ALL"],
        "cap_add": list(ENGINE_DEFAULT_CAPABILITIES),
        "security_opt": ["no-new-privileges:true"],
        "mem_limit": int(memory), "memswap_limit": int(memory),
        "cpus": cpus, "pids_limit": int(pids),
        "labels": {**(svc.get("labels") or {}), **labels},
        "stop_grace_period": "1s",
    })
    if agent:  # as a single-container sandbox: an init reaps zombies, /tmp is a bounded tmpfs
        svc["init"] = True
        svc["tmpfs"] = [*(t for t in svc.get("tmpfs") or () if not str(t).startswith("/tmp")),
                        f"/tmp:rw,nosuid,nodev,size={limits.tmpfs_mb}m,mode=1777"]
    return svc


def _quiet_bridge(ipv6: bool) -> dict[str, str]:
    """Driver options that keep a project's network from changing the host's addresses.

    A browser on the host (Chromium's NetworkChangeNotifier reads every address the kernel
    announces) aborts every request in flight, loopback included, when an address comes or
    goes, and every run brings a network up and down. So: no address on the host's end of
    the bridge (a gateway is of no use on an internal network, and without it the host has no
    address on the project's network); and an MTU below IPv6's minimum of 1280 on the bridge
    and its veths, so that the kernel gives them no IPv6 at all, hence no link-local address.
    A network that asks for IPv6 keeps the engine's MTU: its interfaces need IPv6 (and the
    engine then adds its IPv6 addresses to the host)."""
    options = {INHIBIT_IPV4: "true"}
    if not ipv6:
        options[DRIVER_MTU] = str(BELOW_IPV6_MTU)
    return options


def run_model(project: ComposeProject, *, name: str, images: dict[str, str],
              spec: SandboxSpec, labels: dict[str, str]) -> dict[str, Any]:
    """The project one run brings up as ``name`` (see the module's docstring): ``images``
    maps each built service to its image, ``spec`` gives the task's limits and the network
    the operator lets it reach (``none``: no route out)."""
    model: dict[str, Any] = json.loads(json.dumps(project.model))  # a deep copy: shared
    model["name"] = name
    outside = spec.network not in ("", "none")
    networks: dict[str, Any] = model.get("networks") or {}
    networks.setdefault("default", {})
    for net_name, net in list(networks.items()):
        kept = {k: v for k, v in (net or {}).items() if k in ("ipam", "enable_ipv6")}
        networks[net_name] = {**kept, "name": f"{name}_{net_name}", "driver": "bridge",
                              "internal": True, "labels": labels,
                              "driver_opts": _quiet_bridge(bool(kept.get("enable_ipv6")))}
    if outside:
        networks[OUTSIDE] = {"name": spec.network, "external": True}
    model["networks"] = networks
    for vol_name, vol in list((model.get("volumes") or {}).items()):
        model["volumes"][vol_name] = {**(vol or {}), "name": f"{name}_{vol_name}",
                                      "labels": {**((vol or {}).get("labels") or {}), **labels}}
    for svc_name, svc in model["services"].items():
        if svc_name in images:
            svc["image"] = images[svc_name]
        _harden(svc, spec, labels, svc_name == project.agent)
        if outside and not str(svc.get("network_mode") or ""):
            svc.setdefault("networks", {"default": None})[OUTSIDE] = None
        for volume in svc.get("volumes") or ():
            if volume.get("type") == "bind":
                volume["read_only"] = True  # the task's own folder, never written by a run
    return model


@dataclass(frozen=True, slots=True)
class ComposedTask:
    """A compose task ready to run: its project, its built services' images, and how long its
    services may take to come up (the task's environment timeout). Every sandbox of the task
    is then its agent's container in a project of its own."""

    project: ComposeProject
    images: dict[str, str]
    up_timeout_s: float

    @property
    def agent_image(self) -> str:
        return self.images.get(self.project.agent) or str(
            self.project.model["services"][self.project.agent]["image"])

    def sandbox(self, runtime: object, spec: SandboxSpec) -> AbstractContextManager[Sandbox]:
        compose = getattr(runtime, "compose", None)
        if compose is None:
            raise SandboxFailed(f"{type(runtime).__name__} cannot run compose tasks")
        started: AbstractContextManager[Sandbox] = compose(
            self.project, spec, images=self.images, up_timeout_s=self.up_timeout_s)
        return started
