"""Sandbox runtime on the docker SDK: hardened containers, deadlines on every call, no leaks.

docker and requests errors are translated into envcheck's tree here and nowhere else.

A command that outlives its timeout (or floods past the hard output limit) takes its
container down with it: killing the container is the one kill that reaches every descendant
of the command, whatever the image holds. The next command starts the container again.

A container the engine could not remove (it stopped answering mid-cycle), or may have created
without our hearing of it, is a leftover of this runtime: every container carries the
runtime's label and a per-sandbox key, so once the engine answers again (a ping, the next
sandbox, :meth:`DockerRuntime.tidy`) the runtime removes its own containers no probe uses,
and :meth:`DockerRuntime.close` removes every container it started.
"""

from __future__ import annotations

import io
import logging
import os
import socket
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import docker
import docker.errors
import requests
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    retry_if_result,
    stop_after_attempt,
    wait_exponential,
    wait_fixed,
)

from envcheck.core.errors import (
    EngineUnreachable,
    EnvcheckError,
    ImageMissing,
    SandboxFailed,
    SandboxStartFailed,
)
from envcheck.sandbox.base import CappedOutput, Deadline, ExecResult, SandboxSpec

__all__ = ["LABEL_MANAGED", "DockerRuntime", "DockerSandbox"]

log = logging.getLogger(__name__)

LABEL_MANAGED = "org.envcheck.managed"
LABEL_RUN = "org.envcheck.run"
LABEL_ENV = "org.envcheck.env"
LABEL_OWNER = "org.envcheck.owner"
# An operator's tag on every container (ENVCHECK_CONTAINER_TAG), e.g. a deployment name.
LABEL_TAG = "org.envcheck.tag"
# One runtime (engine client) of a process, and one sandbox of it: the sandbox key is chosen
# before the create call, so even a container whose create response was lost is known.
LABEL_RUNTIME = "org.envcheck.runtime"
LABEL_SANDBOX = "org.envcheck.sandbox"
# Keeps the container alive for its cycle; docker-init reaps zombies and forwards signals.
KEEPALIVE = ["sleep", "infinity"]
API_VERSION = os.environ.get("ENVCHECK_DOCKER_API_VERSION", "1.41")
FLOOD_LIMIT = 256 * 1024 * 1024
_RECV = 64 * 1024


# A sandbox whose owner runs in another PID namespace of this host (envcheck in a container
# of its own) cannot be judged alive or dead from here; once older than any probe could run,
# it is a leftover all the same.
FOREIGN_LEFTOVER_AGE_S = 24 * 3600


def _where() -> str:
    """This host and PID namespace: pids mean something only within one namespace (a daemon in
    a container with a private one sees none of the host's processes)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid").removeprefix("pid:[").rstrip("]")
    except OSError:
        return socket.gethostname()
    return f"{socket.gethostname()}@{namespace}"


def _process_token(pid: int) -> str | None:
    """host@pid-namespace:pid:start-time: names one process, immune to pid reuse."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
    return f"{_where()}:{pid}:{start}"


def leftover(owner: str, age_s: float) -> bool:
    """Is a sandbox labelled with ``owner``, created ``age_s`` ago, a leftover to remove? Its
    owner ran here (this namespace, or a label naming the host alone, as older envchecks
    wrote) and is gone; or it runs in another PID namespace of this host and the sandbox has
    outlived any probe. Another host's sandboxes are that host's to judge."""
    where, _, process = owner.partition(":")
    pid = process.split(":", 1)[0]
    if where in (_where(), socket.gethostname()):
        alive = pid.isdigit() and (_process_token(int(pid)) or "").endswith(f":{process}")
        return not alive
    if where.split("@", 1)[0] == socket.gethostname():
        return age_s > FOREIGN_LEFTOVER_AGE_S
    return False


@contextmanager
def _engine_errors(image: str | None = None) -> Iterator[None]:
    """The boundary: docker/requests exceptions in, envcheck exceptions out."""
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise ImageMissing(f"image {image!r} is not on this host") from exc
    except docker.errors.APIError as exc:
        if exc.status_code is not None and exc.status_code >= 500 and "OCI runtime" in str(exc):
            raise SandboxStartFailed(exc.explanation or str(exc)) from exc
        raise SandboxFailed(f"Docker engine refused: {exc.explanation or exc}") from exc
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        raise EngineUnreachable(f"Docker engine unreachable: {exc}") from exc


@contextmanager
def _engine(preflight: Callable[[], None], image: str | None = None) -> Iterator[None]:
    """An engine call made while the engine may be gone (mid-probe, mid-cycle): its socket
    tried first, since the SDK leaks the socket of a refused connect; then the boundary."""
    preflight()
    with _engine_errors(image):
        yield


