"""Copy one store into another (an embedded SQLite store into PostgreSQL, when a site outgrows
one file): every table, in batches, resumable, then verified.

Tables are copied parents first (foreign keys), each in primary-key order, one transaction per
batch. Rows that never change once written (results, transitions, incidents) continue after the
highest key the target already holds, so a copy stopped half way (a killed process, a lost
connection) picks up where it stopped; every other table is small (one row per environment,
suite, run, webhook...) and is upserted whole, so a re-run also carries what changed since.
PostgreSQL's id sequences are then moved past the copied ids, so the target's next insert
does not collide with a copied row.

Verified by each table's row count, the sums of the rollout counters, and a checksum of the
environments' states (state, reason, quarantine, rollout evidence) computed the same way on
both sides. A live daemon keeps writing: stop it
(or copy again once it is stopped) before switching to the target.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, Table, func, select, text, tuple_
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import SQLModel

from envcheck.core.errors import StoreError
from envcheck.store.database import redact, upsert_insert
from envcheck.store.store import Store

__all__ = ["APPEND_ONLY", "CopyReport", "TableCopy", "copy_store", "counter_sums",
           "state_checksum"]

# Rows written once and never updated: a resumed copy continues after the target's last key.
APPEND_ONLY = frozenset({"probe_result", "transition", "incident"})
BATCH_ROWS = 2000
# What a state is, for the checksum: the feed's answer for each environment.
_STATE_COLUMNS = ("env_id", "suite", "state", "reason", "image_digest", "quarantined",
                  "q_source", "q_actor", "q_reason", "q_evidence", "rollouts")
# Tables whose rows are counters that add (a row count says nothing of their values): the sums
# of their integer counters, compared on both sides (floats sum differently per backend).
_COUNTED = {"rollout_rollup": ("count", "reward_n", "reward_zero", "reward_one",
                               "sandbox_start_s_n", "agent_s_n", "verifier_s_n"),
            "rollout_unknown": ("count",)}


@dataclass(slots=True)
class TableCopy:
    name: str
    source_rows: int = 0
    target_rows: int = 0
    copied: int = 0  # rows written by this run (inserted or upserted)
    skipped: int = 0  # append-only rows the target already held from an earlier run

    @property
    def matches(self) -> bool:
        return self.source_rows == self.target_rows


@dataclass(slots=True)
class CopyReport:
    source: str
    target: str
    tables: list[TableCopy] = field(default_factory=list)
    source_states: str = ""
    target_states: str = ""
    source_counts: dict[str, int] = field(default_factory=dict)
    target_counts: dict[str, int] = field(default_factory=dict)
    complete: bool = True  # False when stopped early (``max_rows``)

    @property
    def verified(self) -> bool:
        return (self.complete and all(t.matches for t in self.tables)
                and self.source_states == self.target_states
                and self.source_counts == self.target_counts)

    def problems(self) -> list[str]:
        found = [f"{t.name}: {t.source_rows} row(s) in the source, {t.target_rows} in the "
                 "target" for t in self.tables if not t.matches]
        if self.source_states != self.target_states:
            found.append(f"the states differ (checksum {self.source_states[:12]} in the "
                         f"source, {self.target_states[:12]} in the target)")
        found += [f"{name}: {self.source_counts[name]} in the source, "
                  f"{self.target_counts.get(name)} in the target"
                  for name in sorted(self.source_counts)
                  if self.source_counts[name] != self.target_counts.get(name)]
        if not self.complete:
            found.append("stopped before the end: run the copy again to continue")
        return found


def _tables_in_order() -> list[Table]:
    return list(SQLModel.metadata.sorted_tables)


def _count(engine: Engine, table: Table) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def _batches(engine: Engine, table: Table, after: tuple[Any, ...] | None,
             size: int) -> Iterator[list[dict[str, Any]]]:
    """The table's rows in primary-key order, after ``after``, ``size`` at a time (keyset
    pagination: each batch is one short read, whatever the table's size)."""
    keys = list(table.primary_key.columns)
    key = tuple_(*keys) if len(keys) > 1 else keys[0]
    while True:
        query = select(table).order_by(*keys).limit(size)
        if after is not None:
            query = query.where(key > (tuple_(*after) if len(keys) > 1 else after[0]))
        with engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(query)]
        if not rows:
            return
        yield rows
        after = tuple(rows[-1][c.name] for c in keys)


def _last_key(engine: Engine, table: Table) -> tuple[Any, ...] | None:
    keys = list(table.primary_key.columns)
    with engine.connect() as conn:
        row = conn.execute(select(*keys).order_by(*(k.desc() for k in keys)).limit(1)).first()
    return tuple(row) if row is not None else None


