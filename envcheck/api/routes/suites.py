"""A suite's allowlist: what a scheduler may use from it now."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from envcheck.api.cache import ResponseCache, conditional
from envcheck.api.models import AllowlistOut
from envcheck.api.problems import NOT_FOUND, ApiProblem
from envcheck.feed.allowlist import UnknownSuite, allowlist
from envcheck.store import Store

__all__ = ["router", "unknown_suite"]


def unknown_suite(store: Store, suite: str) -> ApiProblem:
    known = ", ".join(s.id for s in store.suites()) or "none yet: run envcheck check"
    return ApiProblem(404, "unknown_suite", f"unknown suite {suite!r} (known: {known})")


def router(store: Store, cache: ResponseCache) -> APIRouter:
    routes = APIRouter()

    @routes.get("/v1/suites/{suite}/allowlist", response_model=AllowlistOut,
                responses=NOT_FOUND, summary="What a scheduler may use from a suite now")
    def get_allowlist(suite: str, request: Request) -> Response:
        generation = store.generation()

        def build() -> bytes:
            try:
                listing = allowlist(store, suite, generation)
            except UnknownSuite:
                raise unknown_suite(store, suite) from None
            return AllowlistOut.of(listing).model_dump_json().encode()

        return conditional(request, cache.get(request.url.path, generation, build))

    return routes
