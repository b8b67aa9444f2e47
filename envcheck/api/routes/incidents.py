"""Infrastructure incidents: what failed, which cycle, what was held back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query

from envcheck.api.models import IncidentOut, IncidentsOut, Problem
from envcheck.api.problems import ApiProblem
from envcheck.core.clock import since as since_when
from envcheck.store import Store

__all__ = ["router"]


def router(store: Store) -> APIRouter:
    routes = APIRouter()

    @routes.get("/v1/incidents", response_model=IncidentsOut,
                responses={400: {"model": Problem, "description": "a bad `since`"}},
                summary="Infrastructure incidents: what failed, which cycle, what was held back")
    def get_incidents(
            since: Annotated[str | None, Query(description="an age (24h, 7d) or an ISO 8601 "
                                               "date or time")] = None,
            limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> IncidentsOut:
        start = None
        if since is not None:
            try:
                start = since_when(since, datetime.now(UTC))
            except ValueError as exc:
                raise ApiProblem(400, "bad_since", str(exc)) from None
        rows = [IncidentOut.of(r) for r in store.incidents(limit, since=start)]
        return IncidentsOut(count=len(rows), incidents=rows)

    return routes
