"""Engines and migrations: everything backend-specific lives here (the URL helpers that need
no SQLAlchemy live in :mod:`envcheck.store.urls` and are re-exported).

SQLite is the embedded default; PostgreSQL is for fleets. Connection failures surface as one
:class:`~envcheck.core.errors.StoreError` whose message never contains the URL's password.

Opening a store whose schema is already at head costs one plain query of ``alembic_version``:
Alembic (a third of a second to import) is loaded only when there is something to migrate, so
short commands stay fast. :data:`SCHEMA_HEAD` (kept in :mod:`envcheck.store.sql`, with the
other settings the direct reader shares) names the newest revision; a test holds it equal to the
migrations' head.
"""

from __future__ import annotations

import importlib
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.pool import StaticPool
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_fixed

from envcheck.core.errors import StoreError
from envcheck.store.sql import (
    PG_CONNECT_TIMEOUT_S,
    SCHEMA_HEAD,
    SCHEMA_REVISION_SQL,
    SQLITE_BUSY_TIMEOUT_MS,
)
from envcheck.store.urls import (
    DATA_DIR_ENV,
    URL_ENV,
    data_dir,
    default_database_url,
    normalise_url,
)

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["DATA_DIR_ENV", "SCHEMA_HEAD", "URL_ENV", "UnknownRevision", "create_store_engine",
           "data_dir", "default_database_url", "migrate", "normalise_url", "open_failure",
           "redact", "schema_revision", "upsert_insert"]

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# Any constant will do: it only has to be the same in every envcheck process.
_PG_MIGRATION_LOCK = 0x656E76636865636B  # "envcheck"
# alembic.context is a module-global proxy: two threads running migrations at once (even on
# different databases) would swap each other's context mid-run.
_ALEMBIC_LOCK = threading.Lock()


def redact(url: str | URL) -> str:
    """The URL for messages: password masked, or a placeholder if it does not even parse."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparsable database URL>"


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        # busy_timeout makes writers from other processes wait instead of failing with
        # "database is locked"; WAL lets the dashboard and the API read while the daemon writes.
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        # Before the first table of a new file, or never: lets pruning give pages back to the
        # file system (envcheck.store.prune). An older file keeps its mode until a VACUUM.
        cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
        _enable_wal(cursor)
    finally:
        cursor.close()


def _locked(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def _enable_wal(cursor: Any) -> None:
    # Switching a fresh file to WAL needs an exclusive lock, and SQLite reports "locked" at
    # once (no busy handler) when processes race to do it; retry within the busy timeout.
    for attempt in Retrying(retry=retry_if_exception(_locked),
                            stop=stop_after_delay(SQLITE_BUSY_TIMEOUT_MS / 1000),
                            wait=wait_fixed(0.05), reraise=True):
        with attempt:
            cursor.execute("PRAGMA journal_mode=WAL")


def create_store_engine(url: str) -> Engine:
    """An engine for ``url`` with envcheck's settings; raises StoreError for a bad URL."""
    try:
        parsed = make_url(normalise_url(url))
    except ArgumentError:
        raise StoreError("not a valid database URL (check ENVCHECK_DATABASE_URL)") from None
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise StoreError(f"unsupported database {backend!r}: use sqlite:// or postgresql://")
    kwargs: dict[str, Any] = {}
    if backend == "sqlite":
        # The CLI records results from worker threads; the Store serialises SQLite access.
        kwargs["connect_args"] = {"check_same_thread": False}
        if parsed.database in (None, "", ":memory:"):
            kwargs["poolclass"] = StaticPool  # one shared in-memory database, not one per thread
    else:
        kwargs["pool_pre_ping"] = True
        if "connect_timeout" not in parsed.query:  # a URL's own ?connect_timeout= wins
            kwargs["connect_args"] = {"connect_timeout": PG_CONNECT_TIMEOUT_S}
    try:
        engine = create_engine(parsed, **kwargs)
    except (SQLAlchemyError, ImportError) as exc:
        raise StoreError(f"cannot use database {redact(parsed)}: {exc}") from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _on_sqlite_connect)
    return engine


def upsert_insert(engine: Engine) -> Any:
    """The backend's ``insert`` (with ``on_conflict_do_update``/``_nothing``): SQLite's or
    PostgreSQL's, importing only the dialect in use (PostgreSQL's costs a short command)."""
    name = "sqlite" if engine.dialect.name == "sqlite" else "postgresql"
    return importlib.import_module(f"sqlalchemy.dialects.{name}").insert


def _lock_for_migration(conn: Connection) -> None:
    """Serialise concurrent first opens (CLI and daemon) so only one creates the schema."""
    if conn.dialect.name == "sqlite":
        # pysqlite does not begin a transaction before DDL; take the write lock explicitly.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")


class UnknownRevision(Exception):
    """The database's schema is at a revision these migrations do not know (a newer envcheck
    migrated it): Alembic's ``CommandError``, without importing Alembic to catch it."""


def open_failure(url: str | URL, exc: BaseException) -> StoreError:
    """Why the store at ``url`` could not be opened, as one line without its password: what
    :func:`~envcheck.store.open_store` and the direct reader (``envcheck gate``) both say."""
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    if isinstance(exc, UnknownRevision):  # e.g. a revision this envcheck does not know
        reason += " (was the database migrated by a newer envcheck?)"
    try:
        password = make_url(url).password
    except ArgumentError:
        password = None
    if password:
        reason = reason.replace(str(password), "***")
    return StoreError(f"cannot open the result store at {redact(url)}: {reason}")


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def schema_revision(conn: Connection) -> list[str] | None:
    """The revisions in ``alembic_version``, by a plain query; None if there is no such table
    (a new database) or it cannot be read. Leaves no transaction open on ``conn``."""
    try:
        return sorted(str(v) for v in
                      conn.exec_driver_sql(SCHEMA_REVISION_SQL).scalars())
    except SQLAlchemyError:
        return None
    finally:
        conn.rollback()  # PostgreSQL: a failed query would poison the transaction


def migrate(engine: Engine) -> None:
    """Upgrade the database to the newest schema, in one transaction where the backend can.

    At head already (every open after the first), this is one read of ``alembic_version``
    and Alembic is not imported. Otherwise (a new database, an older schema, a revision
    unknown here) Alembic decides under the migration lock, as concurrent first opens need.
    Raises :class:`UnknownRevision` for a schema newer than these migrations."""
    with engine.connect() as conn:  # connection errors surface here, as before
        if schema_revision(conn) == [SCHEMA_HEAD]:
            return
    from alembic import command
    from alembic.util import CommandError

    with _ALEMBIC_LOCK, engine.connect() as conn:
        _lock_for_migration(conn)
        try:
            command.upgrade(alembic_config(conn), "head")
        except CommandError as exc:
            raise UnknownRevision(str(exc)) from exc
        conn.commit()
