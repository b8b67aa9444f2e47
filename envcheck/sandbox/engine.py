"""The engine-error boundary: docker and requests errors are translated into envcheck's tree
here and nowhere else."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import docker.errors
import requests

from envcheck.core.errors import EngineUnreachable, ImageMissing, SandboxFailed, SandboxStartFailed

__all__ = ["engine_call", "engine_errors", "preflight", "transient"]


@contextmanager
def engine_errors(image: str | None = None) -> Iterator[None]:
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
def engine_call(preflight: Callable[[], None], image: str | None = None) -> Iterator[None]:
    """An engine call made while the engine may be gone (mid-probe, mid-cycle): its socket
    tried first, since the SDK leaks the socket of a refused connect; then the boundary."""
    preflight()
    with engine_errors(image):
        yield


def preflight(host: str, timeout_s: float) -> None:
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


def transient(exc: BaseException) -> bool:
    return isinstance(exc, (docker.errors.DockerException, requests.RequestException,
                            EngineUnreachable)) and not isinstance(exc, docker.errors.NotFound)
