"""The training run's rollouts, reported in batches (token needed): ``POST /v1/rollouts``.

The body is a JSON array of records or NDJSON (``Content-Type: application/x-ndjson``),
gzip accepted (``Content-Encoding: gzip``). It is read and validated whole before anything is
counted: a bad record is a 400 naming its index and field, and nothing of the batch is
written; a batch too large is a 413. Records of environments the catalogue does not hold are
counted apart and reported, never an error.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from envcheck.api.auth import BEARER, Authorize, authenticated_first
from envcheck.api.models import FieldError, Problem, RolloutsIngestedOut
from envcheck.api.problems import MUTATION, ApiProblem
from envcheck.rollouts.batch import BatchError, read_batch
from envcheck.rollouts.records import RolloutRecord
from envcheck.store import Store

__all__ = ["router"]

_ANSWERS = {**MUTATION, 400: {"model": Problem, "description": "A bad record (index, field)"},
            413: {"model": Problem}, 415: {"model": Problem}}
# The body is read by hand (two media types, gzip); the spec still shows the record's schema.
_RECORD = RolloutRecord.model_json_schema(ref_template="#/components/schemas/{model}")
_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"type": "array", "items": _RECORD}},
    "application/x-ndjson": {"schema": {"type": "string",
                                        "description": "one record (as above) a line"}}}}}


def router(store: Store, authorize: Authorize) -> APIRouter:
    routes = APIRouter(route_class=authenticated_first(authorize), responses=_ANSWERS,
                       dependencies=[Depends(BEARER)])

    @routes.post("/v1/rollouts", response_model=RolloutsIngestedOut, openapi_extra=_BODY,
                 summary="Report a batch of rollouts (JSON array or NDJSON, gzip accepted)")
    async def post_rollouts(request: Request) -> RolloutsIngestedOut:
        body = await request.body()
        try:
            batch = read_batch(body, content_type=request.headers.get("content-type", ""),
                               content_encoding=request.headers.get("content-encoding", ""))
        except BatchError as exc:
            fields = ([FieldError(field=exc.field or "", location=f"body[{exc.index}]",
                                  message=exc.reason, type=exc.error)]
                      if exc.index is not None else [])
            raise ApiProblem(exc.status, exc.error, exc.reason, fields=fields) from None
        # the store's write blocks: off the event loop
        outcome = await run_in_threadpool(store.record_rollouts, batch)
        return RolloutsIngestedOut(received=outcome.received, counted=outcome.counted,
                                   duplicates=outcome.duplicates, unknown=outcome.unknown,
                                   unknown_ids=list(outcome.unknown_ids))

    return routes