def _preflight(host: str, timeout_s: float) -> None:
    """Try a local engine socket ourselves: the SDK leaks the socket of a failed connect."""
    if not host.startswith("unix://"):
        return
    path = host.removeprefix("unix://")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout_s)
    try:
        probe.connect(path)
    except OSError as exc:
        raise EngineUnreachable(f"Docker engine unreachable at {host}: {exc}") from exc
    finally:
        probe.close()


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, (docker.errors.DockerException, requests.RequestException,
                            EngineUnreachable)) and not isinstance(exc, docker.errors.NotFound)


def hijacked_stream(sock: Any) -> tuple[socket.socket, bytes]:
    """The real socket under the SDK's exec stream, and the bytes its HTTP client already
    read past the response headers.

    Private attributes, on purpose and only here: ``exec_start(socket=True)`` hands back the
    read-only ``SocketIO`` under the HTTP response (``._sock`` is the socket we can send on,
    set a timeout on and close), and a fast command's output can arrive with the headers,
    where it sits in the response's buffer (``._response.raw._fp.fp``) above that socket and
    would be lost (docker-py issues #425 and #3332: the SDK offers no public way to do either).
    ``tests/test_sandbox.py`` checks this chain on a real exec, so an SDK that changes it
    fails there, not in a probe.
    """
    raw = getattr(sock, "_sock", sock)
    try:
        reader = sock._response.raw._fp.fp
    except AttributeError:
        return raw, b""
    timeout = raw.gettimeout()
    raw.settimeout(0.0)
    try:
        return raw, bytes(reader.read1(_RECV) or b"")
    except OSError:  # nothing buffered, and the socket has nothing ready either
        return raw, b""
    finally:
        raw.settimeout(timeout)


def _close(sock: Any, raw: socket.socket) -> None:
    """Close the hijacked exec stream; the SDK's wrapper alone leaves the socket open."""
    with suppress(OSError):
        raw.close()
    with suppress(OSError):
        sock.close()


