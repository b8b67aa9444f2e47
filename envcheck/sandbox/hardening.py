"""How a sandbox's container is created: hardened (no capabilities but those asked for, no
new privileges, limits on pids, memory, CPU and /tmp), on its own network (none by
default), kept alive for its cycle, and labelled."""

from __future__ import annotations

from typing import Any

from envcheck.sandbox.base import SandboxSpec
from envcheck.sandbox.labels import (
    LABEL_ENV,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN,
    LABEL_RUNTIME,
    LABEL_SANDBOX,
    LABEL_TAG,
)

__all__ = ["create_args", "sandbox_labels"]

# Keeps the container alive for its cycle; docker-init reaps zombies and forwards signals.
KEEPALIVE = ["sleep", "infinity"]


def create_args(spec: SandboxSpec, key: str = "", *, owner: str, runtime: str, tag: str
                ) -> dict[str, Any]:
    """The SDK's ``containers.create`` arguments for ``spec``: ``owner`` is the process,
    ``runtime`` the engine client and ``key`` the sandbox the container is for."""
    limits = spec.limits
    return {
        "image": spec.image,
        "entrypoint": KEEPALIVE[:1],
        "command": KEEPALIVE[1:],
        "init": True,
        "detach": True,
        "network_mode": spec.network,
        "cap_drop": ["ALL"],
        **({"cap_add": list(spec.capabilities)} if spec.capabilities else {}),
        "security_opt": ["no-new-privileges:true"],
        "pids_limit": limits.pids,
        "mem_limit": f"{limits.memory_mb}m",
        "memswap_limit": f"{limits.memory_mb}m",
        "nano_cpus": int(limits.cpus * 1e9),
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={limits.tmpfs_mb}m,mode=1777"},
        # The engine refuses a hostname for a container joining another's network.
        **({} if spec.network.startswith("container:") else {"hostname": "sandbox"}),
        "labels": sandbox_labels(spec, key, owner=owner, runtime=runtime, tag=tag),
    }


def sandbox_labels(spec: SandboxSpec, key: str = "", *, owner: str, runtime: str, tag: str
                   ) -> dict[str, str]:
    """What every container (and a compose task's networks and volumes) of a sandbox carries:
    whose it is, so the reaper finds it after a crash or an engine outage."""
    return {
        LABEL_MANAGED: "true",
        LABEL_RUN: spec.run_id,
        LABEL_ENV: spec.env_id,
        LABEL_OWNER: owner,
        LABEL_RUNTIME: runtime,
        **({LABEL_SANDBOX: key} if key else {}),
        **({LABEL_TAG: tag} if tag else {}),
    }
