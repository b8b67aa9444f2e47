"""The quarantine list, and changes to it by hand (quarantine, release: token needed)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from fastapi import APIRouter, Depends, Request, Response

from envcheck.api.auth import BEARER, Authorize, authenticated_first
from envcheck.api.cache import ResponseCache, conditional
from envcheck.api.models import (
    QuarantineChange,
    QuarantineChangeOut,
    QuarantineEntryOut,
    QuarantineOut,
    TransitionOut,
)
from envcheck.api.problems import MUTATION, NOT_FOUND, ApiProblem
from envcheck.api.routes.suites import unknown_suite
from envcheck.core.errors import EnvcheckError
from envcheck.feed.assess import set_quarantine_by_id
from envcheck.feed.exports import write_exports
from envcheck.store import Store

__all__ = ["changes", "listing"]

# the API's one logger, whichever of its modules speaks
log = logging.getLogger("envcheck.api.app")

MANUAL_ACTOR = "api"


def listing(store: Store, cache: ResponseCache) -> APIRouter:
    routes = APIRouter()

    @routes.get("/v1/quarantine", response_model=QuarantineOut, responses=NOT_FOUND,
                summary="Quarantined environments, with source, actor, reason and evidence")
    def get_quarantine(request: Request, suite: str | None = None) -> Response:
        generation = store.generation()

        def build() -> bytes:
            if suite is not None and store.suite(suite) is None:
                raise unknown_suite(store, suite)
            entries = [QuarantineEntryOut.model_validate(q, from_attributes=True)
                       for q in store.quarantined(suite)]
            doc = QuarantineOut(generation=generation, count=len(entries), quarantined=entries)
            return doc.model_dump_json().encode()

        key = f"{request.url.path}?suite={suite or ''}"
        return conditional(request, cache.get(key, generation, build))

    return routes


def changes(store: Store, authorize: Authorize, export_dir: Path | None) -> APIRouter:
    """The changes by hand, which rewrite the export files in ``export_dir``."""
    mutations = threading.Lock()

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
                    write_exports(store, export_dir, taint_of=[env_id])
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
    mutating = APIRouter(route_class=authenticated_first(authorize), responses=MUTATION,
                         dependencies=[Depends(BEARER)])

    @mutating.post("/v1/quarantine/{env_id}", response_model=QuarantineChangeOut,
                   summary="Quarantine an environment by hand (only a person releases it)")
    def post_quarantine(env_id: str, body: QuarantineChange) -> QuarantineChangeOut:
        return change(env_id, body, add=True)

    @mutating.delete("/v1/quarantine/{env_id}", response_model=QuarantineChangeOut,
                     summary="Release an environment from quarantine by hand")
    def delete_quarantine(env_id: str, body: QuarantineChange) -> QuarantineChangeOut:
        return change(env_id, body, add=False)

    return mutating
