"""The HTTP API over the feed: quarantine list, allowlists, environment detail, manual changes.

::

    GET    /v1/quarantine[?suite=S]        quarantined environments, with why and evidence
    GET    /v1/suites/{suite}/allowlist    what a scheduler may use now
    GET    /v1/environments/{env_id}       state, per-kind health, history, latest results
    GET    /v1/taint[?since&until&suite]   when environments' rewards could not be trusted
    GET    /v1/environments/{env_id}/taint   the same for one environment
    POST   /v1/quarantine/{env_id}         quarantine by hand (token; body {reason, actor?})
    DELETE /v1/quarantine/{env_id}         release by hand    (token; body {reason, actor?})
    POST   /v1/rollouts                    the training run's rollouts, a batch (token)
    GET    /openapi.json, /docs            the spec

It reads the store through the same functions as ``envcheck gate`` and ``envcheck quarantine``,
so all of them give the same answers. The routes, one module per resource, are in
:mod:`.routes`; every answer other than 2xx is a ``Problem`` (:mod:`.problems`).

**Caching.** Every GET carries an ETag (the feed generation, plus a hash of the resource's
path and body) and answers ``If-None-Match`` with 304. The list routes keep their rendered
body per (path, generation): each request costs one ``max(transition.id)`` query, which sees
every transition at once, from any process (the daemon, ``envcheck quarantine add``), so a
quarantine never waits on a cache. What changes without a transition (a suite's
``allow_degraded`` or membership after a catalogue sync, the wording of a reason) shows within
``cache_ttl_s``; the one request that finds its entry expired rebuilds it while the others
are served the previous body. The environment route is rebuilt on every request: new probe
results change it without a transition.

**Auth** (:mod:`.auth`). Reads are open. Mutations need ``Authorization: Bearer <token>``,
compared in constant time; the token comes from ``ENVCHECK_API_TOKEN`` or
``ENVCHECK_API_TOKEN_FILE`` (:func:`envcheck.net.apitoken.load_api_token`) and is never
logged. Without one the API is read-only (403). The token is checked before the body is read:
without it, any body gets 401 (or 403), never a 422 that would tell an anonymous caller how
the body is judged.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from envcheck.api.auth import authorizer
from envcheck.api.cache import ResponseCache
from envcheck.api.problems import install_handlers
from envcheck.api.routes import environments, incidents, quarantine, rollouts, suites, taint
from envcheck.store import Store

__all__ = ["DEFAULT_CACHE_TTL_S", "DEFAULT_PORT", "create_app", "serve", "serve_in_thread"]

DEFAULT_PORT = 8787
DEFAULT_CACHE_TTL_S = 5.0


# --- the application ------------------------------------------------------------------------


def _version() -> str:
    try:
        return version("envcheck")
    except PackageNotFoundError:
        return "0"


def create_app(store: Store, token: str | None = None, *, export_dir: Path | None = None,
               cache_ttl_s: float = DEFAULT_CACHE_TTL_S,
               clock: Callable[[], float] = time.monotonic) -> FastAPI:
    """The API over ``store`` (owned by the caller, shared across threads).

    ``token`` enables mutations (see :func:`envcheck.net.apitoken.load_api_token`);
    ``export_dir`` is where they rewrite the export files (default:
    :func:`envcheck.feed.exports.default_export_dir`).
    """
    app = FastAPI(title="envcheck", version=_version(),
                  description="Environment health and quarantine feed for RL schedulers.")
    cache = ResponseCache(cache_ttl_s, clock)
    install_handlers(app)
    # in this order, the spec's too
    app.include_router(suites.router(store, cache))
    app.include_router(quarantine.listing(store, cache))
    app.include_router(incidents.router(store))
    app.include_router(environments.router(store, clock))
    app.include_router(taint.router(store, cache))
    app.include_router(quarantine.changes(store, authorizer(token), export_dir))
    app.include_router(rollouts.router(store, authorizer(token)))
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
