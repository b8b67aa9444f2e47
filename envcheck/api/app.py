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
:mod:`.routes`; every answer other than 2xx is a ``Problem`` (:mod:`.problems`). The daemon's
own ``/healthz``, ``/readyz`` and ``/metrics`` are :mod:`.status`'s; how an app is served,
:mod:`.serving`'s.

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

import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from fastapi import FastAPI

from envcheck.api.auth import authorizer
from envcheck.api.cache import ResponseCache
from envcheck.api.problems import install_handlers
from envcheck.api.routes import environments, incidents, quarantine, rollouts, suites, taint
from envcheck.api.serving import DEFAULT_PORT, serve, serve_in_thread
from envcheck.store import Store

__all__ = ["DEFAULT_CACHE_TTL_S", "DEFAULT_PORT", "create_app", "serve", "serve_in_thread"]

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
