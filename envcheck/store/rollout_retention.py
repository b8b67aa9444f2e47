"""Rollout counters kept and pruned like the result rollups, in the same prune
(:meth:`~envcheck.store.Store.prune`, whose :class:`~envcheck.store.retention.Retention` says
how long): hour rows are kept for the hour retention, then folded into one row per day, kept
for the day retention, then deleted.

- **Folded exactly once.** A batch of hour rows past the hour retention is deleted and added
  to its day rows in one transaction (``DELETE ... RETURNING``: what is added is what was
  deleted), under the ingest's own lock (:mod:`envcheck.store.rollouts`), so no batch of
  rollouts is counted between the two. Every rollout is in exactly one row at any time, an
  hour's or a day's: readers add both, before, during and after a prune.
- A rollout reported late, into an hour already folded, makes an hour row again; the next
  prune folds it into the same day row.
- **What goes with the hour rows**: the unknown environments' counts of those hours, the
  hours an incident held back from the health model, and the producers not heard from for
  as long (their sequence numbers: a batch retried after
  that long would count again; none is).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Float, Integer, String, bindparam, text

from envcheck.store.access import StoreAccess
from envcheck.store.core_tables import HELD_ROLLOUTS, PRODUCERS, ROLLOUTS, UNKNOWN_ROLLOUTS
from envcheck.store.retention import Cutoffs, PruneReport
from envcheck.store.rollout_counts import Bucket, BucketKey, fold_days
from envcheck.store.rollouts import counters_upsert, one_batch_at_a_time
from envcheck.store.tables.columns import UTCDateTime
from envcheck.store.tables.rollouts import ROLLOUT_COUNTERS, ROLLOUT_KEY
from envcheck.store.tables.rollups import RollupPeriod

__all__ = ["RolloutRetention"]

_KEY = ", ".join(ROLLOUT_KEY)
# A batch of the oldest rows of one period before :before, deleted and returned. Picked in the
# key's order (it leads with the start) by a row-value IN, which both backends run as a
# semi-join on the key.
_OLD = text(f"""
DELETE FROM rollout_rollup WHERE ({_KEY}) IN (
    SELECT {_KEY} FROM rollout_rollup
    WHERE period = :period AND hour < :before ORDER BY {_KEY} LIMIT :batch)
RETURNING *
""").bindparams(bindparam("before", type_=UTCDateTime())).columns(
    env_id=String, hour=UTCDateTime, image_digest=String, outcome=String, period=String,
    first_at=UTCDateTime, last_at=UTCDateTime,
    **{name: Float if "sum" in name or name == "reward_sq" else Integer
       for name in ROLLOUT_COUNTERS})


class RolloutRetention(StoreAccess):
    def _prune_rollouts(self, cut: Cutoffs, batch: int, report: PruneReport) -> None:
        """Fold hour rows before ``cut.hourly`` into day rows, delete day rows before
        ``cut.daily``, and the unknown counts, held hours and producers older than
        ``cut.hourly`` (in a dry run, count them)."""
        hour, day = RollupPeriod.HOUR.value, RollupPeriod.DAY.value
        if report.dry_run:
            report.rollout_hours_folded = self._count(
                ROLLOUTS, (ROLLOUTS.c.period == hour, ROLLOUTS.c.hour < cut.hourly))
            report.rollout_days_deleted = self._count(
                ROLLOUTS, (ROLLOUTS.c.period == day, ROLLOUTS.c.hour < cut.daily))
            report.rollout_unknown_deleted = self._count(
                UNKNOWN_ROLLOUTS, (UNKNOWN_ROLLOUTS.c.hour < cut.hourly,))
            report.rollout_held_deleted = self._count(
                HELD_ROLLOUTS, (HELD_ROLLOUTS.c.hour < cut.hourly,))
            report.rollout_producers_deleted = self._count(
                PRODUCERS, (PRODUCERS.c.updated_at < cut.hourly,))
            return
        report.rollout_hours_folded = self._old_rollout_rows(hour, cut.hourly, batch, fold=True)
        report.rollout_days_deleted = self._old_rollout_rows(day, cut.daily, batch, fold=False)
        with self._transaction() as conn:
            report.rollout_unknown_deleted = conn.execute(UNKNOWN_ROLLOUTS.delete().where(
                UNKNOWN_ROLLOUTS.c.hour < cut.hourly)).rowcount
            report.rollout_held_deleted = conn.execute(HELD_ROLLOUTS.delete().where(
                HELD_ROLLOUTS.c.hour < cut.hourly)).rowcount
            report.rollout_producers_deleted = conn.execute(PRODUCERS.delete().where(
                PRODUCERS.c.updated_at < cut.hourly)).rowcount

    def _old_rollout_rows(self, period: str, before: datetime, batch: int, *,
                          fold: bool) -> int:
        """Delete ``period`` rows before ``before``, a batch a transaction; ``fold``: add
        each batch to its day rows in the same transaction. How many rows went."""
        total = 0
        while True:  # batches until none is left, not a retry
            with self._transaction() as conn:
                one_batch_at_a_time(conn)
                gone = conn.execute(_OLD, {"period": period, "before": before,
                                           "batch": batch}).all()
                if fold and gone:
                    days: dict[BucketKey, Bucket] = fold_days(gone)
                    upsert = counters_upsert(conn.dialect)
                    conn.exec_driver_sql(upsert.sql, upsert.rows(days, RollupPeriod.DAY))
            if not gone:
                return total
            total += len(gone)
