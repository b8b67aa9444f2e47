"""The result store: SQLite embedded by default, PostgreSQL at scale, one interface for both.

::

    with open_store() as store:          # $ENVCHECK_DATABASE_URL or the local SQLite file
        run_id = store.start_run("cli", catalogue.files)
        store.record(run_id, result)     # durable at once
        store.finish_run(run_id)
"""

from envcheck.store.database import default_database_url
from envcheck.store.store import Store, open_store
from envcheck.store.tables import CheckRun, EnvironmentRow, RunState

__all__ = ["CheckRun", "EnvironmentRow", "RunState", "Store", "default_database_url", "open_store"]
