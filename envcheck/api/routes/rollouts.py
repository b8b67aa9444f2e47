"""The training run's rollouts, reported in batches (token needed): ``POST /v1/rollouts``.

The body is a JSON array of records or NDJSON (``Content-Type: application/x-ndjson``),
gzip accepted (``Content-Encoding: gzip``). It is read and validated whole before anything is
counted: a bad record is a 400 naming its index and field, and nothing of the batch is
written; a batch too large is a 413, sent once the body is read and dropped (up to 64 MiB,
so that its sender reads it; past that, declared or sent, at once and the connection
closed); an encoding other than gzip a 415. Records of environments the
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

__all__ = ["DRAIN_BYTES", "read_body", "router"]

_ANSWERS = {**MUTATION, 400: {"model": Problem, "description": "A bad record (index, field)"},
            413: {"model": Problem, "description": "Over 20,000 records or 16 MiB"},
            415: {"model": Problem, "description": "A Content-Encoding other than gzip"}}
# The body is read by hand (two media types, gzip); the spec still shows the record's schema.
_RECORD = record_schema()
_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"type": "array", "items": _RECORD}},
    "application/x-ndjson": {"schema": {"type": "string",
                                        "description": "one record (as above) a line"}}}}}
# A body over the limit is still read, and dropped, up to this many bytes before the 413 is
# sent: a sender writes its whole body before it reads an answer, and a server that closes
# with a body unread resets the connection (the client never sees why). Past it the 413 goes
# at once with Connection: close, and what was not read is the reset's.
DRAIN_BYTES = 4 * MAX_BODY_BYTES
_TOO_LARGE = f"the body is over {MAX_BODY_BYTES} bytes: send smaller batches"


def _too_large(read_whole: bool) -> ApiProblem:
    return ApiProblem(413, "too_large", _TOO_LARGE,
                      headers=None if read_whole else {"Connection": "close"})


async def read_body(request: Request) -> bytes:
    """The request's body, never more than :data:`MAX_BODY_BYTES` of it held; over it, a
    413 once the rest is read and dropped (up to :data:`DRAIN_BYTES`, declared or sent)."""
    declared = request.headers.get("content-length", "")
    length = int(declared) if declared.isdigit() else None
    if length is not None and length > DRAIN_BYTES:
        raise _too_large(read_whole=False)
    kept: list[bytes] | None = None if length and length > MAX_BODY_BYTES else []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > DRAIN_BYTES:
            raise _too_large(read_whole=False)
        if size > MAX_BODY_BYTES:
            kept = None  # from here on only counted
        elif kept is not None:
            kept.append(chunk)
    if kept is None:
        raise _too_large(read_whole=True)
    return b"".join(kept)


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
