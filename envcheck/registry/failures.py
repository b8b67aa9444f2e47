"""What a registry's answer (or its silence) means, in the fixed vocabulary.

=====================================================  =========================================
what happened                                          reason
=====================================================  =========================================
refused, reset, no such host, TLS, a timeout, the      ``registry_unreachable`` (envcheck's)
look's deadline, a 5xx, an answer that is no registry's
401 / 403 after credentials were sent, or a challenge  ``registry_auth_failed`` (envcheck's,
with none to send                                      naming the registry)
429, or ``TOOMANYREQUESTS`` in the error body          ``registry_rate_limited`` (envcheck's),
                                                       ``Retry-After`` and ``ratelimit-remaining``
                                                       read
404 ``MANIFEST_UNKNOWN`` / ``NAME_UNKNOWN``            ``image_not_found`` on this one look
                                                       (the environment's once confirmed:
                                                       ``state.TagWatchState``)
=====================================================  =========================================

A network exception is first sorted by ``envcheck.net.http.classify``, the data-source probes'
one boundary for requests/urllib3 exceptions; its finer class goes into ``details``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from envcheck.core.errors import RegistryFailed
from envcheck.core.results import Reason
from envcheck.core.retry_after import parse_retry_after
from envcheck.net.http import classify
from envcheck.registry.outcomes import NOT_FOUND, RegistryFailure

__all__ = ["deadline_passed", "error_codes", "from_error", "from_exception", "from_response",
           "rate_remaining"]

_MISSING_CODES = {"MANIFEST_UNKNOWN", "NAME_UNKNOWN"}
_AUTH_CODES = {"UNAUTHORIZED", "DENIED"}
_NETWORK_WORDS = {
    Reason.CONNECTION_REFUSED: "refused the connection",
    Reason.CONNECTION_RESET: "reset the connection",
    Reason.UNREACHABLE: "cannot be reached (no such host, or no route to it)",
    Reason.TIMEOUT_CONNECT: "did not accept a connection in time",
    Reason.TIMEOUT_READ: "did not answer in time",
    Reason.TLS: "failed the TLS handshake (its certificate, or the CA files for it)",
}


def rate_remaining(headers: Mapping[str, str]) -> int | None:
    """``ratelimit-remaining: 76;w=21600`` (Docker Hub's) as 76; None when absent."""
    value = headers.get("ratelimit-remaining") or headers.get("RateLimit-Remaining")
    if not value:
        return None
    m = re.match(r"\s*(\d+)", value)
    return int(m.group(1)) if m else None


def error_codes(body: bytes) -> list[tuple[str, str]]:
    """The distribution error body's ``errors[].code`` and ``message``."""
    try:
        doc = json.loads(body)
    except ValueError:
        return []
    errors = doc.get("errors") if isinstance(doc, dict) else None
    if not isinstance(errors, list):
        return []
    return [(str(e.get("code", "")).upper(), str(e.get("message", ""))[:200])
            for e in errors if isinstance(e, dict)]


def from_exception(exc: BaseException, registry: str, at: datetime, *, what: str = "",
                   requests: int = 0) -> RegistryFailure | None:
    """A network failure as ``registry_unreachable``; None when ``exc`` is none (a bug)."""
    network = classify(exc)
    if network is None:
        return None
    words = _NETWORK_WORDS.get(network, "cannot be reached")
    return RegistryFailure(Reason.REGISTRY_UNREACHABLE, registry,
                           f"registry {registry} {words}" + (f" ({what})" if what else ""),
                           at, requests=requests, extra={"network": str(network)})


def from_error(error: RegistryFailed, at: datetime) -> RegistryFailure:
    """envcheck's registry error (credentials that cannot be read, say) as a look's failure,
    for a caller that resolves credentials before it looks."""
    return RegistryFailure(error.reason, error.registry, str(error), at,
                           extra=dict(error.details))


def deadline_passed(registry: str, at: datetime, deadline_s: float, *,
                    requests: int = 0) -> RegistryFailure:
    return RegistryFailure(Reason.REGISTRY_UNREACHABLE, registry,
                           f"registry {registry} did not answer within the look's deadline "
                           f"({deadline_s:g} s)", at, requests=requests,
                           extra={"network": str(Reason.TIMEOUT_READ)})


def from_response(status: int, headers: Mapping[str, str], body: bytes, registry: str,
                  at: datetime, *, credentials: str | None, requests: int = 0,
                  what: str = "") -> RegistryFailure:
    """A registry's (or its token service's) answer other than success. ``credentials``
    names where the credentials sent came from, None when none were sent."""
    codes = error_codes(body)
    code = codes[0][0] if codes else None
    remaining = rate_remaining(headers)
    common: dict[str, Any] = {"status": status, "code": code, "rate_remaining": remaining,
                              "requests": requests}
    answered = f"{status}{' ' + code if code else ''}{' from ' + what if what else ''}"
    if status == 429 or any(c == "TOOMANYREQUESTS" for c, _ in codes) \
            or b"toomanyrequests" in body[:4096].lower():
        wait = parse_retry_after(headers.get("Retry-After"), at)
        return RegistryFailure(Reason.REGISTRY_RATE_LIMITED, registry,
                               f"registry {registry} rate-limited envcheck ({answered}"
                               + (f", retry after {wait:g} s" if wait is not None else "")
                               + (f", {remaining} left" if remaining is not None else "")
                               + ")", at, retry_after_s=wait, **common)
    if status in (401, 403) or code in _AUTH_CODES:
        if credentials is None:
            message = (f"registry {registry} asks for credentials and envcheck has none for "
                       f"it ({answered})")
        else:
            message = (f"registry {registry} refused the credentials from {credentials} "
                       f"({answered})")
        return RegistryFailure(Reason.REGISTRY_AUTH_FAILED, registry, message, at, **common)
    if status == 404 and (code in _MISSING_CODES or (
            not codes and "docker-distribution-api-version" in {k.lower() for k in headers})):
        detail = codes[0][1] if codes else "manifest unknown"
        return RegistryFailure(NOT_FOUND, registry,
                               f"registry {registry} has no such image: {detail} ({answered})",
                               at, **common)
    text = (codes[0][1] if codes else body[:200].decode(errors="replace").strip())
    return RegistryFailure(Reason.REGISTRY_UNREACHABLE, registry,
                           f"registry {registry} answered {answered}"
                           + (f": {text}" if text else ""), at, **common)
