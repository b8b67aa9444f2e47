"""Database URLs, engines and migrations: everything backend-specific lives here.

SQLite is the embedded default; PostgreSQL is for fleets. Connection failures surface as one
:class:`~envcheck.core.errors.StoreError` whose message never contains the URL's password.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.pool import StaticPool
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_fixed

from envcheck.core.errors import ConfigError, StoreError

__all__ = ["create_store_engine", "default_database_url", "migrate", "normalise_url", "redact"]

URL_ENV = "ENVCHECK_DATABASE_URL"
DATA_DIR_ENV = "ENVCHECK_DATA_DIR"
SQLITE_BUSY_TIMEOUT_MS = 5000
PG_CONNECT_TIMEOUT_S = 5
MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# Any constant will do: it only has to be the same in every envcheck process.
_PG_MIGRATION_LOCK = 0x656E76636865636B  # "envcheck"
# alembic.context is a module-global proxy: two threads running migrations at once (even on
# different databases) would swap each other's context mid-run.
_ALEMBIC_LOCK = threading.Lock()


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


def _lock_for_migration(conn: Connection) -> None:
    """Serialise concurrent first opens (CLI and daemon) so only one creates the schema."""
    if conn.dialect.name == "sqlite":
        # pysqlite does not begin a transaction before DDL; take the write lock explicitly.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def migrate(engine: Engine) -> None:
    """Upgrade the database to the newest schema, in one transaction where the backend can."""
    with _ALEMBIC_LOCK, engine.connect() as conn:
        _lock_for_migration(conn)
        command.upgrade(alembic_config(conn), "head")
        conn.commit()
