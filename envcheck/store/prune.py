"""Pruning (mixed into ``Store``): raw results past their retention folded into the rollups
and deleted, old rollups and empty runs deleted, the rollout counters' hour rows folded into
day rows and old ones deleted (:mod:`envcheck.store.rollout_retention`), free pages given back
(SQLite).

What is never pruned, so that no state, allowlist or transition changes:

- the newest :data:`~envcheck.store.feed.OBSERVATION_WINDOW` results of each environment and
  probe kind: all the health model reads (:meth:`~envcheck.store.Store.observations`), so its
  SPRT state and Wilson counts come out the same after a prune. The window only moves forward
  (a new result pushes the oldest out for good), so what is outside it stays outside;
- every result a transition or a quarantine cites as evidence;
- hence the newest result of every environment and kind (what the latest-result readers,
  the metrics' last success and staleness and the dashboard's filters read).

**Found through the index, not by ranking.** The results of each environment and kind are
walked newest first through their index (``env_id, kind, started_at, id``): the 400th is the
window's edge, and only results older than it and past their retention are read, a few
hundred (environment, kind) pairs a query, the pairs themselves found by seeks in that index
(a loose index scan). Ranking every result instead reads the whole table each hour: at
10,000 environments (10.7 million results kept) 300 s against 2 s, found the same
(bench/store_month.py); what remains of a prune is folding and deleting what goes.

A result past its retention and outside both is folded and deleted in one transaction
(:mod:`envcheck.store.rollups`): batches of ``Retention.batch`` rows, committed one by one, so
no write lock is held for long and a prune stopped anywhere leaves every result counted once.

**PostgreSQL: batched deletes, not partitions.** Partitions by time would drop old results
for free, but retention is not by time alone: the health model's window and the evidence of
transitions live in old partitions for months, so no partition could ever be dropped whole.
Deleting in small batches leaves dead rows that autovacuum reclaims for reuse as it goes;
migration 0005 has it visit these tables after 1% of their rows changed (not the default 20%),
so a table of tens of millions keeps up. **SQLite** gives freed pages back to the file system by
``PRAGMA incremental_vacuum``, in steps, after each prune; stores created before need one full
``VACUUM`` to turn that on (:meth:`RetentionRecords.vacuum`, ``envcheck store prune --vacuum``).

**SQLite keeps a reserve of free pages.** Giving a page back is not free: incremental vacuum
moves a live page from the end of the file into each hole (read it, write it, rewrite its
parent's pointer and the pointer map) so that the end can be cut off, and each page goes
through the WAL and the checkpoint. At steady state an hourly prune frees about what the next
hour's inserts take (1.2% of the file at 1,000 environments: 7,000 pages of 590,000), so
giving all of it back every hour only moved pages for the file to grow again by as much. On
that store at steady state (bench/store_month.py, 14,400 results an hour), keeping the
reserve took a prune from 8.1 s to 5.9 s (median of three, 2.1 to 1.8 CPU seconds): the
vacuum itself and the WAL and checkpoint traffic of the moved pages, with the file in the
page cache; more once the file outgrows memory and every moved page is a read from disk.
What remains is spread: the index walk a third, the deletes and their commits two fifths,
the fold in Python a quarter (folding in SQL instead was no cheaper). So a prune gives back
only the free pages beyond :data:`FREE_RESERVE` of the pages in use, which the next hours of
inserts reuse (SQLite takes new pages from the free list first): the file stays flat at most
that much above what it holds, and a prune that frees more than the reserve (a shorter
retention, a fleet that shrank) gives the rest back as before. ``envcheck store prune
--give-back-all`` gives back every free page.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Delete,
    Float,
    Integer,
    Select,
    String,
    bindparam,
    delete,
    exists,
    func,
    select,
    text,
)

from envcheck.core.results import DEGRADED_REASONS, Status
from envcheck.store.core_tables import INCIDENTS, MARKS, RESULTS, ROLLUPS, RUNS, STATES, TRANSITIONS
from envcheck.store.feed import OBSERVATION_WINDOW
from envcheck.store.retention import Cutoffs, PruneReport, Retention
from envcheck.store.rollout_retention import RolloutRetention
from envcheck.store.rollups import FOLD_COLUMNS, HOURLY_FROM, add_rollups, fold, hourly_from
from envcheck.store.tables.columns import UTCDateTime
from envcheck.store.tables.rollups import RollupPeriod
from envcheck.store.tables.runs import RunState

__all__ = ["RetentionRecords"]

PAIRS_PER_QUERY = 200  # (environment, kind) pairs whose old results one query reads
VACUUM_STEP = 1000  # pages (4 MiB at SQLite's default page size) per incremental vacuum step
FREE_RESERVE = 0.05  # of the file's pages, kept free for the next inserts (see above)
_PG_PRUNE_LOCK = 0x656E76707275  # "envpru": one pruner folds at a time (no rollup deadlocks)
_SHORT_LIVED = frozenset({Status.PASS.value, Status.SKIP.value})
_DEGRADED = frozenset(str(r) for r in DEGRADED_REASONS)


# Results past their retention and outside the health model's window, for the next :pairs
# (environment, kind) pairs after (:env_id, :kind) in the results' index, found by seeks in
# that index alone: the next kind of the same environment, else the first kind of the next
# environment (a loose index scan); then each pair's window edge, :skip results back from its
# newest; then the pair's results older than the edge (a range of the index), if past their
# retention: a clean pass or skip after ``passes``, the rest (failures, flaky, errors,
# degraded passes) after ``others``, never sooner (see Retention). Every pair has a row (its
# id NULL when nothing of it goes), so the caller knows where the next query starts.
_PAST_WINDOW = text("""
WITH RECURSIVE pair(n, env_id, kind) AS (
    SELECT 0, CAST(:env_id AS VARCHAR), CAST(:kind AS VARCHAR)
    UNION ALL
    SELECT pair.n + 1,
        COALESCE((SELECT r.env_id FROM probe_result AS r
                  WHERE r.env_id = pair.env_id AND r.kind > pair.kind
                  ORDER BY r.kind LIMIT 1),
                 (SELECT r.env_id FROM probe_result AS r
                  WHERE r.env_id > pair.env_id ORDER BY r.env_id LIMIT 1)),
        COALESCE((SELECT r.kind FROM probe_result AS r
                  WHERE r.env_id = pair.env_id AND r.kind > pair.kind
                  ORDER BY r.kind LIMIT 1),
                 (SELECT r.kind FROM probe_result AS r
                  WHERE r.env_id = (SELECT s.env_id FROM probe_result AS s
                                    WHERE s.env_id > pair.env_id
                                    ORDER BY s.env_id LIMIT 1)
                  ORDER BY r.kind LIMIT 1))
    FROM pair
    WHERE pair.env_id IS NOT NULL AND pair.n < :pairs
),
edge AS (
    SELECT pair.n, pair.env_id, pair.kind,
           (SELECT r.id FROM probe_result AS r
            WHERE r.env_id = pair.env_id AND r.kind = pair.kind
            ORDER BY r.started_at DESC, r.id DESC LIMIT 1 OFFSET :skip) AS id
    FROM pair
    WHERE pair.n > 0 AND pair.env_id IS NOT NULL
)
SELECT edge.n, edge.env_id AS pair_env_id, edge.kind AS pair_kind, r.id, r.run_id,
       r.env_id, r.kind, r.image_digest, r.status, r.reason, r.started_at, r.duration_s
