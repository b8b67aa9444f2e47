"""The HTTP API over the feed: quarantine list, allowlists, environment detail, manual changes.

::

    GET    /v1/quarantine[?suite=S]        quarantined environments, with why and evidence
    GET    /v1/suites/{suite}/allowlist    what a scheduler may use now
    GET    /v1/environments/{env_id}       state, per-kind health, history, latest results
    POST   /v1/quarantine/{env_id}         quarantine by hand (token; body {reason, actor?})
    DELETE /v1/quarantine/{env_id}         release by hand    (token; body {reason, actor?})
    GET    /openapi.json, /docs            the spec

It reads the store through the same functions as ``envcheck gate`` and ``envcheck quarantine``,
so all of them give the same answers.

**Caching.** Every GET carries an ETag (the feed generation, plus a hash of the resource's
path and body) and answers ``If-None-Match`` with 304. The list routes keep their rendered
body per (path, generation): each request costs one ``max(transition.id)`` query, which sees
every transition at once, from any process (the daemon, ``envcheck quarantine add``), so a
quarantine never waits on a cache. What changes without a transition (a suite's
``allow_degraded`` or membership after a catalogue sync, the wording of a reason) shows within
``cache_ttl_s``; the one request that finds its entry expired rebuilds it while the others
are served the previous body. The environment route is rebuilt on every request: new probe
results change it without a transition.

**Auth.** Reads are open. Mutations need ``Authorization: Bearer <token>``, compared in
constant time; the token comes from ``ENVCHECK_API_TOKEN`` or ``ENVCHECK_API_TOKEN_FILE``
(:func:`load_api_token`) and is never logged. Without one the API is read-only (403).
The token is checked before the body is read: without it, any body gets 401 (or 403), never a
422 that would tell an anonymous caller how the body is judged.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from envcheck.api.cache import ResponseCache, conditional, render
from envcheck.api.models import (
    AllowlistOut,
    EnvironmentOut,
    FieldError,
    IncidentOut,
    IncidentsOut,
    KindHealthOut,
    Problem,
    QuarantineChange,
    QuarantineChangeOut,
    QuarantineEntryOut,
    QuarantineOut,
    ResultOut,
    TransitionOut,
)
from envcheck.core.clock import since as since_when
from envcheck.core.errors import EnvcheckError, StoreError
from envcheck.feed.allowlist import UnknownSuite, allowlist
from envcheck.feed.assess import set_quarantine_by_id
from envcheck.feed.exports import write_exports
from envcheck.health.summary import env_summary
from envcheck.net.apitoken import (
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    ApiConfigError,
    load_api_token,
)
from envcheck.store import Store

__all__ = [
    "DEFAULT_CACHE_TTL_S",
    "DEFAULT_PORT",
    "TOKEN_ENV",
    "TOKEN_FILE_ENV",
    "ApiConfigError",
    "create_app",
    "load_api_token",
    "serve",
    "serve_in_thread",
]

log = logging.getLogger("envcheck.api.app")

DEFAULT_PORT = 8787
DEFAULT_CACHE_TTL_S = 5.0
MANUAL_ACTOR = "api"
_REALM = 'Bearer realm="envcheck"'


class ApiProblem(Exception):
    """An answer other than 2xx, with the :class:`Problem` body."""

    def __init__(self, status: int, error: str, reason: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(reason)
        self.status, self.error, self.reason, self.headers = status, error, reason, headers


def _problem(status: int, error: str, reason: str, headers: Mapping[str, str] | None = None,
             fields: list[FieldError] | None = None) -> JSONResponse:
    body = Problem(error=error, reason=reason, fields=fields or [])
    return JSONResponse(body.model_dump(mode="json"), status_code=status,
                        headers=dict(headers or {}))


# --- the application ------------------------------------------------------------------------

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    304: {"description": "Not modified: If-None-Match holds the current ETag"},
    404: {"model": Problem}, 422: {"model": Problem}}
_MUTATION: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "Missing or wrong bearer token"},
    403: {"model": Problem, "description": "Read-only: the server has no token configured"},
    404: {"model": Problem}, 422: {"model": Problem}}


# Module level: FastAPI resolves the (string) annotations of dependencies in module globals.
_BEARER = HTTPBearer(auto_error=False, description=f"the server's {TOKEN_ENV}")


Authorize = Callable[[HTTPAuthorizationCredentials | None], None]


def _authenticated_first(authorize: Authorize) -> type[APIRoute]:
    """A route class whose requests are authorized before anything else of theirs is read.

    FastAPI reads and parses the body before it solves a route's dependencies, so a
    ``Depends(authorize)`` would answer a malformed body with 422 to anyone. Routes of this
    class run ``authorize`` on the request's headers before their handler reads anything.
    """

    class AuthenticatedFirst(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Any]:
            handler = super().get_route_handler()

            async def authorized(request: Request) -> Response:
                authorize(await _BEARER(request))
                response: Response = await handler(request)
                return response

            return authorized

    return AuthenticatedFirst


def _version() -> str:
    try:
        return version("envcheck")
    except PackageNotFoundError:
        return "0"


def create_app(store: Store, token: str | None = None, *, export_dir: Path | None = None,
               cache_ttl_s: float = DEFAULT_CACHE_TTL_S,
               clock: Callable[[], float] = time.monotonic) -> FastAPI:
    """The API over ``store`` (owned by the caller, shared across threads).

    ``token`` enables mutations (see :func:`load_api_token`); ``export_dir`` is where they
    rewrite the export files (default: :func:`envcheck.feed.exports.default_export_dir`).
    """
    app = FastAPI(title="envcheck", version=_version(),
                  description="Environment health and quarantine feed for RL schedulers.")
    cache = ResponseCache(cache_ttl_s, clock)
    token_digest = hashlib.sha256(token.encode()).digest() if token else None
    mutations = threading.Lock()

    def authorize(credentials: Annotated[HTTPAuthorizationCredentials | None,
                                         Depends(_BEARER)]) -> None:
        if token_digest is None:
            raise ApiProblem(403, "read_only", "this envcheck API is read-only: the server has "
                             f"no token (set {TOKEN_ENV} or {TOKEN_FILE_ENV} where it runs)")
        if credentials is None:
            raise ApiProblem(401, "missing_token", "send Authorization: Bearer <token>",
                             {"WWW-Authenticate": _REALM})
        presented = hashlib.sha256(credentials.credentials.encode()).digest()
        # Hashing first makes the comparison independent of the token's length too.
        if not hmac.compare_digest(presented, token_digest):
            raise ApiProblem(401, "invalid_token", "the bearer token is not valid",
                             {"WWW-Authenticate": f'{_REALM}, error="invalid_token"'})

    @app.exception_handler(ApiProblem)
    def _on_problem(_: Request, exc: ApiProblem) -> JSONResponse:
        return _problem(exc.status, exc.error, exc.reason, exc.headers)

    @app.exception_handler(RequestValidationError)
    def _on_invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        fields = [FieldError(field=".".join(str(p) for p in e["loc"][1:]),
                             location=str(e["loc"][0]) if e["loc"] else "",
                             message=e["msg"], type=e["type"]) for e in exc.errors()]
        what = "; ".join(f"{f.field or f.location}: {f.message}" for f in fields)
        return _problem(422, "invalid_request", f"invalid request: {what}", fields=fields)

    @app.exception_handler(StarletteHTTPException)
    def _on_http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        error = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _problem(exc.status_code, error, str(exc.detail), exc.headers)

    @app.exception_handler(Exception)
    def _on_bug(_: Request, exc: Exception) -> JSONResponse:
        log.error("internal error: %s", exc, exc_info=exc)
        return _problem(500, "internal_error", "envcheck failed to answer; see its log")

    @app.exception_handler(StoreError)
    def _on_store(_: Request, exc: StoreError) -> JSONResponse:
        log.error("store unavailable: %s", exc)
        return _problem(503, "store_unavailable", "the result store is unavailable; retry later",
                        {"Retry-After": "5"})

    def known_suites() -> str:
        return ", ".join(s.id for s in store.suites()) or "none yet: run envcheck check"

    def unknown_suite(suite: str) -> ApiProblem:
        return ApiProblem(404, "unknown_suite",
                          f"unknown suite {suite!r} (known: {known_suites()})")

    @app.get("/v1/suites/{suite}/allowlist", response_model=AllowlistOut, responses=_NOT_FOUND,
             summary="What a scheduler may use from a suite now")
    def get_allowlist(suite: str, request: Request) -> Response:
        generation = store.generation()

        def build() -> bytes:
            try:
                listing = allowlist(store, suite, generation)
            except UnknownSuite:
                raise unknown_suite(suite) from None
            return AllowlistOut.of(listing).model_dump_json().encode()

        return conditional(request, cache.get(request.url.path, generation, build))

    @app.get("/v1/quarantine", response_model=QuarantineOut, responses=_NOT_FOUND,
             summary="Quarantined environments, with source, actor, reason and evidence")
    def get_quarantine(request: Request, suite: str | None = None) -> Response:
        generation = store.generation()

        def build() -> bytes:
            if suite is not None and store.suite(suite) is None:
                raise unknown_suite(suite)
            entries = [QuarantineEntryOut.model_validate(q, from_attributes=True)
                       for q in store.quarantined(suite)]
            doc = QuarantineOut(generation=generation, count=len(entries), quarantined=entries)
            return doc.model_dump_json().encode()

        key = f"{request.url.path}?suite={suite or ''}"
        return conditional(request, cache.get(key, generation, build))

    @app.get("/v1/incidents", response_model=IncidentsOut,
             responses={400: {"model": Problem, "description": "a bad `since`"}},
             summary="Infrastructure incidents: what failed, which cycle, what was held back")
    def get_incidents(
            since: Annotated[str | None, Query(description="an age (24h, 7d) or an ISO 8601 "
                                               "date or time")] = None,
            limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> IncidentsOut:
        start = None
        if since is not None:
            try:
                start = since_when(since, datetime.now(UTC))
            except ValueError as exc:
                raise ApiProblem(400, "bad_since", str(exc)) from None
        rows = [IncidentOut.of(r) for r in store.incidents(limit, since=start)]
        return IncidentsOut(count=len(rows), incidents=rows)

    @app.get("/v1/environments/{env_id}", response_model=EnvironmentOut, responses=_NOT_FOUND,
             summary="An environment's state, per-kind health, history and latest results")
    def get_environment(env_id: str, request: Request,
                        history: Annotated[int, Query(ge=0, le=1000,
                                                      description="transitions")] = 20
                        ) -> Response:
        generation = store.generation()
        record = store.environment_record(env_id)
        if record is None:
            raise ApiProblem(404, "unknown_environment",
                             f"unknown environment {env_id!r} (never synced from a catalogue)")
        suite = record.suite
        summary = env_summary(store.env_state(env_id), store.suite(suite), record.retired_at)
        quarantine = summary.quarantine
        doc = EnvironmentOut(
            env_id=env_id, suite=suite, generation=generation, state=str(summary.state),
            reason=summary.reason, allowed=summary.allowed, retired_at=summary.retired_at,
            image_digest=summary.image_digest,
            updated_at=summary.updated_at,
            quarantine=QuarantineEntryOut.model_validate(quarantine, from_attributes=True)
            if quarantine is not None else None,
            kinds={str(k.kind): KindHealthOut.of(k) for k in summary.kinds},
            history=[TransitionOut.of(t) for t in store.transitions(env_id, limit=history)]
            if history else [],
            latest_results=[ResultOut.of(r) for r in store.latest_results([env_id])])
        key = f"{request.url.path}?history={history}"
        return conditional(request, render(key, generation,
                                            doc.model_dump_json().encode(), clock()))

    def change(env_id: str, body: QuarantineChange, *, add: bool) -> QuarantineChangeOut:
        actor = body.actor or MANUAL_ACTOR
        with mutations:  # one change and its exports at a time
            try:
                row = set_quarantine_by_id(store, env_id, add=add, actor=actor,
                                           reason=body.reason)
            except LookupError:
                raise ApiProblem(404, "unknown_environment",
                                 f"unknown environment {env_id!r} (never checked)") from None
            written = False
            if row is not None:
                log.info("%s %s by %s (generation %s)", env_id,
                         "quarantined" if add else "released", actor, row.id)
                try:
                    write_exports(store, export_dir)
                    written = True
                except (OSError, EnvcheckError) as exc:  # the change itself is committed
                    log.error("writing the exports after %s failed: %s", env_id, exc)
            current = store.env_state(env_id)
            return QuarantineChangeOut(
                env_id=env_id, changed=row is not None,
                quarantined=current is not None and current.quarantined,
                generation=store.generation(),
                transition=TransitionOut.of(row) if row is not None else None,
                exports_written=written)

    # Every mutation goes through this router: authorized before its body is read. The
    # bearer dependency only puts the security scheme in the spec; the route class checks it.
    mutating = APIRouter(route_class=_authenticated_first(authorize), responses=_MUTATION,
                         dependencies=[Depends(_BEARER)])

    @mutating.post("/v1/quarantine/{env_id}", response_model=QuarantineChangeOut,
                   summary="Quarantine an environment by hand (only a person releases it)")
    def post_quarantine(env_id: str, body: QuarantineChange) -> QuarantineChangeOut:
        return change(env_id, body, add=True)

    @mutating.delete("/v1/quarantine/{env_id}", response_model=QuarantineChangeOut,
                     summary="Release an environment from quarantine by hand")
    def delete_quarantine(env_id: str, body: QuarantineChange) -> QuarantineChangeOut:
        return change(env_id, body, add=False)

    app.include_router(mutating)
    return app


# --- serving --------------------------------------------------------------------------------


def _config(app: ASGIApp, access_log: bool, **kwargs: Any) -> uvicorn.Config:
    # log_config=None: uvicorn must not replace the host program's logging configuration.
    return uvicorn.Config(app, access_log=access_log, log_config=None,
                          server_header=False, timeout_graceful_shutdown=5, **kwargs)


class _Server(uvicorn.Server):
    """uvicorn's server, but a SIGINT or SIGTERM makes :meth:`run` *return*.

    uvicorn re-raises the signal after its graceful shutdown; with SIGTERM's default action
    that kills the process before the caller's ``finally`` (stop the scheduler, let probes
    finish, remove their containers) can run.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def serve(app: ASGIApp, host: str = "127.0.0.1", port: int = DEFAULT_PORT, *,
          access_log: bool = False) -> None:
    """Serve until SIGINT or SIGTERM, then return after requests in flight are answered
    (blocking; signals are caught only when called from the main thread)."""
    _Server(_config(app, access_log, host=host, port=port)).run()


