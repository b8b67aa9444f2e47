"""HTTP for data-source probes: one attempt is one request with explicit (connect, read)
timeouts, a deadline on the whole answer and a capped body.

requests/urllib3 exceptions become reason codes in :func:`classify`, and nowhere else; an
exception it does not know (a bug, a malformed request) propagates and the probe base turns
it into ``checker_crashed``.
"""

from __future__ import annotations

import errno
import http.client
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import requests
import urllib3.exceptions as u3

from envcheck.catalogue.datasources import DataSource
from envcheck.core.clock import Clock
from envcheck.core.results import Reason
from envcheck.core.retry_after import parse_retry_after
from envcheck.net.secrets import auth_header

__all__ = [
    "Attempt",
    "HttpRequest",
    "SessionFactory",
    "build_request",
    "classify",
    "new_session",
    "parse_retry_after",
    "send",
]

SessionFactory = Callable[[], requests.Session]
_CHUNK = 64 * 1024
_UNREACHABLE_ERRNOS = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL,
                       errno.ENETDOWN, errno.EHOSTDOWN}


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    url: str  # query included, secret too when auth goes in the query: never show it raw
    headers: dict[str, str]
    body: bytes | None
    connect_timeout_s: float
    read_timeout_s: float
    max_body: int
    verify: bool | str = True  # False, True (system CAs) or a CA bundle path


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one request produced: a response, or a failure class with what raised it."""

    latency_s: float
    status: int | None = None
    body: bytes = b""
    truncated: bool = False  # the body went past max_body and was not read further
    retry_after_s: float | None = None
    failure: Reason | None = None
    detail: str = ""


def build_request(source: DataSource, secret: str | None) -> HttpRequest:
    parts = urlsplit(source.url)
    query = parse_qsl(parts.query, keep_blank_values=True) + list(source.query.items())
    headers = dict(source.headers)
    if source.auth is not None and secret is not None:
        if source.auth.query is not None:
            query.append((source.auth.query, secret))
        else:
            headers[source.auth.header] = auth_header(source.auth, secret)
    body = None
    if source.body is not None:
        body = json.dumps(source.body).encode()
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
    url = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))
    verify: bool | str = source.ca_bundle or source.verify_tls
    return HttpRequest(source.method, url, headers, body, source.connect_timeout_s,
                       source.read_timeout_s, source.max_body_kb * 1024, verify)


def new_session() -> requests.Session:
    """A session for one source for one probe. ``trust_env`` is off: no proxy or .netrc
    from the environment; requests go where the catalogue says, with what it says."""
    session = requests.Session()
    session.trust_env = False
    return session


def send(session: requests.Session, request: HttpRequest, clock: Clock) -> Attempt:
    """One request; never raises for anything the network or the server does."""
    started = clock.monotonic()
    # The read timeout bounds each socket read; this bounds the whole answer, so a server
    # trickling one byte at a time cannot hold the probe forever.
    deadline = started + request.connect_timeout_s + request.read_timeout_s
    try:
        response = session.request(
            request.method, request.url, headers=request.headers, data=request.body,
            timeout=(request.connect_timeout_s, request.read_timeout_s), stream=True,
            allow_redirects=False, verify=request.verify)
        try:
            body, truncated = _read_capped(response, request.max_body, deadline, clock)
        finally:
            response.close()
    except (requests.RequestException, u3.HTTPError, OSError) as exc:
        reason = classify(exc)
        if reason is None:
            raise
        return Attempt(latency_s=clock.monotonic() - started, failure=reason,
                       detail=_describe(exc))
    retry_after = None
    if response.status_code in (429, 503):
        retry_after = parse_retry_after(response.headers.get("Retry-After"), clock.now())
    return Attempt(latency_s=clock.monotonic() - started, status=response.status_code,
                   body=body, truncated=truncated, retry_after_s=retry_after,
                   detail=f"{response.status_code} {response.reason or ''}".strip())


def _read_capped(response: requests.Response, limit: int, deadline: float,
                 clock: Clock) -> tuple[bytes, bool]:
    body = bytearray()
    while True:  # reads one body to a deadline, not a retry (those are in the caller)
        if clock.monotonic() > deadline:
            raise TimeoutError("the whole answer took longer than connect + read timeout")
        # read1: at most one socket read per call, so the deadline is checked in between.
        chunk = response.raw.read1(_CHUNK)
        if not chunk:
            return bytes(body), False
        body += chunk
        if len(body) > limit:
            return bytes(body[:limit]), True


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and everything it wraps: requests wraps urllib3, which wraps the socket."""
    found: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if any(e is f for f in found):
            continue
        found.append(e)
        if isinstance(e, u3.MaxRetryError) and e.reason is not None:
            todo.append(e.reason)
        todo.extend(a for a in e.args if isinstance(a, BaseException))
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)
    return found


def _any(chain: list[BaseException], *types: type[BaseException]) -> bool:
    return any(isinstance(e, types) for e in chain)


def classify(exc: BaseException) -> Reason | None:
    """The failure class of an exception raised by requests/urllib3 (None: not a network
    or server failure). Most specific first: a refused connect is also a ConnectionError."""
    chain = _chain(exc)
    if _any(chain, ssl.SSLError, ssl.CertificateError, u3.SSLError, requests.exceptions.SSLError):
        return Reason.TLS
    if _any(chain, ConnectionRefusedError):
        return Reason.CONNECTION_REFUSED
    if _any(chain, ConnectionResetError, ConnectionAbortedError, BrokenPipeError,
            http.client.IncompleteRead, u3.IncompleteRead):
        return Reason.CONNECTION_RESET
    if _any(chain, u3.NameResolutionError) or any(
        isinstance(e, OSError) and e.errno in _UNREACHABLE_ERRNOS for e in chain
    ):
        return Reason.UNREACHABLE
    if _any(chain, requests.exceptions.ConnectTimeout) or any(
        isinstance(e, u3.ConnectTimeoutError) and not isinstance(e, u3.NewConnectionError)
        for e in chain
    ):
        return Reason.TIMEOUT_CONNECT
    if _any(chain, requests.exceptions.ReadTimeout, u3.ReadTimeoutError, TimeoutError):
        return Reason.TIMEOUT_READ
    if _any(chain, u3.ProtocolError, requests.exceptions.ChunkedEncodingError):
        return Reason.CONNECTION_RESET  # the connection broke mid-answer
    if _any(chain, u3.DecodeError, requests.exceptions.ContentDecodingError):
        return Reason.INVALID_JSON  # a body that does not even decompress
    if _any(chain, u3.NewConnectionError, requests.exceptions.ConnectionError):
        return Reason.UNREACHABLE
    return None


def _describe(exc: BaseException) -> str:
    """The innermost message (the socket's own words), short; redacted by the caller."""
    inner = _chain(exc)[-1]
    text = str(inner) or type(inner).__name__
    return f"{type(inner).__name__}: {text}"[:300]