FROM edge
LEFT JOIN probe_result AS e ON e.id = edge.id
LEFT JOIN probe_result AS r ON r.env_id = edge.env_id AND r.kind = edge.kind
    AND r.started_at <= e.started_at AND (r.started_at < e.started_at OR r.id < e.id)
    AND r.started_at < :passes
    AND (r.started_at < :others
         OR (r.status IN :short_lived AND r.reason NOT IN :degraded))
ORDER BY edge.n, r.id
""").bindparams(
    bindparam("passes", type_=UTCDateTime()), bindparam("others", type_=UTCDateTime()),
    bindparam("short_lived", sorted(_SHORT_LIVED), expanding=True),
    bindparam("degraded", sorted(_DEGRADED), expanding=True),
).columns(n=Integer, pair_env_id=String, pair_kind=String, id=Integer, run_id=String,
          env_id=String, kind=String, image_digest=String, status=String, reason=String,
          started_at=UTCDateTime, duration_s=Float)


# A batch of old rollups deleted by their rows' own ids (SQLite's rowid, PostgreSQL's ctid),
# picked in the (period, start) index, in one statement. Picked by their seven-column key and
# deleted by it, a batch was planned on PostgreSQL as 2,000 OR'ed probes of the key: a day of
# hour rows of 2,000 environments (96,000) took 87 s to delete, 4 s on SQLite. A row a fold
# updates meanwhile has a new ctid and stays (such a fold is into an hour the mark has left
# behind, which the next prune deletes).
_OLD_ROLLUPS = text("""
DELETE FROM result_rollup WHERE rowid IN (
    SELECT rowid FROM result_rollup WHERE period = :period AND start < :before LIMIT :batch)
