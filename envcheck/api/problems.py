"""Every answer other than 2xx: one :class:`~envcheck.api.models.Problem` body, whatever
went wrong (a route's own refusal, a bad request, an unknown path, the store, a bug)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from envcheck.api.models import FieldError, Problem
from envcheck.core.errors import StoreError

__all__ = ["MUTATION", "NOT_FOUND", "ApiProblem", "install_handlers"]

# the API's one logger, whichever of its modules speaks
log = logging.getLogger("envcheck.api.app")

# The answers other than 2xx, as the spec shows them.
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    304: {"description": "Not modified: If-None-Match holds the current ETag"},
    404: {"model": Problem}, 422: {"model": Problem}}
MUTATION: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "Missing or wrong bearer token"},
    403: {"model": Problem, "description": "Read-only: the server has no token configured"},
    404: {"model": Problem}, 422: {"model": Problem}}


class ApiProblem(Exception):
    """An answer other than 2xx, with the :class:`Problem` body."""

    def __init__(self, status: int, error: str, reason: str,
                 headers: dict[str, str] | None = None,
                 fields: list[FieldError] | None = None) -> None:
        super().__init__(reason)
        self.status, self.error, self.reason, self.headers = status, error, reason, headers
        self.fields = fields


def _problem(status: int, error: str, reason: str, headers: Mapping[str, str] | None = None,
             fields: list[FieldError] | None = None) -> JSONResponse:
    body = Problem(error=error, reason=reason, fields=fields or [])
    return JSONResponse(body.model_dump(mode="json"), status_code=status,
                        headers=dict(headers or {}))


def install_handlers(app: FastAPI) -> None:
    """Answer every exception of ``app``'s requests with a :class:`Problem`."""

    @app.exception_handler(ApiProblem)
    def _on_problem(_: Request, exc: ApiProblem) -> JSONResponse:
        return _problem(exc.status, exc.error, exc.reason, exc.headers, exc.fields)

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
