"""Where envcheck keeps local state on this host (the store's SQLite file, the image cache's
ledgers): read from the environment, apart from the store because a Ray node's registry stage,
which has no store, keeps its ledger there too."""

from __future__ import annotations

import os
from pathlib import Path

from envcheck.core.errors import ConfigError

__all__ = ["DATA_DIR_ENV", "data_dir"]

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
