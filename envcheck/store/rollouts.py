"""Store methods for the training run's rollouts (mixed into ``Store``): a batch is added into
counters in one transaction, never kept record by record.

- **Once per sequence number.** Each producer's sequence numbers already counted are kept as
  sorted ranges (``rollout_producer.seen``, :mod:`envcheck.store.rollout_counts`); a record
  whose number is among them (a retried batch, a batch sent twice) adds nothing.
- **Counters.** Records of known environments add into ``rollout_rollup`` rows per hour,
  environment, image digest and outcome (an upsert adding each counter), so the store's size
  per environment-hour is fixed whatever the volume; records of environments the catalogue
  does not hold (or no longer holds) are counted per hour with a few ids to show.
- **All or nothing, durable.** A batch is counted in one transaction, committed before the
  caller is answered. Batches that arrive while one is being written are written together
  after it, in one transaction (:mod:`envcheck.store.groupcommit`: one commit and one write of
  each hot page for all of them; should it fail, each is written again alone). One group at a
  time, whichever process writes: SQLite's write lock taken at the start (``BEGIN
  IMMEDIATE``, so no writer comes between the read of a producer's ranges and their write),
  a transaction-level advisory lock on PostgreSQL.
- **Known ids cached.** The ids of current environments are kept in memory and re-read only
  when the feed's generation (the newest transition id) moved: every retirement writes a
  transition in the transaction that retires, so a retired id is never taken for a known one;
  an id the cache lacks (an environment synced since) is looked up before it is called
  unknown.

Retention (hour rows folded into day rows, old rows deleted) is part of the prune
(:mod:`envcheck.store.rollout_retention`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Dialect, bindparam, func
from sqlalchemy import select as sa_select

from envcheck.core.rollouts import Rollout
from envcheck.store.access import StoreAccess
from envcheck.store.core_tables import (
    ENVS,
    HELD_ROLLOUTS,
    PRODUCERS,
    ROLLOUTS,
    UNKNOWN_ROLLOUTS,
)
from envcheck.store.groupcommit import GroupCommit
from envcheck.store.retention import day_start
from envcheck.store.rollout_counts import Bucket, BucketKey, count, fresh, hour_of
from envcheck.store.sql import GENERATION_SQL
from envcheck.store.tables.columns import now
from envcheck.store.tables.rollouts import ROLLOUT_COUNTERS, ROLLOUT_KEY
from envcheck.store.tables.rollups import RollupPeriod

__all__ = ["UNKNOWN_IDS_KEPT", "CountersUpsert", "IngestOutcome", "KnownEnvs", "RolloutIngest",
           "RolloutRecords", "counters_upsert", "one_batch_at_a_time"]

UNKNOWN_IDS_KEPT = 20  # unknown environment ids kept per hour, to show
_IDS_BATCH = 500  # ids per IN list: under SQLite's limit of bound parameters
_PG_INGEST_LOCK = 0x656E76726F6C  # "envrol": one batch counted at a time


@dataclass(frozen=True, slots=True)
class IngestOutcome:
    """What a batch added: ``counted`` records of known environments, ``duplicates`` already
    counted before (or twice in the batch), ``unknown`` naming no environment of the
    catalogue (a few of their ids in ``unknown_ids``)."""

    received: int
    counted: int
    duplicates: int
    unknown: int
    unknown_ids: tuple[str, ...] = ()


@dataclass(slots=True)
class KnownEnvs:
    """The current environments' ids as of the feed's ``generation`` (see above)."""

    generation: int | None = None
    ids: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(slots=True)
class RolloutIngest:
    """What a store keeps between batches: the known ids, and the batches being written
    together (:class:`~envcheck.store.groupcommit.GroupCommit`)."""

    known: KnownEnvs = field(default_factory=KnownEnvs)
    group: GroupCommit[Sequence[Rollout], IngestOutcome] = field(default_factory=GroupCommit)


@dataclass(frozen=True, slots=True)
class CountersUpsert:
    """The counters' upsert compiled once for a dialect and run by the driver's executemany
    (per row, SQLAlchemy's parameter processing cost more than the database's insert): rows
    as tuples in the table's column order, times as the driver takes them."""

    sql: str
    names: tuple[str, ...] | None  # None: positional (SQLite), else the names (PostgreSQL)
    datetime_param: Callable[[datetime], Any]

    def rows(self, buckets: dict[BucketKey, Bucket], period: RollupPeriod) -> list[Any]:
        """The rows of ``buckets``, sorted by key: concurrent writers of the same rows take
        their locks in one order, and each page is written once."""
        param, kind = self.datetime_param, period.value
        starts: dict[datetime, Any] = {}
        rows: list[Any] = []
        for key in sorted(buckets):  # the key's order: neighbouring rows one after another
            start, env_id, digest, outcome = key
            b = buckets[key]
            at = starts.get(start)
            if at is None:
                at = starts[start] = param(start)
            rows.append((env_id, at, digest, outcome, kind, *b[:-2], param(b[-2]),
                         param(b[-1])))
        if self.names is not None:
            return [dict(zip(self.names, row, strict=True)) for row in rows]
        return rows


