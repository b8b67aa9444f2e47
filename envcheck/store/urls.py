"""Where the store is: the URL from the environment, the local data directory.

Apart from :mod:`envcheck.store.database` because nothing here needs SQLAlchemy: the command
line reads these names while it builds its options, before any command runs.
"""

from __future__ import annotations

import os

from envcheck.core.paths import DATA_DIR_ENV, data_dir

__all__ = ["DATA_DIR_ENV", "URL_ENV", "data_dir", "default_database_url", "normalise_url"]

URL_ENV = "ENVCHECK_DATABASE_URL"


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
