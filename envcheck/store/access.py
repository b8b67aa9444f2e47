"""How every store method reaches the database: under the store's lock, one short session,
connection or transaction, with SQLAlchemy's errors turned into one
:class:`~envcheck.core.errors.StoreError`. The record mixins of :class:`~envcheck.store.Store`
inherit it, so the lock-connect-wrap sequence is written once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import Connection, Engine, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from envcheck.store.database import redact, upsert_insert
from envcheck.store.sql import operation_failed

__all__ = ["StoreAccess"]


class StoreAccess:
    """Needs ``_engine`` and ``_lock``, set by :class:`envcheck.store.Store`."""

    _engine: Engine
    _lock: contextlib.AbstractContextManager[Any]

    @contextlib.contextmanager
    def _session(self) -> Iterator[Session]:
        """An ORM session; the caller commits."""
        with self._lock, Session(self._engine, expire_on_commit=False) as session:
            try:
                yield session
            except SQLAlchemyError as exc:
                session.rollback()
                raise operation_failed(exc, redact(self._engine.url)) from exc

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A Core connection in a transaction, committed when the block ends."""
        with self._connected(self._engine.begin) as conn:
            yield conn

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Connection]:
        """A Core connection for reads."""
        with self._connected(self._engine.connect) as conn:
            yield conn

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Connection]:
        """A connection whose reads all see one state of the store, whatever commits
        meanwhile (a prune moving results into the rollups): PostgreSQL's repeatable read,
        SQLite's read transaction. Not under the store's lock: it may read for long."""
        try:
            with self._engine.connect() as conn:
                if conn.dialect.name == "sqlite":
                    conn.exec_driver_sql("BEGIN")  # the driver would not begin one for reads
                else:
                    conn.execution_options(isolation_level="REPEATABLE READ")
                yield conn
        except SQLAlchemyError as exc:
            raise operation_failed(exc, redact(self._engine.url)) from exc

    @contextlib.contextmanager
    def _connected(self, connect: Callable[[], contextlib.AbstractContextManager[Connection]]
                   ) -> Iterator[Connection]:
        """``connect()`` (the engine's ``begin`` or ``connect``) under the lock, errors
        wrapped: the one path of the Core methods above."""
        with self._lock:
            try:
                with connect() as conn:
                    yield conn
            except SQLAlchemyError as exc:
                raise operation_failed(exc, redact(self._engine.url)) from exc

    def _count(self, table: Any, where: tuple[Any, ...]) -> int:
        """How many rows of ``table`` meet every condition of ``where``."""
        with self._reading() as conn:
            return int(conn.execute(select(func.count()).select_from(table)
                                    .where(*where)).scalar_one())

    def _upsert(self) -> Any:
        """The dialect's ``insert`` that has ``on_conflict_do_update``/``_do_nothing``."""
        return upsert_insert(self._engine)