_UPSERTS: dict[str, CountersUpsert] = {}


def counters_upsert(dialect: Dialect) -> CountersUpsert:
    """An upsert into ``rollout_rollup`` that adds each counter to the row's and keeps the
    earliest ``first_at`` and latest ``last_at``: rows added in any order and any split give
    the same row (the prune's fold into day rows uses it too)."""
    key = f"{dialect.name}+{dialect.driver}"  # the paramstyle is the driver's
    done = _UPSERTS.get(key)
    if done is not None:
        return done
    from sqlalchemy.dialects import postgresql, sqlite

    on_sqlite = dialect.name == "sqlite"
    insert = sqlite.insert if on_sqlite else postgresql.insert
    greatest, least = (func.max, func.min) if on_sqlite else (func.greatest, func.least)
    columns = tuple(ROLLOUTS.columns.keys())
    stmt = insert(ROLLOUTS).values({name: bindparam(name) for name in columns})
    stmt = stmt.on_conflict_do_update(index_elements=list(ROLLOUT_KEY), set_={
        **{name: ROLLOUTS.c[name] + stmt.excluded[name] for name in ROLLOUT_COUNTERS},
        "first_at": least(ROLLOUTS.c.first_at, stmt.excluded.first_at),
        "last_at": greatest(ROLLOUTS.c.last_at, stmt.excluded.last_at)})
    compiled = stmt.compile(dialect=dialect)
    if compiled.positiontup is not None and tuple(compiled.positiontup) != columns:
        raise RuntimeError("the counters' upsert binds its columns out of the table's order")
    done = _UPSERTS[key] = CountersUpsert(
        compiled.string, None if compiled.positiontup is not None else columns,
        _datetime_param(dialect))
    return done


def _datetime_param(dialect: Dialect) -> Callable[[datetime], Any]:
    """How a time of offset 0 (what :func:`~envcheck.store.rollout_counts.count` makes) is
    bound as the column type would bind it: on SQLite, the text SQLAlchemy stores, made by
    ``isoformat`` (several times quicker than its own processor, and checked against it here:
    the key compares as text)."""
    process = ROLLOUTS.c.hour.type.dialect_impl(dialect).bind_processor(dialect)
    if process is None:
        return lambda at: at

    def text(at: datetime) -> str:
        return at.isoformat(" ", "microseconds")[:26]  # without its "+00:00"

    probe = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    return text if process(probe) == text(probe) else process


def one_batch_at_a_time(conn: Connection) -> None:
    """Take the lock that makes writes of the counters one at a time, for the rest of
    ``conn``'s transaction (its first statement)."""
    if conn.dialect.name == "sqlite":
        # pysqlite would begin (deferred) only at the first write, after the reads
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_INGEST_LOCK})")


