"""Who may change the feed: a bearer token compared in constant time, checked before a
request's body is read."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from envcheck.api.problems import ApiProblem
from envcheck.net.apitoken import TOKEN_ENV, TOKEN_FILE_ENV

__all__ = ["BEARER", "Authorize", "authenticated_first", "authorizer"]

_REALM = 'Bearer realm="envcheck"'

# Module level: FastAPI resolves the (string) annotations of dependencies in module globals.
BEARER = HTTPBearer(auto_error=False, description=f"the server's {TOKEN_ENV}")


Authorize = Callable[[HTTPAuthorizationCredentials | None], None]


def authorizer(token: str | None) -> Authorize:
    """Raise the :class:`ApiProblem` for credentials that do not present ``token``; with no
    token, for any: the API is read-only."""
    token_digest = hashlib.sha256(token.encode()).digest() if token else None

    def authorize(credentials: Annotated[HTTPAuthorizationCredentials | None,
                                         Depends(BEARER)]) -> None:
        if token_digest is None:
            raise ApiProblem(403, "read_only", "this envcheck API is read-only: the server has "
                             f"no token (set {TOKEN_ENV} or {TOKEN_FILE_ENV} where it runs)")
        if credentials is None:
            raise ApiProblem(401, "missing_token", "send Authorization: Bearer <token>",
                             {"WWW-Authenticate": _REALM})
        presented = hashlib.sha256(credentials.credentials.encode()).digest()
        # Hashing first makes the comparison independent of the token's length too.
        if not hmac.compare_digest(presented, token_digest):
            raise ApiProblem(401, "invalid_token", "the bearer token is not valid",
                             {"WWW-Authenticate": f'{_REALM}, error="invalid_token"'})

    return authorize


def authenticated_first(authorize: Authorize) -> type[APIRoute]:
    """A route class whose requests are authorized before anything else of theirs is read.

    FastAPI reads and parses the body before it solves a route's dependencies, so a
    ``Depends(authorize)`` would answer a malformed body with 422 to anyone. Routes of this
    class run ``authorize`` on the request's headers before their handler reads anything.
    """

    class AuthenticatedFirst(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Any]:
            handler = super().get_route_handler()

            async def authorized(request: Request) -> Response:
                authorize(await BEARER(request))
                response: Response = await handler(request)
                return response

            return authorized

    return AuthenticatedFirst
