"""Taint: the intervals in which environments' rewards could not be trusted, cached like the
lists (:class:`~envcheck.api.cache.ResponseCache`): a transition shows at once, a change
without one (a new digest's first result closes an interval) within ``cache_ttl_s``.

``GET /v1/taint?since=&until=&suite=`` for the fleet (or a suite) and
``GET /v1/environments/{env_id}/taint?since=&until=`` for one environment: the intervals that
meet ``[since, until]``, each an age (``24h``, ``7d``) or an ISO 8601 date or time (UTC unless
it names a zone), read by the one parser ``envcheck taint`` uses too
(:func:`envcheck.feed.taint.window`). A bad time is a 422 naming the parameter, an unknown
suite or environment a 404.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from envcheck.api.cache import ResponseCache, conditional
from envcheck.api.models import FieldError, TaintIntervalOut, TaintOut
from envcheck.api.problems import NOT_FOUND, ApiProblem
from envcheck.api.routes.suites import unknown_suite
from envcheck.feed.taint import BadWindow, taint, window
from envcheck.store import Store

__all__ = ["router"]

_TIME = ("an age before now (30m, 24h, 7d) or an ISO 8601 date or time "
         "(2026-12-01, 2026-12-01T08:00; UTC unless it names a zone)")
Since = Annotated[str | None, Query(description=f"from: {_TIME}; default: unbounded")]
Until = Annotated[str | None, Query(description=f"to: {_TIME}; default: now and on")]


def _window(since: str | None, until: str | None) -> tuple[datetime | None, datetime | None]:
    """The window asked for, or a 422 naming the bad parameter."""
    try:
        return window(since, until, datetime.now(UTC))
    except BadWindow as exc:
        raise ApiProblem(422, "invalid_request", f"invalid request: {exc}", fields=[
            FieldError(field=exc.name, location="query", message=exc.message,
                       type="value_error")]) from None


def router(store: Store, cache: ResponseCache) -> APIRouter:
    routes = APIRouter()

    def answer(request: Request, since: datetime | None, until: datetime | None,
               suite: str | None = None, env_id: str | None = None) -> Response:
        generation = store.generation()

        def build() -> bytes:
            found = taint(store, since=since, until=until, suite=suite, env_id=env_id)
            doc = TaintOut(generation=generation, since=since, until=until, count=len(found),
                           intervals=[TaintIntervalOut.of(i) for i in found])
            return doc.model_dump_json().encode()

        key = f"{request.url.path}?{request.url.query}"
        return conditional(request, cache.get(key, generation, build))

    @routes.get("/v1/taint", response_model=TaintOut, responses=NOT_FOUND,
                summary="When environments' rewards could not be trusted: the samples to drop")
    def get_taint(request: Request, since: Since = None, until: Until = None,
                  suite: Annotated[str | None, Query(description="only this suite")] = None
                  ) -> Response:
        start, end = _window(since, until)
        if suite is not None and store.suite(suite) is None:
            raise unknown_suite(store, suite)
        return answer(request, start, end, suite=suite)

    @routes.get("/v1/environments/{env_id}/taint", response_model=TaintOut,
                responses=NOT_FOUND,
                summary="When one environment's rewards could not be trusted")
    def get_environment_taint(env_id: str, request: Request, since: Since = None,
                              until: Until = None) -> Response:
        start, end = _window(since, until)
        if store.environment_record(env_id) is None:
            raise ApiProblem(404, "unknown_environment",
                             f"unknown environment {env_id!r} (never synced from a catalogue)")
        return answer(request, start, end, env_id=env_id)

    return routes