""").bindparams(bindparam("before", type_=UTCDateTime()))
_OLD_ROLLUPS_PG = text("""
DELETE FROM result_rollup WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM result_rollup WHERE period = :period AND start < :before LIMIT :batch))
""").bindparams(bindparam("before", type_=UTCDateTime()))


class RetentionRecords(RolloutRetention):
    def prune(self, retention: Retention | None = None, now: datetime | None = None, *,
              dry_run: bool = False, give_back_all: bool = False) -> PruneReport:
        """Apply ``retention`` (default: :class:`Retention`'s defaults) as of ``now``
        (default: the clock; a simulation passes its own); ``dry_run`` counts what would go
        and changes nothing; ``give_back_all``: SQLite gives back every free page, not only
        those beyond the reserve (:data:`FREE_RESERVE`)."""
        retention = retention or Retention()
        cut = retention.cutoffs(now or datetime.now(UTC))
        report = PruneReport(dry_run=dry_run)
        # The mark first: readers switch those days to day rows before their hour rows go,
        # and results folded now skip hour rows before it.
        hours_from = self._move_hourly_mark(cut, dry_run)
        evidence = self._evidence_ids()
        pending: list[Any] = []
        doomed: Counter[str] = Counter()  # dry run: results that would go, per run
        for rows in self._past_window(cut):
            for row in rows:
                if row.id in evidence:
                    report.kept_as_evidence += 1
                    continue
                pending.append(row)
                if dry_run:
                    doomed[row.run_id] += 1
            while len(pending) >= retention.batch:
                self._fold_batch(pending[:retention.batch], hours_from, report)
                del pending[:retention.batch]
        if pending:
            self._fold_batch(pending, hours_from, report)
        report.hourly_deleted = self._delete_rollups(RollupPeriod.HOUR, hours_from,
                                                     retention.batch, dry_run)
        report.daily_deleted = self._delete_rollups(RollupPeriod.DAY, cut.daily,
                                                    retention.batch, dry_run)
        self._prune_runs(cut, retention.batch, report, doomed)
        self._prune_rollouts(cut, retention.batch, report)
        if self._engine.dialect.name == "sqlite":
            report.incremental_vacuum = self._incremental_vacuum_on()
            if not dry_run and report.incremental_vacuum:
                report.pages_freed, report.pages_kept_free = self._give_back_pages(
                    0.0 if give_back_all else FREE_RESERVE)
        return report

    # --- results ------------------------------------------------------------------------

    def _evidence_ids(self) -> set[int]:
        """Every result id a transition or a quarantine cites. Read once, at the start: one
        written later cites results of the health model's window, which no prune touches."""
        ids: set[int] = set()
        with self._reading() as conn:
            for (cited,) in conn.execute(select(TRANSITIONS.c.evidence)):
                ids.update(int(i) for i in cited or ())
            for (cited,) in conn.execute(select(STATES.c.q_evidence)):
                ids.update(int(i) for i in cited or ())
        return ids

    def _past_window(self, cut: Cutoffs) -> Iterator[Sequence[Any]]:
        """Results past their retention and outside the health model's window of their
        environment and kind (:data:`_PAST_WINDOW`), :data:`PAIRS_PER_QUERY` pairs at a
        time."""
        after = ("", "")
        while True:  # chunks of pairs until none is left, not a retry
            with self._reading() as conn:
                rows = conn.execute(_PAST_WINDOW, {
                    "env_id": after[0], "kind": after[1], "pairs": PAIRS_PER_QUERY,
                    "skip": OBSERVATION_WINDOW - 1, "passes": cut.passes,
                    "others": cut.others}).all()
            if not rows:
                return
            yield [r for r in rows if r.id is not None]
            last = rows[-1]
            if last.n < PAIRS_PER_QUERY:
                return
            after = (last.pair_env_id, last.pair_kind)

    def _fold_batch(self, rows: list[Any], hours_from: datetime, report: PruneReport
                    ) -> None:
        """Delete these results and add them to the rollups, in one transaction: the rows
        added are those the delete removed (a concurrent prune took the others)."""
        deleted: Sequence[Any] = rows
        if report.dry_run:
            values = fold(rows, hours_from)
        else:
            with self._transaction() as conn:
                if conn.dialect.name == "postgresql":
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_PRUNE_LOCK})")
                deleted = conn.execute(delete(RESULTS)
                                       .where(RESULTS.c.id.in_([r.id for r in rows]))
                                       .returning(*(RESULTS.c[n] for n in FOLD_COLUMNS))).all()
                values = fold(deleted, hours_from)
                add_rollups(conn, values)
        for value in values:
            period = value["period"]
            report.rollups_written[period] = report.rollups_written.get(period, 0) + 1
        for row in deleted:
            if row.status in _SHORT_LIVED and row.reason not in _DEGRADED:
                report.passes_deleted += 1
            else:
                report.others_deleted += 1

    # --- rollups and runs ---------------------------------------------------------------

    def _move_hourly_mark(self, cut: Cutoffs, dry_run: bool) -> datetime:
        """From when hour rollups are kept after this prune (never moving back); written
        unless ``dry_run``."""
        with self._reading() as conn:
            mark = max(hourly_from(conn), cut.hourly)
        if not dry_run:
            with self._transaction() as conn:
                stmt = self._upsert()(MARKS).values(name=HOURLY_FROM, at=mark)
                conn.execute(stmt.on_conflict_do_update(index_elements=["name"],
                                                        set_={"at": stmt.excluded.at}))
        return mark

    def _delete_rollups(self, period: RollupPeriod, before: datetime, batch: int,
                        dry_run: bool) -> int:
        old = (ROLLUPS.c.period == period.value, ROLLUPS.c.start < before)
        if dry_run:
            return self._count(ROLLUPS, old)
        sql = _OLD_ROLLUPS_PG if self._engine.dialect.name == "postgresql" else _OLD_ROLLUPS
        total = 0
        while True:  # batches until none is left, not a retry
            with self._transaction() as conn:
                gone = conn.execute(sql, {"period": period.value, "before": before,
                                          "batch": batch}).rowcount
            if not gone:
                return total
            total += gone

    def _prune_runs(self, cut: Cutoffs, batch: int, report: PruneReport,
                    doomed: Counter[str]) -> None:
        """Runs older than any kept result, left without results and without incidents
        (``doomed``: in a dry run, how many results of each run would have gone)."""
        unused = (~exists().where(RESULTS.c.run_id == RUNS.c.id),
                  ~exists().where(INCIDENTS.c.run_id == RUNS.c.id))
        done = (RUNS.c.state != RunState.RUNNING.value, RUNS.c.started_at < cut.others)
        if report.dry_run:
            report.runs_deleted = self._count(RUNS, (*done, *unused)) + \
                self._emptied(doomed, (*done, *unused[1:]))
            return
        # re-checked by the delete itself: a result written meanwhile keeps its run
        report.runs_deleted = self._delete_batches(
            select(RUNS.c.id).where(*done, *unused).limit(batch),
            lambda ids: delete(RUNS).where(RUNS.c.id.in_([i for (i,) in ids]), *unused))

    def _emptied(self, doomed: Counter[str], where: tuple[Any, ...]) -> int:
        """Of the runs meeting ``where``, those whose results would all go."""
        emptied = 0
        ids = sorted(doomed)
        with self._reading() as conn:
            for start in range(0, len(ids), 500):
                query = (select(RUNS.c.id, func.count())
                         .join(RESULTS, RESULTS.c.run_id == RUNS.c.id)
                         .where(RUNS.c.id.in_(ids[start:start + 500]), *where)
                         .group_by(RUNS.c.id))
                emptied += sum(1 for run_id, n in conn.execute(query) if n == doomed[run_id])
        return emptied

    def _delete_batches(self, pick: Select[Any], remove: Callable[[Sequence[Any]], Delete]
                        ) -> int:
        """Pick a batch of keys and delete them, one short transaction a batch, until none
        is left; how many rows went."""
        total = 0
        while True:  # batches until done, not a retry
            with self._transaction() as conn:
                keys = conn.execute(pick).all()
                if not keys:
                    return total
                total += conn.execute(remove(keys)).rowcount

    # --- SQLite: free pages back to the file system -------------------------------------

    def _incremental_vacuum_on(self) -> bool:
        with self._reading() as conn:
            return int(conn.exec_driver_sql("PRAGMA auto_vacuum").scalar_one()) == 2

    def _give_back_pages(self, reserve: float) -> tuple[int, int]:
        """``PRAGMA incremental_vacuum`` in steps, each a short write of its own with the
        lock let go between, until no more than ``reserve`` of the file's pages are free;
        then a passive checkpoint, so the file itself shrinks without waiting for one. The
        pages given back, and those left free."""
        freed = 0
        while True:  # steps of bounded work, not a retry
            with self._connected(self._engine.connect) as conn:
                raw: Any = conn.connection.driver_connection  # sqlite3's: for executescript
                free = int(raw.execute("PRAGMA freelist_count").fetchone()[0])
                pages = int(raw.execute("PRAGMA page_count").fetchone()[0])
                # the reserve is of the pages in use, so giving pages back does not move it
                excess = free - int((pages - free) * reserve)
                if excess <= 0:
                    raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    return freed, free
                # executescript steps the pragma to its end: execute() frees a single page
                raw.executescript(f"PRAGMA incremental_vacuum({min(excess, VACUUM_STEP)})")
                freed += min(excess, VACUUM_STEP)

    def vacuum(self) -> None:
        """Once, for a SQLite store made before incremental vacuum: turn it on with a full
        ``VACUUM``, which rewrites the file and holds its write lock meanwhile. On PostgreSQL
        a plain ``VACUUM ANALYZE`` of the pruned tables (no lock readers or writers wait on)."""
        with self._connected(self._engine.connect) as conn:
            auto = conn.execution_options(isolation_level="AUTOCOMMIT")
            if auto.dialect.name == "sqlite":
                auto.exec_driver_sql("PRAGMA auto_vacuum=INCREMENTAL")
                auto.exec_driver_sql("VACUUM")
            else:
                auto.exec_driver_sql("VACUUM ANALYZE probe_result, result_rollup, check_run, "
                                     "rollout_rollup")

