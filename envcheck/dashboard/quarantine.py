"""The quarantine page's one write path: quarantine and release go through the HTTP API
(``POST``/``DELETE /v1/quarantine``) with the bearer token, never straight into the store: one
writer path, authenticated, that also rewrites the export files schedulers fall back on and
serialises changes. Without an API URL (``ENVCHECK_API_URL``) or a token the dashboard is
read-only and says so. The page's reads are the cached wrappers in
:mod:`envcheck.dashboard.cached`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from envcheck.client import ApiError, EnvcheckClient, EnvcheckUnavailable
from envcheck.core.errors import EnvcheckError
from envcheck.net.apitoken import ApiConfigError, load_api_token

__all__ = ["API_URL_ENV", "ApiSettings", "ChangeOutcome", "api_settings", "change_quarantine"]

API_URL_ENV = "ENVCHECK_API_URL"


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """Where quarantine changes go, and whether this process holds a token for them."""

    url: str | None
    token: str | None = field(default=None, repr=False)
    problem: str | None = None  # why the token setting is unusable, if it is

    @property
    def writable(self) -> bool:
        return self.url is not None and self.token is not None


def api_settings(environ: Mapping[str, str] | None = None) -> ApiSettings:
    """The API URL (``$ENVCHECK_API_URL``) and the token of this process
    (``$ENVCHECK_API_TOKEN`` or ``$ENVCHECK_API_TOKEN_FILE``, as the API reads them)."""
    environ = os.environ if environ is None else environ
    url = environ.get(API_URL_ENV, "").strip().rstrip("/") or None
    try:
        token = load_api_token(environ)
    except ApiConfigError as exc:
        return ApiSettings(url, None, str(exc))
    return ApiSettings(url, token)


@dataclass(frozen=True, slots=True)
class ChangeOutcome:
    ok: bool
    message: str
    changed: bool = False
    generation: int | None = None


def change_quarantine(api_url: str, token: str, env_id: str, *, add: bool, reason: str,
                      actor: str, timeout: tuple[float, float] = (3.05, 15.0)
                      ) -> ChangeOutcome:
    """Quarantine (``add``) or release ``env_id`` through the API; never raises for what the
    API or the network answers: the outcome says it, in words for a person."""
    verb = "quarantined" if add else "released"
    try:
        with EnvcheckClient(api_url, token, timeout=timeout, retries=1) as client:
            answer = (client.quarantine_add if add else client.quarantine_release)(
                env_id, reason, actor)
    except ApiError as exc:
        return ChangeOutcome(False, f"the API refused ({exc.status} {exc.error}): {exc.reason}")
    except EnvcheckUnavailable as exc:
        return ChangeOutcome(False, f"the API did not answer: {exc}")
    except EnvcheckError as exc:  # pragma: no cover - the client raises only the two above
        return ChangeOutcome(False, str(exc))
    generation = answer.get("generation")
    if not answer.get("changed"):
        state = "already quarantined by hand" if add else "not quarantined"
        return ChangeOutcome(True, f"{env_id} was {state}: nothing changed", False, generation)
    note = "" if answer.get("exports_written", True) else \
        " (the API could not rewrite the export files: see its log)"
    return ChangeOutcome(True, f"{env_id} {verb} (generation {generation}){note}", True,
                         generation)
