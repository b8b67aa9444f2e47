"""A registry's auth flows: Basic, and the Bearer token flow of the distribution spec.

The first request to a registry goes out bare; its ``401`` names the scheme in
``WWW-Authenticate``. ``Basic``: the credentials go with every request after it. ``Bearer``:
a token is asked of the realm the challenge names, for ``service`` and the repository's pull
scope, with the credentials as basic auth (or anonymously), or an identity token as an OAuth
refresh token (``POST``); it is kept for its ``expires_in`` (60 s when the answer leaves it
out, as the spec says) per (realm, service, scope, credentials). What each registry asked is
remembered, so a watched tag costs one request (plus a token request once per token lifetime).
"""

from __future__ import annotations

import base64
import json
import re
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import urlencode

from envcheck.core.clock import Clock
from envcheck.registry.credentials import Credentials
from envcheck.registry.transport import Answer, Deadline, Transport

__all__ = ["Authorizer", "Challenge", "TokenRefused", "parse_challenge"]

DEFAULT_TOKEN_LIFETIME_S = 60.0  # the token spec's default when expires_in is left out
_EARLY_S = 5.0  # a token is renewed this long before it expires, so none is sent stale
_MAX_TOKENS = 100_000
_PARAM = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


@dataclass(frozen=True, slots=True)
class Challenge:
    """What a registry asked for: ``basic``, ``bearer`` (with its realm and service) or
    ``none`` (it answered without asking)."""

    scheme: str
    realm: str = ""
    service: str = ""
    scope: str = ""


NONE = Challenge("none")


def parse_challenge(header: str) -> Challenge | None:
    """``Bearer realm="...",service="...",scope="..."`` or ``Basic realm="..."``."""
    scheme, _, rest = header.strip().partition(" ")
    params = {m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3)
              for m in _PARAM.finditer(rest)}
    if scheme.lower() == "basic":
        return Challenge("basic", params.get("realm", ""))
    if scheme.lower() == "bearer" and params.get("realm", "").startswith(("http://",
                                                                          "https://")):
        return Challenge("bearer", params["realm"], params.get("service", ""),
                         params.get("scope", ""))
    return None


class TokenRefused(Exception):
    """The realm did not give a token: its answer, for the failure's classification."""

    def __init__(self, answer: Answer, realm: str) -> None:
        self.answer = answer
        self.realm = realm
        super().__init__(f"the token service {realm} answered {answer.status}")


@dataclass(frozen=True, slots=True)
class Authorization:
    """Headers for a request, and whether they came from cache (a stale token is renewed
    once on a 401; credentials just refused are not sent again)."""

    headers: dict[str, str]
    cached: bool
    token_requests: int = 0

    @property
    def sent_credentials(self) -> bool:
        return bool(self.headers)


class Authorizer:
    """Thread-safe; one per watcher, shared by every registry it looks at."""

    def __init__(self, transport: Transport, clock: Clock) -> None:
        self._transport = transport
        self._clock = clock
        self._challenges: dict[str, Challenge] = {}
        self._tokens: OrderedDict[tuple[str, str, str, str], tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()
        # a token fetch per key at a time: looks at one repository from several threads ask
        # once, not once each (striped, so the locks stay few)
        self._fetching = [threading.Lock() for _ in range(64)]

    def known(self, api_host: str) -> Challenge | None:
        with self._lock:
            return self._challenges.get(api_host)

    def learn(self, api_host: str, challenge: Challenge) -> None:
        with self._lock:
            self._challenges[api_host] = challenge

    def authorize(self, api_host: str, repository: str, credentials: Credentials,
                  deadline: Deadline, *, renew: bool = False) -> Authorization:
        """Headers for a pull of ``repository`` as the registry last asked; ``renew`` drops
        a cached token first. Raises ``TokenRefused`` and the transport's exceptions."""
        challenge = self.known(api_host)
        if challenge is None or challenge.scheme == "none":
            return Authorization({}, cached=False)
        if challenge.scheme == "basic":
            if credentials.password is None or credentials.username is None:
                return Authorization({}, cached=False)
            return Authorization(
                {"Authorization": _basic(credentials.username, credentials.password)},
                cached=False)
        scope = f"repository:{repository}:pull"
        key = (challenge.realm, challenge.service, scope, credentials.key)
        lock = self._fetching[zlib.crc32(repr(key).encode()) % len(self._fetching)]
        with lock:
            if renew:
                with self._lock:
                    self._tokens.pop(key, None)
            token = self._cached(key)
            if token is not None:
                return Authorization({"Authorization": f"Bearer {token}"}, cached=True)
            token, lifetime = self._fetch(challenge, scope, credentials, deadline)
            with self._lock:
                self._tokens[key] = (token, self._clock.monotonic() + lifetime)
                while len(self._tokens) > _MAX_TOKENS:
                    self._tokens.popitem(last=False)
        return Authorization({"Authorization": f"Bearer {token}"}, cached=False,
                             token_requests=1)

    def _cached(self, key: tuple[str, str, str, str]) -> str | None:
        with self._lock:
            held = self._tokens.get(key)
            if held is None:
                return None
            token, until = held
            if self._clock.monotonic() >= until:
                del self._tokens[key]
                return None
            self._tokens.move_to_end(key)
            return token

    def _fetch(self, challenge: Challenge, scope: str, credentials: Credentials,
               deadline: Deadline) -> tuple[str, float]:
        params = {"service": challenge.service, "scope": scope}
        if credentials.identity_token is not None:
            # an identity token is an OAuth refresh token: the registry's CLI flow
            answer = self._transport.request(
                "POST", challenge.realm, deadline,
                data={**params, "grant_type": "refresh_token", "client_id": "envcheck",
                      "refresh_token": credentials.identity_token})
        else:
            query = urlencode({k: v for k, v in params.items() if v})
            auth = None
            if credentials.username is not None and credentials.password is not None:
                auth = (credentials.username, credentials.password)
            sep = "&" if "?" in challenge.realm else "?"
            answer = self._transport.request("GET", f"{challenge.realm}{sep}{query}", deadline,
                                             auth=auth)
        if answer.status != 200:
            raise TokenRefused(answer, challenge.realm)
        try:
            doc = json.loads(answer.body)
            token = doc.get("token") or doc.get("access_token")
            lifetime = float(doc.get("expires_in") or DEFAULT_TOKEN_LIFETIME_S)
        except (ValueError, AttributeError, TypeError):
            raise TokenRefused(answer, challenge.realm) from None
        if not isinstance(token, str) or not token:
            raise TokenRefused(answer, challenge.realm)
        return token, max(lifetime - _EARLY_S, 1.0)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
