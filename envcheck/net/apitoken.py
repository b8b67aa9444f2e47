"""The API's mutation token, read from the environment: shared by the API server, the daemon's
start-up checks and the dashboard, which must not import the server to learn it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from envcheck.core.errors import ConfigError

__all__ = ["MIN_TOKEN_LENGTH", "TOKEN_ENV", "TOKEN_FILE_ENV", "ApiConfigError", "load_api_token"]

TOKEN_ENV = "ENVCHECK_API_TOKEN"
TOKEN_FILE_ENV = "ENVCHECK_API_TOKEN_FILE"
MIN_TOKEN_LENGTH = 16


class ApiConfigError(ConfigError):
    """The API's token setting is unusable (both variables set, unreadable or too short)."""


def load_api_token(environ: Mapping[str, str] | None = None) -> str | None:
    """The mutation token from ``$ENVCHECK_API_TOKEN`` or the file ``$ENVCHECK_API_TOKEN_FILE``;
    None when neither is set (the API is then read-only). Messages never contain it."""
    environ = os.environ if environ is None else environ
    value, path = environ.get(TOKEN_ENV, ""), environ.get(TOKEN_FILE_ENV, "")
    if value and path:
        raise ApiConfigError(f"set {TOKEN_ENV} or {TOKEN_FILE_ENV}, not both")
    if path:
        try:
            value = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ApiConfigError(f"cannot read {TOKEN_FILE_ENV} ({path}): {why}") from None
        if not value.strip():
            raise ApiConfigError(f"the token file {path} is empty")
    value = value.strip()
    if value and len(value) < MIN_TOKEN_LENGTH:
        raise ApiConfigError(f"the API token must have at least {MIN_TOKEN_LENGTH} characters")
    return value or None