@contextlib.contextmanager
def serve_in_thread(app: ASGIApp, host: str = "127.0.0.1", port: int = 0, *,
                    access_log: bool = False, startup_timeout_s: float = 10.0
                    ) -> Iterator[str]:
    """Serve from a background thread (``port=0``: any free port); yields the base URL and
    stops the server, waiting for requests in flight, on exit."""
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say they are TCP;
    # without it a keep-alive answer waits ~40 ms on Nagle and the peer's delayed ACK.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                         socket.SOCK_STREAM, socket.IPPROTO_TCP)
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        bound = sock.getsockname()[1]
        server = uvicorn.Server(_config(app, access_log))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                                  name=f"envcheck-api-{bound}", daemon=True)
        thread.start()
        # poll until it listens, or its thread ended (a failed start), or the time is up
        polling = Retrying(retry=retry_if_result(lambda settled: not settled),
                           stop=stop_after_delay(startup_timeout_s), wait=wait_fixed(0.01),
                           retry_error_callback=lambda state: False)
        polling(lambda: bool(server.started) or not thread.is_alive())
        if not server.started:
            server.should_exit = True
            thread.join(startup_timeout_s)
            raise RuntimeError(f"the API server did not start on {host}:{bound}")
        try:
            yield f"http://{host}:{bound}" if ":" not in host else f"http://[{host}]:{bound}"
        finally:
            server.should_exit = True
            thread.join(startup_timeout_s + 5)
