"""What the benches share: the checkout's root, medians and percentiles (envcheck's own, so a
bench reads latencies as the probes do), a process' memory and counters from /proc, a free
port, the host and the commit measured. Run a bench as a script (``python bench/x.py``): this
folder is then on ``sys.path`` and ``from common import ...`` finds this module."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import socket
import statistics
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from envcheck.catalogue.models import Environment
from envcheck.core.numbers import percentile
from envcheck.sandbox.labels import LABEL_MANAGED, LABEL_RUN

__all__ = ["ROOT", "docker_run_hardened", "free_port", "git_head", "host", "median",
           "percentile", "proc_stat_fields", "proc_status_kib", "scratch_dir"]

ROOT = Path(__file__).resolve().parent.parent


def median(values: Iterable[float]) -> float:
    """The median; NaN (not an exception) when there are no values."""
    data = list(values)
    return statistics.median(data) if data else float("nan")


def proc_status_kib(field_name: str, pid: int | str = "self") -> int:
    """A memory line of ``/proc/<pid>/status`` (VmRSS, VmHWM, ...) in KiB; 0 if absent."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key == field_name:
                return int(rest.split()[0])
    return 0


def proc_stat_fields(pid: int | str = "self") -> list[str]:
    """``/proc/<pid>/stat`` after the command name: field 3 (state) is index 0, utime (14)
    index 11, stime 12, threads 17, start time 19."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return f.read().rsplit(")", 1)[1].split()


@contextlib.contextmanager
def scratch_dir(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A work directory for one run, removed after it unless ``keep`` (then said where)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield root
    finally:
        if keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def host(**extra: object) -> dict[str, object]:
    """What a bench's JSON says of the machine it ran on."""
    return {"python": platform.python_version(), "cpus": os.cpu_count(),
            "machine": platform.machine(), **extra}


def git_head() -> str | None:
    """The short commit of the checkout measured, or None outside git."""
    proc = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)
    return proc.stdout.strip() or None


def docker_run_hardened(env: Environment, run_id: str) -> list[str]:
    """``docker run --rm -i`` with envcheck's sandbox flags for ``env`` (bash as entrypoint),
    up to and with the image: the floor a bench holds envcheck's runs against."""
    lim = env.limits
    return ["docker", "run", "--rm", "-i", "--pull", "never", "--init", "--network", "none",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges:true",
            "--pids-limit", str(lim.pids), "--memory", f"{lim.memory_mb}m",
            "--memory-swap", f"{lim.memory_mb}m", "--cpus", str(lim.cpus),
            "--tmpfs", f"/tmp:rw,nosuid,nodev,size={lim.tmpfs_mb}m,mode=1777",
            "--label", f"{LABEL_MANAGED}=true", "--label", f"{LABEL_RUN}={run_id}",
            "--user", env.user, "--workdir", env.workdir, "--entrypoint", "bash", env.image]
