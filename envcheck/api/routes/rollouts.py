"""The training run's rollouts, reported in batches (token needed): ``POST /v1/rollouts``.

The body is a JSON array of records or NDJSON (``Content-Type: application/x-ndjson``),
gzip accepted (``Content-Encoding: gzip``). It is read and validated whole before anything is
counted: a bad record is a 400 naming its index and field, and nothing of the batch is
written; a batch too large is a 413 (refused from its Content-Length, or as soon as what
arrives passes the bound); an encoding other than gzip a 415. Records of environments the
catalogue does not hold are counted apart and reported, never an error. A 200 means the batch
is committed: a trainer retries anything else, and the producer's sequence numbers make the
retry count once.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from envcheck.api.auth import BEARER, Authorize, authenticated_first
from envcheck.api.models import FieldError, Problem, RolloutsIngestedOut
from envcheck.api.problems import MUTATION, ApiProblem
from envcheck.rollouts.batch import MAX_BODY_BYTES, BatchError, read_batch
from envcheck.rollouts.records import record_schema
from envcheck.store import Store

__all__ = ["read_body", "router"]

_ANSWERS = {**MUTATION, 400: {"model": Problem, "description": "A bad record (index, field)"},
            413: {"model": Problem, "description": "Over 20,000 records or 16 MiB"},
            415: {"model": Problem, "description": "A Content-Encoding other than gzip"}}
# The body is read by hand (two media types, gzip); the spec still shows the record's schema.
_RECORD = record_schema()
_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"type": "array", "items": _RECORD}},
    "application/x-ndjson": {"schema": {"type": "string",
                                        "description": "one record (as above) a line"}}}}}
_TOO_LARGE = f"the body is over {MAX_BODY_BYTES} bytes: send smaller batches"


async def read_body(request: Request) -> bytes:
    """The request's body, never more than :data:`MAX_BODY_BYTES` of it held."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiProblem(413, "too_large", _TOO_LARGE)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiProblem(413, "too_large", _TOO_LARGE)
        chunks.append(chunk)
    return b"".join(chunks)


def _refused(exc: BatchError) -> ApiProblem:
    fields = ([FieldError(field=exc.field or "", location=f"body[{exc.index}]",
                          message=exc.reason, type=exc.kind or exc.error)]
              if exc.index is not None else [])
    return ApiProblem(exc.status, exc.error, exc.reason, fields=fields)


def router(store: Store, authorize: Authorize) -> APIRouter:
    routes = APIRouter(route_class=authenticated_first(authorize), responses=_ANSWERS,
                       dependencies=[Depends(BEARER)])

    @routes.post("/v1/rollouts", response_model=RolloutsIngestedOut, openapi_extra=_BODY,
                 summary="Report a batch of rollouts (JSON array or NDJSON, gzip accepted)")
    async def post_rollouts(request: Request) -> RolloutsIngestedOut:
        body = await read_body(request)
        content_type = request.headers.get("content-type", "")
        encoding = request.headers.get("content-encoding", "")

        def ingest() -> RolloutsIngestedOut:
            # parsed off the event loop too: a batch of 1,000 is milliseconds of CPU
            try:
                batch = read_batch(body, content_type=content_type, content_encoding=encoding)
            except BatchError as exc:
                raise _refused(exc) from None
            outcome = store.record_rollouts(batch)
            return RolloutsIngestedOut(received=outcome.received, counted=outcome.counted,
                                       duplicates=outcome.duplicates, unknown=outcome.unknown,
                                       unknown_ids=list(outcome.unknown_ids))

        return await run_in_threadpool(ingest)

    return routes
