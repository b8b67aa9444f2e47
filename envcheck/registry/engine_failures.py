"""What the engine says about a pull, classified: the registry stage's boundary for docker-py's
errors on ``POST /images/create``.

The engine reports a registry's failure in two places: an ``APIError`` raised before the
pull's stream starts (the engine could not resolve the manifest), and an ``{'error': ...}``
event inside the stream (a layer failed). Its HTTP status says little: a wrong password is a
401 and an unknown tag or repository a 404, but a refused connection, missing credentials
and a registry's 429 all come back as status 500 with the registry's text. So the text is
classified, never the status (the status only breaks a tie when the text says nothing).

=====================================================  ==========================  =========
what the engine says                                    reason                      retried
=====================================================  ==========================  =========
``no space left on device``                             ``image_cache_full``        after an
                                                                                    eviction
``toomanyrequests``, ``too many requests``, 429         ``registry_rate_limited``   no
``unauthorized``, ``no basic auth credentials``,        ``registry_auth_failed``    no
``pull access denied``, ``authentication required``, 401/403
``manifest unknown``, ``name unknown``,                 ``image_not_found``         no
``manifest for ... not found``, 404
``connection refused``, ``no such host``,               ``registry_unreachable``    yes
``i/o timeout``, ``EOF``, a 5xx from the registry…
anything else                                           ``registry_unreachable``    no
=====================================================  ==========================  =========

Docker Hub answers a missing repository with ``pull access denied ... repository does not
exist or may require 'docker login'``: it cannot be told from missing credentials, so it is
an auth failure (envcheck's), never the environment's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import docker.errors
import requests

from envcheck.core.errors import (
    EngineUnreachable,
    EnvcheckError,
    ImageNotFound,
    InfraError,
    RegistryFailed,
)
from envcheck.core.results import Reason

__all__ = ["EngineFailure", "classify", "classify_api_error", "classify_event", "engine_calls",
           "engine_gone"]

# Checked in this order: a disk-full layer write may mention the registry's URL, a 429 may
# say "unauthorized" in a link, a refused connection names the manifest's URL.
_DISK_FULL = re.compile(r"no space left on device|disk quota exceeded", re.I)
_RATE_LIMITED = re.compile(r"toomanyrequests|too many requests|\b429\b|rate limit", re.I)
_AUTH = re.compile(r"no basic auth credentials|unauthorized|authentication required|"
                   r"pull access denied|denied: |\bforbidden\b|incorrect username or password|"
                   r"requested access to the resource is denied", re.I)
_NOT_FOUND = re.compile(r"manifest unknown|name unknown|manifest for \S+ not found|"
                        r"not found: manifest|repository name not known|"
                        r"image manifest does not exist", re.I)
_TRANSIENT = re.compile(r"connection refused|no such host|i/o timeout|timeout|timed out|"
                        r"\bEOF\b|connection reset|broken pipe|server misbehaving|"
                        r"tls handshake|context deadline exceeded|network is unreachable|"
                        r"no route to host|temporary failure|service unavailable|bad gateway|"
                        r"gateway time-?out|internal server error|unexpected http status: 5\d\d|"
                        r"received unexpected http status|blob unknown|"
                        r"unexpected end of json|dial tcp", re.I)


@dataclass(frozen=True, slots=True)
class EngineFailure:
    """One failure of a pull as the engine reported it: its reason, whether trying again may
    help (``transient``), whether the disk filled (``disk_full``: evict, then try once more)."""

    reason: Reason
    message: str
    status: int | None = None
    transient: bool = False
    details: dict[str, object] = field(default_factory=dict)

    @property
    def disk_full(self) -> bool:
        return self.reason is Reason.IMAGE_CACHE_FULL

    def error(self, registry: str, reference: str) -> RegistryFailed | ImageNotFound:
        """The exception envcheck raises for it: ``ImageNotFound`` for a missing manifest (the
        caller decides whether one look is enough), ``RegistryFailed`` for the rest."""
        details: dict[str, object] = {"registry": registry, "reference": reference,
                                      "engine_message": self.message, **self.details}
        if self.status is not None:
            details["engine_status"] = self.status
        if self.reason is Reason.IMAGE_NOT_FOUND:
            return ImageNotFound(f"{reference}: the registry {registry} has no such image "
                                 f"({self.message})", registry=registry, details=details)
        return RegistryFailed(f"{reference}: {_WHAT[self.reason]} {registry}: {self.message}",
                              reason=self.reason, registry=registry, details=details)


_WHAT = {
    Reason.REGISTRY_UNREACHABLE: "the pull failed at the registry",
    Reason.REGISTRY_AUTH_FAILED: "credentials refused or missing for the registry",
    Reason.REGISTRY_RATE_LIMITED: "rate-limited by the registry",
    Reason.IMAGE_CACHE_FULL: "the engine's disk filled while pulling from the registry",
}


def classify(message: str, status: int | None = None) -> EngineFailure:
    """The failure the engine's ``message`` (and, when the text says nothing, ``status``)
    stands for."""
    text = " ".join(str(message).split())  # engine messages may wrap; one line for details
    if _DISK_FULL.search(text):
        return EngineFailure(Reason.IMAGE_CACHE_FULL, text, status)
    if _RATE_LIMITED.search(text) or status == 429:
        return EngineFailure(Reason.REGISTRY_RATE_LIMITED, text, status)
    if _AUTH.search(text) or status in (401, 403):
        return EngineFailure(Reason.REGISTRY_AUTH_FAILED, text, status)
    if _NOT_FOUND.search(text) or status == 404:
        return EngineFailure(Reason.IMAGE_NOT_FOUND, text, status)
    transient = bool(_TRANSIENT.search(text)) or status in (502, 503, 504)
    return EngineFailure(Reason.REGISTRY_UNREACHABLE, text, status, transient=transient)


def classify_api_error(exc: docker.errors.APIError) -> EngineFailure:
    """An ``APIError`` the engine raised before the pull's stream began."""
    explanation = exc.explanation
    if isinstance(explanation, bytes):
        explanation = explanation.decode("utf-8", "replace")
    return classify(str(explanation or exc), exc.status_code)


def classify_event(event: dict[str, object]) -> EngineFailure | None:
    """The failure an event of the pull's stream reports, or None for a progress event."""
    error = event.get("error")
    detail = event.get("errorDetail")
    if not error and not detail:
        return None
    message = str(error or "")
    if isinstance(detail, dict) and detail.get("message"):
        message = str(detail["message"])
    code = detail.get("code") if isinstance(detail, dict) else None
    return classify(message, code if isinstance(code, int) else None)


@contextmanager
def engine_calls(what: str) -> Iterator[None]:
    """The boundary for the registry stage's other engine calls (inspect, tag, remove, df):
    an engine that does not answer is ``EngineUnreachable``, one that refuses is
    ``InfraError``; envcheck's own errors pass as they are."""
    try:
        yield
    except EnvcheckError:
        raise
    except docker.errors.APIError as exc:
        raise InfraError(f"{what}: the Docker engine refused: {exc.explanation or exc}") from exc
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        raise EngineUnreachable(f"{what}: Docker engine unreachable: {exc}") from exc


def engine_gone(exc: BaseException) -> EngineUnreachable | None:
    """The engine itself (not the registry) did not answer: its socket refused or dropped
    the request. None for anything else."""
    if isinstance(exc, docker.errors.APIError):
        return None
    if isinstance(exc, (docker.errors.DockerException, requests.ConnectionError)):
        return EngineUnreachable(f"Docker engine unreachable: {exc}")
    return None
