"""The daemon's own endpoints: ``/healthz`` (liveness), ``/readyz`` (readiness), ``/metrics``.

They are mounted on the full app (:func:`mount_status`), and served alone (:func:`status_app`)
while the daemon waits for the store's lease as a standby, and while it starts: a liveness
probe finds the process alive from its first second, and a standby says so.

- ``/healthz``: 200 while the process serves, whatever its dependencies do.
- ``/readyz``: 200 when this daemon writes the store and its dependencies are usable, else
  503. The body says which ``role`` it plays: ``active`` (it holds the store's lease; each
  check ``ok`` or its error), ``standby`` (it waits for the lease: the ``lease`` check names
  the holder, ``standby: the store's lease is held by host H, pid P, since T``, or is an
  ``error:`` when the store does not answer its look), ``starting`` (it holds the lease and
  sets up the rest). The image's health check reads ``role`` (images/envcheck/healthcheck.py).
- ``/metrics``: whatever ``scrape`` returns, in pieces.

Each handler is async and reads only what was recorded (the readiness watchers, the lease's
last look): never a question to the engine or the store, so none of them waits on one.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST

from envcheck.store.lease import StoreLease

__all__ = ["Ready", "mount_status", "status_app", "waiting_ready"]

ACTIVE, STANDBY, STARTING = "active", "standby", "starting"


class Ready(NamedTuple):
    """What ``/readyz`` answers: ready (200) or not (503), and the body."""

    ready: bool
    body: dict[str, Any]


def mount_status(app: FastAPI, ready: Callable[[], Ready],
                 scrape: Callable[[], list[bytes]]) -> None:
    """``/healthz``, ``/readyz`` (``ready()``: it must not wait) and ``/metrics``
    (``scrape()``) on ``app``, out of its API spec."""

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> StreamingResponse:
        parts = scrape()

        async def pieces() -> AsyncIterator[bytes]:  # no thread hop per piece
            for part in parts:
                yield part

        return StreamingResponse(pieces(), media_type=CONTENT_TYPE_LATEST)

    # async: answered on the event loop, never queued behind requests waiting on the store
    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        answer = ready()
        return JSONResponse(answer.body, status_code=200 if answer.ready else 503)


def status_app(ready: Callable[[], Ready], scrape: Callable[[], list[bytes]]) -> FastAPI:
    """The three endpoints alone: what a daemon serves before it runs in full."""
    app = FastAPI(title="envcheck", openapi_url=None, docs_url=None, redoc_url=None)
    mount_status(app, ready, scrape)
    return app


def waiting_ready(lease: StoreLease, monotonic: Callable[[], float] = time.monotonic
                  ) -> Callable[[], Ready]:
    """``/readyz`` before the daemon runs in full: a standby's wait for ``lease`` as its
    last look found it, or the start once the lease is held. Never ready."""

    def ready() -> Ready:
        if lease.held:
            return Ready(False, {"ready": False, "role": STARTING,
                                 "checks": {"lease": "ok", "daemon": "starting"}})
        look = lease.looks.check(monotonic())
        holder = lease.waiting_for
        return Ready(False, {"ready": False, "role": STANDBY, "checks": {"lease": look.status},
                             "age_s": {"lease": look.age_s},
                             "holder": holder.as_dict() if holder is not None else None})

    return ready