class RolloutRecords(StoreAccess):
    _rollout_ingest: RolloutIngest

    def record_rollouts(self, rollouts: Sequence[Rollout]) -> IngestOutcome:
        """Count one batch, in one transaction: all of it or (on an error) none of it,
        committed when this returns. Batches that arrive together are written together."""
        return self._rollout_ingest.group.run(rollouts, self._record_group)

    def _record_group(self, batches: Sequence[Sequence[Rollout]]) -> list[IngestOutcome]:
        """Count ``batches`` in one transaction, in order: a record of a later batch is a
        duplicate of an earlier one's as it would be had they come one by one."""
        outcomes: list[IngestOutcome] = []
        counted: list[Rollout] = []
        unknown: list[Rollout] = []
        with self._transaction() as conn:
            one_batch_at_a_time(conn)
            seen = self._seen(conn, sorted({r.producer for b in batches for r in b}))
            changed: dict[str, list[list[int]]] = {}
            fresh_ones = []
            for batch in batches:
                new, ranges = fresh(batch, seen)
                seen.update(ranges)
                changed.update(ranges)
                fresh_ones.append(new)
            known = self._known_ids(conn, {r.env_id for new in fresh_ones for r in new})
            for batch, new in zip(batches, fresh_ones, strict=True):
                mine = [r for r in new if r.env_id in known]
                strangers = [r for r in new if r.env_id not in known]
                counted += mine
                unknown += strangers
                shown = tuple(sorted({r.env_id for r in strangers}))[:UNKNOWN_IDS_KEPT]
                outcomes.append(IngestOutcome(len(batch), len(mine), len(batch) - len(new),
                                              len(strangers), shown))
            if counted:
                upsert = counters_upsert(conn.dialect)
                conn.exec_driver_sql(upsert.sql, upsert.rows(count(counted), RollupPeriod.HOUR))
            if unknown:
                self._count_unknown(conn, unknown)
            if changed:
                self._keep_seen(conn, changed)
        return outcomes

    # --- the parts of one batch ---------------------------------------------------------

    def _seen(self, conn: Connection, producers: list[str]) -> dict[str, list[list[int]]]:
        query = sa_select(PRODUCERS.c.producer, PRODUCERS.c.seen).where(
            PRODUCERS.c.producer.in_(producers))
        return {p: [list(x) for x in seen or []] for p, seen in conn.execute(query)}

    def _known_ids(self, conn: Connection, ids: set[str]) -> set[str]:
        """Those of ``ids`` naming a current (not retired) environment."""
        cache = self._rollout_ingest.known
        generation = conn.exec_driver_sql(GENERATION_SQL).scalar()
        with cache.lock:
            if generation != cache.generation:
                current = sa_select(ENVS.c.id).where(ENVS.c.retired_at.is_(None))
                cache.ids = {i for (i,) in conn.execute(current)}
                cache.generation = generation
            missing = sorted(ids - cache.ids)
            for start in range(0, len(missing), _IDS_BATCH):
                query = sa_select(ENVS.c.id).where(
                    ENVS.c.id.in_(missing[start:start + _IDS_BATCH]),
                    ENVS.c.retired_at.is_(None))
                cache.ids.update(i for (i,) in conn.execute(query))
            return ids & cache.ids

    def _count_unknown(self, conn: Connection, unknown: Sequence[Rollout]) -> None:
        by_hour: dict[datetime, list[str]] = {}
        for r in unknown:
            by_hour.setdefault(hour_of(r.at), []).append(r.env_id)
        for hour, ids in sorted(by_hour.items()):
            kept = conn.execute(sa_select(UNKNOWN_ROLLOUTS.c.ids)
                                .where(UNKNOWN_ROLLOUTS.c.hour == hour)).scalar()
            shown = list(kept or [])
            for env_id in sorted(set(ids) - set(shown))[:UNKNOWN_IDS_KEPT - len(shown)]:
                shown.append(env_id)
            stmt = self._upsert()(UNKNOWN_ROLLOUTS).values(hour=hour, count=len(ids),
                                                           ids=shown)
            conn.execute(stmt.on_conflict_do_update(index_elements=["hour"], set_={
                "count": UNKNOWN_ROLLOUTS.c.count + stmt.excluded["count"],
                "ids": stmt.excluded.ids}))

    def _keep_seen(self, conn: Connection, ranges: dict[str, list[list[int]]]) -> None:
        at = now()
        stmt = self._upsert()(PRODUCERS)
        stmt = stmt.on_conflict_do_update(index_elements=["producer"],
                                          set_={"seen": stmt.excluded.seen,
                                                "updated_at": stmt.excluded.updated_at})
        conn.execute(stmt, [{"producer": p, "seen": r, "updated_at": at}
                            for p, r in sorted(ranges.items())])

    # --- reads --------------------------------------------------------------------------

    def rollout_rows(self, env_ids: Sequence[str] | None = None,
                     since: datetime | None = None) -> list[Any]:
        """Counter rows (every column of ``rollout_rollup``) ordered by environment, then
        start: of ``env_ids`` (None: every environment), from the hour of ``since`` on.
        ``hour`` is each row's start, ``period`` says whether it counts that hour or the day
        starting there (hours past their retention, folded by the prune); each rollout is in
        one row, so add them all. A day row counts when its day starts at or after
        ``since``'s hour."""
        query = sa_select(ROLLOUTS)
        if since is not None:
            query = query.where(ROLLOUTS.c.hour >= hour_of(since))
        query = query.order_by(ROLLOUTS.c.env_id, ROLLOUTS.c.hour, ROLLOUTS.c.image_digest,
                               ROLLOUTS.c.outcome, ROLLOUTS.c.period)
        with self._reading() as conn:
            if env_ids is None:
                return list(conn.execute(query))
            ordered, out = sorted(set(env_ids)), list[Any]()
            for start in range(0, len(ordered), _IDS_BATCH):
                part = ordered[start:start + _IDS_BATCH]
                out.extend(conn.execute(query.where(ROLLOUTS.c.env_id.in_(part))))
            return out

    def rollout_envs_since(self, at: datetime) -> set[str]:
        """Environments with a rollout counted at or after ``at``."""
        query = (sa_select(ROLLOUTS.c.env_id).distinct()
                 .where(ROLLOUTS.c.hour >= day_start(hour_of(at)), ROLLOUTS.c.last_at >= at))
        with self._reading() as conn:
            return {row[0] for row in conn.execute(query)}

    def rollout_totals(self, since: datetime) -> list[tuple[datetime, str, int]]:
        """(start, outcome, rollouts) of every environment together, from the hour of
        ``since`` on: the fleet's counts, a row per hour (or day row's start) and outcome."""
        query = (sa_select(ROLLOUTS.c.hour, ROLLOUTS.c.outcome, func.sum(ROLLOUTS.c["count"]))
                 .where(ROLLOUTS.c.hour >= hour_of(since))
                 .group_by(ROLLOUTS.c.hour, ROLLOUTS.c.outcome)
                 .order_by(ROLLOUTS.c.hour, ROLLOUTS.c.outcome))
        with self._reading() as conn:
            return [(hour, outcome, int(n)) for hour, outcome, n in conn.execute(query)]

    def hold_rollout_hours(self, hours: Iterable[datetime], incident_id: int | None) -> None:
        """Keep these hours' rollouts from the health model (an incident's); an hour held
        already stays with its first incident."""
        rows = [{"hour": hour_of(h), "incident_id": incident_id} for h in set(hours)]
        if not rows:
            return
        stmt = self._upsert()(HELD_ROLLOUTS).on_conflict_do_nothing(index_elements=["hour"])
        with self._transaction() as conn:
            conn.execute(stmt, rows)

    def held_rollout_hours(self, since: datetime | None = None) -> set[datetime]:
        """The hours held (from the hour of ``since`` on; None: all)."""
        query = sa_select(HELD_ROLLOUTS.c.hour)
        if since is not None:
            query = query.where(HELD_ROLLOUTS.c.hour >= hour_of(since))
        with self._reading() as conn:
            return {row[0] for row in conn.execute(query)}

    def unknown_rollouts(self, since: datetime | None = None) -> tuple[int, list[str]]:
        """Rollouts that named no environment of the catalogue since ``since`` (every hour
        kept: None), and a few of their ids."""
        query = sa_select(UNKNOWN_ROLLOUTS.c.count, UNKNOWN_ROLLOUTS.c.ids)
        if since is not None:
            query = query.where(UNKNOWN_ROLLOUTS.c.hour >= hour_of(since))
        total, ids = 0, list[str]()
        with self._reading() as conn:
            for n, kept in conn.execute(query.order_by(UNKNOWN_ROLLOUTS.c.hour)):
                total += n
                ids.extend(i for i in kept or [] if i not in ids)
        return total, ids[:UNKNOWN_IDS_KEPT]
