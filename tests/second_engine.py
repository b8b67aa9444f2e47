"""A second Docker engine for one test: its own ``dockerd`` with its own socket, pidfile,
exec root and data root, no bridge, no iptables, no forwarding (it runs no networked
container), its containers in a containerd namespace of their own.

With ``disk_mb`` the data root is a loop-mounted ext4 of that size, so the engine's disk
really fills. That needs root and loop devices: where the machine has neither, the test is
skipped with the reason (``require_loop_devices``), never silently.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import docker
import pytest

from tests.polling import stop, wait_for

__all__ = ["SecondEngine", "require_loop_devices"]


def _missing(why: str) -> NoReturn:
    """In CI a missing part fails (nothing skips there silently); on a developer's machine
    without it the test is skipped, saying why."""
    if os.environ.get("CI"):
        pytest.fail(f"the disk-full case cannot run here: {why}")
    pytest.skip(why)


def require_loop_devices() -> None:
    """Fail in CI, else skip (saying why), where a loop-mounted filesystem cannot be made."""
    if os.geteuid() != 0:
        _missing("a loop-mounted data root for a second engine needs root")
    if not Path("/dev/loop-control").exists() or shutil.which("losetup") is None:
        _missing("this machine has no loop devices (/dev/loop-control) for a small "
                 "filesystem as a second engine's data root")
    for tool in ("mkfs.ext4", "mount", "dockerd"):
        if shutil.which(tool) is None:
            _missing(f"{tool} is not installed")


class SecondEngine:
    def __init__(self, disk_mb: int | None = None) -> None:
        self.name = uuid.uuid4().hex[:12]
        self.dir = Path(tempfile.mkdtemp(prefix=f"envcheck-engine2-{self.name}-"))
        self.socket = self.dir / "docker.sock"
        self.host = f"unix://{self.socket}"
        self._mounted: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.data_root = self.dir / "data"
        try:
            if disk_mb is not None:
                self._mount(disk_mb)
            self._start()
        except BaseException:
            self.close()
            raise
        self.client = docker.DockerClient(base_url=self.host, version="1.41", timeout=120)

    def _mount(self, disk_mb: int) -> None:
        image = self.dir / "disk.img"
        with open(image, "wb") as f:
            f.truncate(disk_mb << 20)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, timeout=60)
        mountpoint = self.dir / "mnt"
        mountpoint.mkdir()
        done = subprocess.run(["mount", "-o", "loop", str(image), str(mountpoint)],
                              capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            _missing(f"mount -o loop failed on this machine: {done.stderr.strip()}")
        self._mounted = mountpoint
        self.data_root = mountpoint / "docker"

    def _start(self) -> None:
        log = open(self.dir / "dockerd.log", "ab")  # noqa: SIM115 - the process writes it
        self._proc = subprocess.Popen(
            ["dockerd", "--data-root", str(self.data_root), "--exec-root",
             str(self.dir / "exec"), "--host", self.host, "--pidfile",
             str(self.dir / "docker.pid"), "--bridge=none", "--iptables=false",
             "--ip-forward=false", "--ip-masq=false",
             "--containerd-namespace", f"envcheck-{self.name}",
             "--containerd-plugins-namespace", f"envcheck-{self.name}-plugins"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()

        def answers() -> bool:
            # the socket tried first: the SDK leaks the socket of a refused connect
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
                raw.settimeout(5)
                try:
                    raw.connect(str(self.socket))
                except OSError:
                    return False
            with contextlib.suppress(docker.errors.DockerException):
                probe = docker.DockerClient(base_url=self.host, version="1.41", timeout=5)
                try:
                    return bool(probe.ping())
                finally:
                    probe.close()
            return False

        wait_for(answers, timeout_s=60, what="the second engine", proc=self._proc,
                 details=lambda: (self.dir / "dockerd.log").read_text()[-2000:])

    def free_bytes(self) -> int:
        """Free bytes of the data root as the engine (root) sees them, reserve included."""
        st = os.statvfs(self.data_root)
        return st.f_bfree * st.f_frsize

    def close(self) -> None:
        if getattr(self, "client", None) is not None:
            self.client.close()
        if self._proc is not None and self._proc.poll() is None:
            stop(self._proc, timeout_s=30, sig=signal.SIGTERM)
        if self._mounted is not None:
            subprocess.run(["umount", str(self._mounted)], check=False, timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def second_engine(disk_mb: int | None = None) -> Iterator[SecondEngine]:
    engine = SecondEngine(disk_mb)
    try:
        yield engine
    finally:
        engine.close()