def _write(target: Engine, table: Table, rows: list[dict[str, Any]], upsert: bool) -> None:
    insert = upsert_insert(target)(table)
    keys = [c.name for c in table.primary_key.columns]
    if upsert and len(keys) < len(table.columns):
        statement = insert.on_conflict_do_update(
            index_elements=keys,
            set_={c.name: insert.excluded[c.name] for c in table.columns if c.name not in keys})
    else:
        statement = insert.on_conflict_do_nothing(index_elements=keys)
    with target.begin() as conn:
        conn.execute(statement, rows)


def _advance_sequences(target: Engine, tables: Sequence[Table]) -> None:
    """Move PostgreSQL's id sequences past the copied ids (SQLite needs nothing: its next
    rowid follows the largest one)."""
    if target.dialect.name != "postgresql":
        return
    with target.begin() as conn:
        for table in tables:
            keys = list(table.primary_key.columns)
            if len(keys) != 1 or not keys[0].autoincrement or keys[0].type.python_type is not int:
                continue
            name, column = table.name, keys[0].name
            conn.execute(text(
                f"SELECT setval(pg_get_serial_sequence('{name}', '{column}'), "
                f"COALESCE((SELECT MAX({column}) FROM {name}), 0) + 1, false)"))


def state_checksum(engine: Engine) -> str:
    """A SHA-256 over every environment's state, in env_id order: equal on two stores exactly
    when the feed gives the same answers on both."""
    table = SQLModel.metadata.tables["env_state"]
    digest = hashlib.sha256()
    with engine.connect() as conn:
        for row in conn.execute(select(*(table.c[n] for n in _STATE_COLUMNS))
                                .order_by(table.c.env_id)):
            # JSON values canonical: the same object reads back alike from either backend
            digest.update(repr(tuple(json.dumps(v, sort_keys=True)
                                     if isinstance(v, dict | list) else v
                                     for v in row)).encode())
            digest.update(b"\n")
    return digest.hexdigest()


def counter_sums(engine: Engine) -> dict[str, int]:
    """``table.column`` -> the sum of that counter column over the table (:data:`_COUNTED`)."""
    sums: dict[str, int] = {}
    with engine.connect() as conn:
        for name, columns in _COUNTED.items():
            table = SQLModel.metadata.tables[name]
            row = conn.execute(select(*(func.coalesce(func.sum(table.c[c]), 0)
                                        for c in columns))).one()
            sums.update({f"{name}.{c}": int(v) for c, v in zip(columns, row, strict=True)})
    return sums


def copy_store(source: Store, target: Store, *, batch_rows: int = BATCH_ROWS,
               max_rows: int | None = None,
               progress: Callable[[str, int], None] | None = None) -> CopyReport:
    """Copy ``source`` into ``target`` (both migrated to the same schema by opening them) and
    verify. ``max_rows`` stops after about that many rows, as an interrupted run would
    (tests); ``progress(table, rows)`` is called after each batch."""
    src, dst = source.engine, target.engine
    report = CopyReport(redact(src.url), redact(dst.url))
    tables = _tables_in_order()
    budget = max_rows
    try:
        for table in tables:
            done = TableCopy(table.name)
            report.tables.append(done)
            append_only = table.name in APPEND_ONLY
            start = _last_key(dst, table) if append_only else None
            if start is not None:
                with src.connect() as conn:
                    keys = list(table.primary_key.columns)
                    key = tuple_(*keys) if len(keys) > 1 else keys[0]
                    bound = tuple_(*start) if len(keys) > 1 else start[0]
                    done.skipped = int(conn.execute(select(func.count()).select_from(table)
                                                    .where(key <= bound)).scalar_one())
            for rows in _batches(src, table, start, batch_rows):
                if budget is not None and budget <= 0:
                    report.complete = False
                    break
                _write(dst, table, rows, upsert=not append_only)
                done.copied += len(rows)
                if budget is not None:
                    budget -= len(rows)
                if progress is not None:
                    progress(table.name, done.copied)
            if not report.complete:
                break
        _advance_sequences(dst, tables)
        for done in report.tables:
            table = SQLModel.metadata.tables[done.name]
            done.source_rows, done.target_rows = _count(src, table), _count(dst, table)
        report.source_states, report.target_states = state_checksum(src), state_checksum(dst)
        report.source_counts, report.target_counts = counter_sums(src), counter_sums(dst)
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise StoreError(f"copying {report.source} to {report.target} failed: {reason}; "
                         "run the copy again to continue") from None
    return report
