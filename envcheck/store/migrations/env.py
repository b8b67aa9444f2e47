"""Alembic environment: migrates the connection :func:`envcheck.store.database.migrate` passes.

Without one (e.g. a developer running ``alembic revision --autogenerate`` with a Config of their
own), it connects to ``sqlalchemy.url`` or else :func:`envcheck.store.default_database_url`.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine
from sqlmodel import SQLModel

import envcheck.store.tables  # noqa: F401  (registers the tables on SQLModel.metadata)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=SQLModel.metadata,
        # SQLite cannot ALTER most things: autogenerate must render batch operations there.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def _main() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from envcheck.store.database import default_database_url, normalise_url

    url = context.config.get_main_option("sqlalchemy.url") or default_database_url()
    engine = create_engine(normalise_url(url))
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("envcheck migrations run online only (open_store does it)")
_main()
