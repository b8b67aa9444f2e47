"""Result rows written in bulk past the store's API, in its exact shape: SQLite through the
driver's ``executemany`` with the values SQLAlchemy's own column types make (datetimes as
text, JSON as text), PostgreSQL by ``COPY``. A bench that needs millions of results a
simulated hour cannot pay an ORM object and a commit for each; :func:`same_shape` checks
that a row written here reads back as the store's own ``record`` writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Engine, insert

from envcheck.store import Store
from envcheck.store.core_tables import RESULTS, RUNS
from envcheck.store.database import create_store_engine

__all__ = ["BulkWriter", "same_shape"]


class BulkWriter:
    """Writes check runs and result rows (tuples of ``columns``, JSON already text) to the
    store at ``url``, each call one transaction, on an engine of its own (so its settings
    never reach the store's connections)."""

    def __init__(self, url: str, columns: Sequence[str]) -> None:
        self.engine: Engine = create_store_engine(url)
        self.columns = tuple(columns)
        self.sqlite = self.engine.dialect.name == "sqlite"
        dialect = self.engine.dialect
        # SQLite: each column's value as SQLAlchemy binds it (JSON arrives already text)
        self._convert: list[Callable[[Any], Any] | None] = [
            None if name in ("evidence", "details") else
            RESULTS.c[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in self.columns]
        names = ", ".join(self.columns)
        self._sql = (f"INSERT INTO probe_result ({names}) VALUES "
                     f"({', '.join('?' for _ in self.columns)})" if self.sqlite else
                     f"COPY probe_result ({names}) FROM STDIN")

    def runs(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            with self.engine.begin() as conn:
                conn.execute(insert(RUNS), rows)

    def results(self, rows: Sequence[tuple[Any, ...]]) -> None:
        with self.engine.begin() as conn:
            raw: Any = conn.connection.driver_connection
            if self.sqlite:
                converters = [(i, c) for i, c in enumerate(self._convert) if c is not None]

                def converted(row: tuple[Any, ...]) -> tuple[Any, ...]:
                    values = list(row)
                    for i, convert in converters:
                        values[i] = convert(values[i])
                    return tuple(values)

                raw.executemany(self._sql, map(converted, rows))
            else:
                with raw.cursor() as cur, cur.copy(self._sql) as copy:
                    for row in rows:
                        copy.write_row(row)

    def close(self) -> None:
        self.engine.dispose()


def same_shape(store: Store, writer: BulkWriter, run_id: str, result: Any,
               row: tuple[Any, ...]) -> list[str]:
    """Write ``result`` through ``Store.record`` and ``row`` (the same result) through
    ``writer``, read both back as stored, every column but the id (the driver's values:
    SQLite's text, PostgreSQL's JSON as its text), and delete them; the columns that differ
    (none: the fast path writes what the store writes, columns it leaves out included)."""
    first = store.record(run_id, result)
    writer.results([row])
    names = [c.name for c in RESULTS.columns if c.name != "id"]
    shown = ", ".join(f"{n}::text" if not writer.sqlite and n in ("evidence", "details")
                      else n for n in names)
    with writer.engine.begin() as conn:
        raw: Any = conn.connection.driver_connection
        mark = "?" if writer.sqlite else "%s"
        cur = raw.cursor()
        try:
            cur.execute(f"SELECT {shown} FROM probe_result WHERE id >= {mark} ORDER BY id",
                        (first,))
            stored = cur.fetchall()
            cur.execute(f"DELETE FROM probe_result WHERE id >= {mark}", (first,))
        finally:
            cur.close()
    a, b = stored
    return [n for n, x, y in zip(names, a, b, strict=True) if x != y]
