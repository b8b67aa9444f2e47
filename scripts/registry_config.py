"""The config of a local ``docker-registry`` (Debian's package of the CNCF distribution registry
2.8): filesystem storage in a folder of its own, deletes enabled, one listen address on
127.0.0.1. Shared by the demo's registry (``scripts/demo_registry.py``, which
``scripts/run.sh`` starts) and the tests' (``tests/registryd.py``, which adds its auth and TLS
sections). The Debian package's own service (``/etc/docker/registry/config.yml``, every
interface, :5000) is never used: ``scripts/setup.sh`` keeps it stopped.
"""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["BINARY", "find_binary", "registry_config"]

BINARY = "docker-registry"


def find_binary() -> str | None:
    """The registry binary's path, where Debian installs it (``sbin`` is not on every PATH)."""
    return shutil.which(BINARY, path="/usr/bin:/usr/local/bin:/usr/sbin")


def registry_config(host: str, storage: Path, *, secret: str, extra: str = "") -> str:
    """The YAML of a registry listening on ``host`` (``127.0.0.1:PORT``) storing under
    ``storage``; ``extra`` is appended as is (a ``tls:`` block indented under ``http:`` first,
    then ``auth:``). ``secret`` signs upload state, which matters only with several replicas."""
    if not host.startswith("127."):
        raise ValueError(f"a local registry listens on loopback only, not {host!r}")
    return ("version: 0.1\n"
            "log:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {storage}\n"
            "  delete:\n    enabled: true\n"
            f"http:\n  addr: {host}\n  secret: {secret}\n"
            + extra)
