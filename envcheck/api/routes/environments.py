"""An environment: its state, per-kind health, history and latest results; the image digests
its results saw (a watched tag's moves). Never cached: new probe results change them without a
transition."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from envcheck.api.cache import conditional, render
from envcheck.api.models import (
    DigestHistoryOut,
    DigestKindOut,
    DigestOut,
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

    @routes.get("/v1/environments/{env_id}/digests", response_model=DigestHistoryOut,
                responses=NOT_FOUND,
                summary="The image digests an environment's results saw: for a watched tag, "
                        "each digest it pointed at, with first and last seen and the results "
                        "under each")
    def get_digests(env_id: str, request: Request) -> Response:
        generation = store.generation()
        record = store.environment_record(env_id)
        if record is None:
            raise ApiProblem(404, "unknown_environment",
                             f"unknown environment {env_id!r} (never synced from a catalogue)")
        per_kind: dict[str | None, list[DigestKindOut]] = {}
        for k in store.digest_kinds(env_id):
            per_kind.setdefault(k.image_digest, []).append(DigestKindOut(
                kind=k.kind, results=k.results, failures=k.failures,
                latest_result_id=k.result_id, latest_status=k.status,
                latest_reason=k.reason, latest_at=k.started_at))
        spans = store.digest_history(env_id)  # newest first
        doc = DigestHistoryOut(
            env_id=env_id, suite=record.suite, image=record.image,
            watched=record.watched,
            generation=generation,
            digests=[DigestOut(image_digest=s.image_digest, current=i == 0,
                               first_seen=s.first_seen, last_seen=s.last_seen,
                               results=s.results, failures=s.failures,
                               kinds=per_kind.get(s.image_digest, []))
                     for i, s in enumerate(spans)])
        return conditional(request, render(request.url.path, generation,
                                           doc.model_dump_json().encode(), clock()))

    return routes
