"""Store methods for data-source shapes (mixed into ``Store``): what the ``datasource`` probe
compares answers against, and what ``envcheck accept-schema`` moves.

Each observed shape is one row per (source, fingerprint), upserted in one statement, so
concurrent probers (CLI and daemon) count into the same row. The accepted shape is the row
with the newest ``accepted_at``; accepting never deletes, so the history stays. Reads return
frozen :class:`DataSourceShape` values, built from prebuilt Core statements: the accepted
shape is read on every probe of every source, and ORM rows cost more than the query.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, exists, select, update

from envcheck.store.access import StoreAccess
from envcheck.store.core_tables import SHAPES, columns
from envcheck.store.tables.shapes import DataSourceShape

# DataSourceShape is the shape table's record (in ``tables.shapes``), named here too for its
# readers.
__all__ = ["FIRST_SEEN_ACTOR", "DataSourceShape", "ShapeRecords"]

FIRST_SEEN_ACTOR = "envcheck (first shape seen)"


_COLUMNS = columns(SHAPES, DataSourceShape)
_SOURCE = SHAPES.c.source_id == bindparam("source_id")
_ACCEPTED = (select(*_COLUMNS).where(_SOURCE, SHAPES.c.accepted_at.is_not(None))
             .order_by(SHAPES.c.accepted_at.desc(), SHAPES.c.id.desc()).limit(1))
_BY_RECENCY = select(*_COLUMNS).where(_SOURCE).order_by(SHAPES.c.last_seen.desc(),
                                                        SHAPES.c.id.desc())
_ONE = select(*_COLUMNS).where(_SOURCE, SHAPES.c.fingerprint == bindparam("fingerprint"))


class ShapeRecords(StoreAccess):
    def _read(self, query: Any, **params: str) -> list[DataSourceShape]:
        with self._transaction() as conn:
            return [DataSourceShape(**row._mapping) for row in conn.execute(query, params)]

    def observe_shape(self, source_id: str, fingerprint: str, shape: Any, at: datetime, *,
                      count: int = 1, auto_accept: bool = False) -> DataSourceShape:
        """Record ``count`` samples with this shape at ``at``; with ``auto_accept``, accept
        it if the source has no accepted shape yet (the first shape ever seen)."""
        stmt = self._upsert()(SHAPES).values(source_id=source_id, fingerprint=fingerprint,
                                             shape=shape, first_seen=at, last_seen=at,
                                             seen=count)
        stmt = stmt.on_conflict_do_update(
            index_elements=["source_id", "fingerprint"],
            set_={"last_seen": stmt.excluded.last_seen, "seen": SHAPES.c.seen + count},
        )
        with self._transaction() as conn:
            conn.execute(stmt)
            if auto_accept:
                other = SHAPES.alias("other")
                none_accepted = ~exists().where(other.c.source_id == source_id,
                                                other.c.accepted_at.is_not(None))
                conn.execute(
                    update(SHAPES)
                    .where(SHAPES.c.source_id == source_id,
                           SHAPES.c.fingerprint == fingerprint, none_accepted)
                    .values(accepted_at=at, accepted_by=FIRST_SEEN_ACTOR))
            row = conn.execute(_ONE, {"source_id": source_id, "fingerprint": fingerprint}).one()
        return DataSourceShape(**row._mapping)

    def accepted_shape(self, source_id: str) -> DataSourceShape | None:
        found = self._read(_ACCEPTED, source_id=source_id)
        return found[0] if found else None

    def shapes(self, source_id: str) -> list[DataSourceShape]:
        """Every shape seen for the source, the most recently seen first."""
        return self._read(_BY_RECENCY, source_id=source_id)

    def latest_shape(self, source_id: str) -> DataSourceShape | None:
        """The shape the source answered with most recently."""
        found = self.shapes(source_id)
        return found[0] if found else None

    def accept_shape(self, source_id: str, actor: str, fingerprint: str | None = None,
                     at: datetime | None = None) -> DataSourceShape:
        """Accept ``fingerprint`` (default: the latest observed shape) as the source's shape;
        raises LookupError if there is no such shape."""
        if fingerprint is None:
            latest = self.latest_shape(source_id)
            fingerprint = latest.fingerprint if latest is not None else None
        params = {"source_id": source_id, "fingerprint": fingerprint}
        with self._transaction() as conn:
            changed = conn.execute(
                update(SHAPES).where(SHAPES.c.source_id == source_id,
                                     SHAPES.c.fingerprint == fingerprint)
                .values(accepted_at=at or datetime.now(UTC), accepted_by=actor)).rowcount
            if not changed:
                raise LookupError(f"no shape {fingerprint or 'observed'} for data source "
                                  f"{source_id!r}")
            row = conn.execute(_ONE, params).one()
        return DataSourceShape(**row._mapping)
