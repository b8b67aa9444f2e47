"""A running sandbox on the docker SDK: commands run to their deadline with capped output,
a terminal session, files copied in.

A command that outlives its timeout (or floods past the hard output limit) takes its
container down with it: killing the container is the one kill that reaches every descendant
of the command, whatever the image holds. The next command starts the container again.
"""

from __future__ import annotations

import io
import logging
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import docker
import requests
from tenacity import Retrying, retry_if_result, stop_after_attempt, wait_fixed

from envcheck.core.errors import EngineUnreachable, SandboxFailed
from envcheck.sandbox.base import CappedOutput, Change, Deadline, ExecResult, Section
from envcheck.sandbox.engine import engine_call
from envcheck.sandbox.streams import (
    RECV,
    DockerTty,
    Sections,
    close_stream,
    drain_frames,
    hijacked_stream,
)

__all__ = ["DockerSandbox"]

# The engine's codes for a path's change against the image (docker diff's C, A, D).
_CHANGE_KINDS = {0: "changed", 1: "added", 2: "deleted"}

# the runtime's one logger, whichever of its modules speaks
log = logging.getLogger("envcheck.sandbox.docker")


class DockerSandbox:
    def __init__(self, client: docker.DockerClient, container: Any, start_duration_s: float,
                 flood_limit: int, preflight: Callable[[], None] = lambda: None) -> None:
        self._api = client.api
        self._preflight = preflight
        self._container = container
        self._start_duration_s = start_duration_s
        self._flood_limit = flood_limit
        self._killed = False

    @property
    def container_id(self) -> str:
        return str(self._container.id)

    @property
    def start_duration_s(self) -> float:
        return self._start_duration_s

    def _ensure_running(self) -> None:
        if self._killed:
            with engine_call(self._preflight):
                self._api.start(self.container_id)
            self._killed = False

    def _kill(self) -> None:
        self._killed = True
        try:
            with engine_call(self._preflight):
                self._api.kill(self.container_id)
                self._api.wait(self.container_id, timeout=30)
        except (EngineUnreachable, SandboxFailed, requests.RequestException) as exc:
            log.warning("killing container %s: %s", self.container_id[:12], exc)

    def _kill_draining(self, raw: Any) -> None:
        """Kill while still reading: the engine will not stop a container whose exec output
        it cannot deliver, so an unread stream would stall the kill."""

        def drain() -> None:
            raw.settimeout(1.0)
            with suppress(OSError):
                while raw.recv(RECV):
                    pass

        drainer = threading.Thread(target=drain, name="envcheck-drain", daemon=True)
        drainer.start()
        self._kill()
        drainer.join(timeout=5.0)

    def _open(self, argv: Sequence[str], user: str | None, env: dict[str, str] | None,
              tty: bool) -> tuple[str, Any]:
        self._ensure_running()
        with engine_call(self._preflight):
            exec_id = self._api.exec_create(self.container_id, list(argv), stdin=tty, tty=tty,
                                            user=user or "", environment=env)["Id"]
            sock = self._api.exec_start(exec_id, socket=True, tty=tty)
        return exec_id, sock

    def exec(self, argv: Sequence[str], *, timeout_s: float, user: str | None = None,
             env: dict[str, str] | None = None, output_limit: int = 64 * 1024,
             sections: Sequence[Section] = ()) -> ExecResult:
        began = time.monotonic()
        deadline = Deadline(timeout_s)  # restarted as each section begins
        exec_id, sock = self._open(argv, user, env, tty=False)
        raw, buffered = hijacked_stream(sock)
        output = CappedOutput(output_limit)
        parts = Sections(output, sections)
        frames = bytearray(buffered)
        first: float | None = time.monotonic() - began if frames else None
        drain_frames(frames, parts)
        opened = 0
        timed_out = flooded = False
        try:
            # a read loop to the command's deadline, not a retry: each recv takes new output
            while True:
                if parts.opened > opened:
                    opened = parts.opened
                    deadline = Deadline(sections[opened - 1].timeout_s)
                remaining = deadline.remaining()
                if remaining <= 0:
                    timed_out = True
                    break
                raw.settimeout(min(remaining, 5.0))
                try:
                    chunk = raw.recv(RECV)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                if first is None:
                    first = time.monotonic() - began
                frames += chunk
                drain_frames(frames, parts)
                if parts.total > self._flood_limit:
                    flooded = True
                    break
            if timed_out or flooded:
                self._kill_draining(raw)
        except OSError as exc:
            raise EngineUnreachable(f"lost the exec stream: {exc}") from exc
        finally:
            close_stream(sock, raw)
        reached = parts.finish(began)
        return ExecResult(
            command=" ".join(argv),
            exit_code=None if timed_out else self._exit_code(exec_id),
            output=output,
            duration_s=time.monotonic() - began,
            first_output_s=first,
            timed_out=timed_out,
            flooded=flooded,
            sections=reached,
        )

    def _exit_code(self, exec_id: str) -> int | None:
        """The exec's exit code; None if the engine still has it running after ~1 s.
        The stream ends a moment before the engine records the exit code: poll for it."""

        def inspect() -> dict[str, Any]:
            with engine_call(self._preflight):
                return dict(self._api.exec_inspect(exec_id))

        polling = Retrying(retry=retry_if_result(lambda info: bool(info.get("Running"))),
                           stop=stop_after_attempt(100), wait=wait_fixed(0.01),
                           retry_error_callback=lambda state: None)
        info = polling(inspect)
        code = info.get("ExitCode") if info is not None else None
        return int(code) if code is not None else None

    @contextmanager
    def tty(self, argv: Sequence[str], *, user: str | None = None,
            env: dict[str, str] | None = None) -> Iterator[DockerTty]:
        _, sock = self._open(argv, user, env, tty=True)
        raw, buffered = hijacked_stream(sock)
        try:
            yield DockerTty(raw, initial=buffered)
        finally:
            close_stream(sock, raw)

    def put_file(self, path: str, content: bytes, mode: int = 0o644) -> None:
        """Copy a file in. The engine writes below mounts, so a tmpfs path would vanish."""
        directory, _, name = path.rpartition("/")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), mode, int(time.time())
            tar.addfile(info, io.BytesIO(content))
        self.put_archive(directory or "/", buf.getvalue())

    def put_archive(self, directory: str, archive: bytes) -> None:
        """Unpack a tar archive into ``directory`` (which must exist), merging with what is
        there, as ``docker cp SRC/. CONTAINER:DIR`` does."""
        if directory == "/tmp" or directory.startswith("/tmp/"):
            raise ValueError(f"{directory}: /tmp is a tmpfs the engine cannot copy into")
        self._ensure_running()
        with engine_call(self._preflight):
            self._api.put_archive(self.container_id, directory, archive)

    def changes(self) -> list[Change]:
        """``docker diff``: the writable layer against the image, bounded by the client's
        timeout like every engine call."""
        with engine_call(self._preflight):
            rows = self._api.diff(self.container_id) or []
        return [Change(str(row["Path"]), _CHANGE_KINDS.get(int(row["Kind"]), "changed"))
                for row in rows]