class DockerRuntime:
    def __init__(self, client: docker.DockerClient, *, flood_limit: int = FLOOD_LIMIT,
                 host: str = "") -> None:
        self._client = client
        self._host = host  # where the engine listens, to try before the SDK does
        self._flood_limit = flood_limit
        self._owner = _process_token(os.getpid()) or f"{_where()}:{os.getpid()}"
        self._tag = os.environ.get("ENVCHECK_CONTAINER_TAG", "")
        self._id = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._live: set[str] = set()  # sandbox keys of the containers probes use now
        self._pending = False  # a container of ours may be left on the engine
        self._tidying = threading.Lock()
        self._closed = False

    @classmethod
    def from_env(cls, timeout_s: float = 30.0) -> DockerRuntime:
        """Connect as the docker CLI would (DOCKER_HOST, contexts); fail fast if down."""
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        _preflight(host, timeout_s)
        with _engine_errors():
            # A pinned API version: the SDK's auto-detection leaks a socket when the
            # engine is down. 1.41 (Docker 20.10) is served by every current engine.
            client = docker.from_env(timeout=int(timeout_s), version=API_VERSION)
        try:
            with _engine_errors():
                client.ping()
        except EngineUnreachable:
            client.close()
            raise
        return cls(client, host=host)

    def close(self) -> None:
        """The runtime's end: remove every container it started (bounded by the client's
        timeout), then close the client. Nothing may use the runtime afterwards, so this
        includes a container a probe still held past a shutdown's grace period."""
        if self._closed:
            return
        self._closed = True
        try:
            self._sweep(keep_live=False)
        except EnvcheckError as exc:
            log.error("could not remove this runtime's containers; the next start reaps "
                      "them: %s", exc)
        finally:
            self._client.close()

    @property
    def client(self) -> docker.DockerClient:
        """The engine client, for work beside sandboxes (image builds)."""
        return self._client

    @property
    def host(self) -> str:
        """Where the engine listens (``unix://...``), to try before the SDK does."""
        return self._host

    def ping(self) -> None:
        with _engine(self._preflight):
            self._client.ping()
        self.tidy()

    def _preflight(self) -> None:
        """Raise ``EngineUnreachable`` if the engine's socket refuses us, before the SDK
        tries (and leaks its socket): for the calls made while the engine may be down."""
        if self._host:
            _preflight(self._host, float(self._client.api.timeout))

    def tidy(self) -> int:
        """If a container of ours may be left behind (the engine stopped answering while
        removing or creating it), remove our containers no probe uses now; how many.

        Costs nothing when nothing is pending. An engine still down leaves the work pending
        for the next call: a ping, the next sandbox, or a periodic check of the daemon.
        """
        with self._lock:
            if not self._pending:
                return 0
        if not self._tidying.acquire(blocking=False):
            return 0  # another thread is at it
        try:
            with self._lock:
                self._pending = False
            try:
                return self._sweep(keep_live=True)
            except EnvcheckError as exc:
                with self._lock:
                    self._pending = True
                log.debug("leftover containers stay until the engine answers: %s", exc)
                return 0
        finally:
            self._tidying.release()

    def _sweep(self, *, keep_live: bool) -> int:
        """Remove this runtime's containers (but those probes use now, if ``keep_live``)."""
        with _engine(self._preflight):
            found = self._client.api.containers(
                all=True, filters={"label": f"{LABEL_RUNTIME}={self._id}"})
        # Read the live set after listing: a key leaves it only once its sandbox has tried
        # to remove its container, so a listed container whose key is gone is a leftover.
        with self._lock:
            live = set(self._live)
        leftovers = [info["Id"] for info in found
                     if not (keep_live and info.get("Labels", {}).get(LABEL_SANDBOX) in live)]
        removed = sum(self._remove(cid) for cid in leftovers)
        if removed:
            log.info("reaped %d leftover container(s) of this runtime", removed,
                     extra={"reaped": removed})
        if removed < len(leftovers):
            raise EngineUnreachable(f"{len(leftovers) - removed} container(s) not removed")
        return removed

    def image_digest(self, image: str) -> str:
        with _engine(self._preflight, image):
            return str(self._client.images.get(image).id)

    @contextmanager
    def sandbox(self, spec: SandboxSpec) -> Iterator[DockerSandbox]:
        key = uuid.uuid4().hex
        with self._lock:
            self._live.add(key)
        container = None
        try:
            with _engine(self._preflight, spec.image):
                container = self._client.containers.create(**self._create_args(spec, key))
            self.tidy()  # the engine answers: the leftovers of an outage can go now
            started = time.monotonic()
            with _engine(self._preflight, spec.image):
                container.start()
                container.reload()
            duration = time.monotonic() - started
            if container.status != "running":
                logs = container.logs(tail=20).decode("utf-8", "replace")
                raise SandboxStartFailed(f"container exited at once: {logs.strip()}", duration)
            yield DockerSandbox(self._client, container, duration, self._flood_limit,
                                self._preflight)
        except SandboxStartFailed as exc:
            if not exc.duration_s and container is not None:
                exc.duration_s = 0.0
            raise
        finally:
            removed = container is not None and self._remove(container.id)
            with self._lock:
                self._live.discard(key)
                # a failed create may still have made a container we never heard of
                self._pending |= not removed

    def _create_args(self, spec: SandboxSpec, key: str = "") -> dict[str, Any]:
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
            "labels": {
                LABEL_MANAGED: "true",
                LABEL_RUN: spec.run_id,
                LABEL_ENV: spec.env_id,
                LABEL_OWNER: self._owner,
                LABEL_RUNTIME: self._id,
                **({LABEL_SANDBOX: key} if key else {}),
                **({LABEL_TAG: self._tag} if self._tag else {}),
            },
        }

    def _remove(self, container_id: str) -> bool:
        """Remove a container (gone already counts); False if the engine would not."""

        def log_retry(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            log.warning("removing container %s failed (try %d): %s", container_id[:12],
                        state.attempt_number, exc)

        try:
            for attempt in Retrying(retry=retry_if_exception(_transient),
                                    stop=stop_after_attempt(3),
                                    wait=wait_exponential(multiplier=0.5, max=2.0),
                                    before_sleep=log_retry, reraise=True):
                with attempt, suppress(docker.errors.NotFound):
                    self._preflight()
                    self._client.api.remove_container(container_id, force=True, v=True)
        except (docker.errors.DockerException, requests.RequestException,
                EngineUnreachable) as exc:
            with self._lock:
                self._pending = True
            log.error("container %s left behind; removed once the engine answers again: %s",
                      container_id[:12], exc)
            return False
        return True

    def reap(self) -> int:
        """Remove envcheck containers whose owning process is gone (crashed or killed)."""
        reaped = 0
        with _engine_errors():
            found = self._client.api.containers(all=True, filters={"label": LABEL_MANAGED})
        now = time.time()
        for info in found:
            owner = info.get("Labels", {}).get(LABEL_OWNER, "")
            if not leftover(owner, now - float(info.get("Created") or now)):
                continue  # in-flight work, or another host's or namespace's
            self._remove(info["Id"])
            reaped += 1
        if reaped:
            log.info("reaped %d leftover envcheck container(s)", reaped)
        return reaped

    def containers(self, tag: str | None = None) -> list[str]:
        """Ids of envcheck-managed containers on the engine, optionally of one tag."""
        label = f"{LABEL_TAG}={tag}" if tag else LABEL_MANAGED
        with _engine_errors():
            found = self._client.api.containers(all=True, filters={"label": label})
        return [str(info["Id"]) for info in found]


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
            with _engine(self._preflight):
                self._api.start(self.container_id)
            self._killed = False

    def _kill(self) -> None:
        self._killed = True
        try:
            with _engine(self._preflight):
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
                while raw.recv(_RECV):
                    pass

        drainer = threading.Thread(target=drain, name="envcheck-drain", daemon=True)
        drainer.start()
        self._kill()
        drainer.join(timeout=5.0)

    def _open(self, argv: Sequence[str], user: str | None, env: dict[str, str] | None,
              tty: bool) -> tuple[str, Any]:
        self._ensure_running()
        with _engine(self._preflight):
            exec_id = self._api.exec_create(self.container_id, list(argv), stdin=tty, tty=tty,
                                            user=user or "", environment=env)["Id"]
            sock = self._api.exec_start(exec_id, socket=True, tty=tty)
        return exec_id, sock

    def exec(self, argv: Sequence[str], *, timeout_s: float, user: str | None = None,
             env: dict[str, str] | None = None, output_limit: int = 64 * 1024) -> ExecResult:
        deadline = Deadline(timeout_s)
        exec_id, sock = self._open(argv, user, env, tty=False)
        raw, buffered = hijacked_stream(sock)
        output = CappedOutput(output_limit)
        frames = bytearray(buffered)
        first: float | None = deadline.elapsed() if frames else None
        _drain_frames(frames, output)
        timed_out = flooded = False
        try:
            # a read loop to the command's deadline, not a retry: each recv takes new output
            while True:
                remaining = deadline.remaining()
                if remaining <= 0:
                    timed_out = True
                    break
                raw.settimeout(min(remaining, 5.0))
                try:
                    chunk = raw.recv(_RECV)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                if first is None:
                    first = deadline.elapsed()
                frames += chunk
                _drain_frames(frames, output)
                if output.total > self._flood_limit:
                    flooded = True
                    break
            if timed_out or flooded:
                self._kill_draining(raw)
        except OSError as exc:
            raise EngineUnreachable(f"lost the exec stream: {exc}") from exc
        finally:
            _close(sock, raw)
        return ExecResult(
            command=" ".join(argv),
            exit_code=None if timed_out else self._exit_code(exec_id),
            output=output,
            duration_s=deadline.elapsed(),
            first_output_s=first,
            timed_out=timed_out,
            flooded=flooded,
        )

    def _exit_code(self, exec_id: str) -> int | None:
        """The exec's exit code; None if the engine still has it running after ~1 s.
        The stream ends a moment before the engine records the exit code: poll for it."""

        def inspect() -> dict[str, Any]:
            with _engine(self._preflight):
                return dict(self._api.exec_inspect(exec_id))

        polling = Retrying(retry=retry_if_result(lambda info: bool(info.get("Running"))),
                           stop=stop_after_attempt(50), wait=wait_fixed(0.02),
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
            _close(sock, raw)

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
        with _engine(self._preflight):
            self._api.put_archive(self.container_id, directory, archive)


def _drain_frames(frames: bytearray, output: CappedOutput) -> None:
    """Docker multiplexes stdout/stderr as frames: 1 byte stream, 3 pad, 4 size, payload."""
    while len(frames) >= 8:
        size = int.from_bytes(frames[4:8], "big")
        if len(frames) < 8 + size:
            return
        output.feed(bytes(frames[8 : 8 + size]))
        del frames[: 8 + size]


class DockerTty:
    def __init__(self, raw: Any, limit: int = 64 * 1024, initial: bytes = b"") -> None:
        self._raw = raw
        self._seen = bytearray(initial)
        self._transcript = CappedOutput(limit)
        self._transcript.feed(initial)

    @property
    def transcript(self) -> CappedOutput:
        return self._transcript

    def send(self, data: bytes) -> None:
        self._raw.settimeout(5.0)
        self._raw.sendall(data)

    def read_until(self, marker: bytes, timeout_s: float) -> bool:
        deadline = Deadline(timeout_s)
        while marker not in self._seen:  # reads to a deadline, not a retry
            remaining = deadline.remaining()
            if remaining <= 0:
                return False
            self._raw.settimeout(min(remaining, 1.0))
            try:
                chunk = self._raw.recv(_RECV)
            except TimeoutError:
                continue
            if not chunk:
                return marker in self._seen
            self._transcript.feed(chunk)
            # keep a bounded window to search in
            self._seen = (self._seen + chunk)[-(256 * 1024) :]
        return True

    def seen(self) -> bytes:
        return bytes(self._seen)
