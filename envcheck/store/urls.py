"""Where the store is: the URL from the environment, the local data directory.

Apart from :mod:`envcheck.store.database` because nothing here needs SQLAlchemy: the command
line reads these names while it builds its options, before any command runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from envcheck.core.errors import ConfigError

__all__ = ["DATA_DIR_ENV", "URL_ENV", "data_dir", "default_database_url", "normalise_url"]

URL_ENV = "ENVCHECK_DATABASE_URL"
DATA_DIR_ENV = "ENVCHECK_DATA_DIR"


def data_dir() -> Path:
    """Where envcheck keeps local state; created on first use. A directory that cannot be
    created or written is the user's setting to fix: :class:`ConfigError`, one line."""
    explicit = os.environ.get(DATA_DIR_ENV)
    if explicit:
        path = Path(explicit)
    else:
        state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        path = Path(state) / "envcheck"
    fix = f"set {DATA_DIR_ENV} to a writable directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"cannot use the data directory {path}: it exists and is not a "
                          f"directory ({fix})") from None
    except OSError as exc:
        raise ConfigError(f"cannot create the data directory {path}: "
                          f"{exc.strerror or exc} ({fix})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot use the data directory {path}: not writable ({fix})")
    return path


def default_database_url() -> str:
    """``$ENVCHECK_DATABASE_URL`` if set, else the SQLite file ``envcheck.db`` in the data dir
    (raises :class:`ConfigError` if that cannot be created)."""
    url = os.environ.get(URL_ENV, "").strip()
    if url:
        return normalise_url(url)
    return f"sqlite:///{data_dir() / 'envcheck.db'}"


def normalise_url(url: str) -> str:
    """Route plain ``postgresql://`` (and ``postgres://``) URLs to the psycopg 3 driver."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url.removeprefix(prefix)
    return url
