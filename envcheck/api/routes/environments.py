"""An environment: its state, per-kind health, history and latest results (never cached:
new probe results change it without a transition)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from envcheck.api.cache import conditional, render
from envcheck.api.models import (
    EnvironmentOut,
    KindHealthOut,
    QuarantineEntryOut,
    ResultOut,
    TransitionOut,
)
from envcheck.api.problems import NOT_FOUND, ApiProblem
from envcheck.health.summary import env_summary
from envcheck.store import Store

__all__ = ["router"]


def router(store: Store, clock: Callable[[], float]) -> APIRouter:
    routes = APIRouter()

    @routes.get("/v1/environments/{env_id}", response_model=EnvironmentOut,
                responses=NOT_FOUND,
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
            rollouts=summary.rollouts,
            history=[TransitionOut.of(t) for t in store.transitions(env_id, limit=history)]
            if history else [],
            latest_results=[ResultOut.of(r) for r in store.latest_results([env_id])])
        key = f"{request.url.path}?history={history}"
        return conditional(request, render(key, generation,
                                            doc.model_dump_json().encode(), clock()))

    return routes
