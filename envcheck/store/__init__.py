"""The result store: SQLite embedded by default, PostgreSQL at scale, one interface for both.

::

    with open_store() as store:          # $ENVCHECK_DATABASE_URL or the local SQLite file
        run_id = store.start_run("cli", catalogue.files)
        store.record(run_id, result)     # durable at once
        store.finish_run(run_id)

The names below are loaded on first use (PEP 562): importing a light submodule
(:mod:`envcheck.store.urls`) must not pull SQLAlchemy into a command that never opens a store.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envcheck.store.store import Store, open_store
    from envcheck.store.tables.catalogue import EnvironmentRow
    from envcheck.store.tables.runs import CheckRun, RunState
    from envcheck.store.urls import default_database_url

__all__ = ["CheckRun", "EnvironmentRow", "RunState", "Store", "default_database_url", "open_store"]

_WHERE = {"Store": "store", "open_store": "store", "CheckRun": "tables.runs",
          "EnvironmentRow": "tables.catalogue", "RunState": "tables.runs",
          "default_database_url": "urls"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once: later lookups do not come back here
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
