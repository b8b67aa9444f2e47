"""The result store: a small typed interface over the tables; one short session per call.

Every consumer (CLI, daemon, API, dashboard, metrics) reads results through this class, so
they agree by construction. Each ``record()`` commits on its own: a killed checker loses at
most the probe in flight, and :meth:`Store.interrupt_stale_runs` tidies the run it left.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from itertools import islice
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, func, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import aliased
from sqlmodel import col, select

from envcheck.core.depth import DEPTH_KEY, RunCount
from envcheck.core.results import ProbeKind, ProbeResult
from envcheck.store.database import (
    UnknownRevision,
    create_store_engine,
    default_database_url,
    migrate,
    open_failure,
)
from envcheck.store.deliveries import DeliveryRecords
from envcheck.store.feed import FeedRecords
from envcheck.store.prune import RetentionRecords
from envcheck.store.rollouts import RolloutIngest, RolloutRecords
from envcheck.store.shapes import ShapeRecords
from envcheck.store.tables.catalogue import EnvironmentRow
from envcheck.store.tables.results import ProbeResultRow, probe_result
from envcheck.store.tables.runs import CheckRun, RunState
from envcheck.store.views.data_sources import SourceViews
from envcheck.store.views.environment import EnvironmentViews
from envcheck.store.views.fleet import FleetViews
from envcheck.store.views.metrics import MetricsViews
from envcheck.store.views.quarantine import QuarantineViews
from envcheck.store.views.taint import TaintViews

if TYPE_CHECKING:  # the catalogue's models (pydantic) are not needed to read the store
    from envcheck.catalogue.models import Environment

__all__ = ["Store", "new_run", "open_store"]

_IDS_BATCH = 500
_ROWS_BATCH = 1_000  # environments upserted per statement


def _to_row(run_id: str, result: ProbeResult) -> ProbeResultRow:
    count = RunCount.of(result.status, result.details)
    said = DEPTH_KEY in result.details  # else NULL: one run, as every result before said
    return ProbeResultRow(
        run_id=run_id,
        env_id=result.env_id,
        kind=result.kind.value,
        status=result.status.value,
        reason=result.reason.value,
        summary=result.summary,
        duration_s=result.duration_s,
        image_digest=result.image_digest,
        spec_hash=result.spec_hash,
        started_at=result.started_at,
        evidence=[e.to_json() for e in result.evidence],
        details=result.details,
        runs=count.runs if said else None,
        failed_runs=count.failed if said else None,
        depth=str(count.depth) if count.depth is not None else None,
    )


def new_run(trigger: str, catalogue_files: Sequence[str]) -> CheckRun:
    """A run of this process, not yet written: its id is made here, not by the database."""
    return CheckRun(
        id=uuid.uuid4().hex,
        trigger=trigger,
        host=socket.gethostname(),
        pid=os.getpid(),
        catalogue_files=list(catalogue_files),
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class Store(FeedRecords, ShapeRecords, DeliveryRecords, RetentionRecords, RolloutRecords,
            FleetViews, EnvironmentViews, QuarantineViews, SourceViews, MetricsViews,
            TaintViews):
    """Results, runs and environments in one database. Safe to share between threads."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._rollout_ingest = RolloutIngest()  # known ids, batches written together
        # SQLite has one writer at a time and pysqlite connections are not meant to be shared;
        # serialising this process' access avoids "database is locked" between our own threads
        # (other processes wait on busy_timeout). PostgreSQL needs no such lock.
        self._lock: contextlib.AbstractContextManager[Any] = (
            threading.RLock() if engine.dialect.name == "sqlite" else contextlib.nullcontext()
        )

    @property
    def engine(self) -> Engine:
        return self._engine

    # --- environments -------------------------------------------------------------------

    def sync_environments(self, envs: Iterable[Environment], seen: Iterable[str] = ()) -> None:
        """Upsert the catalogue's environments: first_seen is kept, the rest refreshed
        (retirement and return are :meth:`retire_absent` and :meth:`reinstate`).

        ``seen``: ids of the catalogue's other environments, synced before and unchanged
        since (a reload): only their last_seen is refreshed, their rows are not rewritten.
        """
        now = datetime.now(UTC)
        rows = (
            {
                "id": e.id,
                "suite": e.suite,
                "image": e.image,
                "spec": e.model_dump(mode="json"),
                "first_seen": now,
                "last_seen": now,
            }
            for e in envs
        )
        ids = list(seen)
        table: Any = EnvironmentRow.__table__  # type: ignore[attr-defined]
        stmt = self._upsert()(table)
        # One statement, compiled once and run for every row (executemany): atomic on both
        # backends, no read-then-write race between processes.
        stmt = stmt.on_conflict_do_update(
            index_elements=["id"],
            set_={k: stmt.excluded[k] for k in ("suite", "image", "spec", "last_seen")},
        )
        with self._transaction() as conn:
            # In batches (one transaction still): 100,000 environments' specs dumped at once
            # are ~200 MB alive together, which the process keeps as its high water.
            while values := list(islice(rows, _ROWS_BATCH)):
                conn.execute(stmt, values)
            # Batches keep each statement under SQLite's limit of bound parameters.
            for start in range(0, len(ids), _IDS_BATCH):
                conn.execute(update(table).where(table.c.id.in_(ids[start : start + _IDS_BATCH]))
                             .values(last_seen=now))

    def environments(self) -> list[EnvironmentRow]:
        with self._session() as session:
            return list(session.exec(select(EnvironmentRow).order_by(col(EnvironmentRow.id))))

    # --- runs ---------------------------------------------------------------------------

    def start_run(self, trigger: str, catalogue_files: Sequence[str]) -> str:
        return self.add_run(new_run(trigger, catalogue_files))

    def add_run(self, run: CheckRun) -> str:
        """Write a run made by :func:`new_run` (its id and start are the caller's: a run
        held while the store refused writes keeps them)."""
        with self._session() as session:
            session.add(run)
            session.commit()
        return run.id

    def finish_run(self, run_id: str, at: datetime | None = None) -> None:
        self._set_state([run_id], RunState.FINISHED, at or datetime.now(UTC))

    def interrupt_run(self, run_id: str, at: datetime | None = None) -> None:
        """Mark this process' own run interrupted (Ctrl-C, SIGTERM); results so far stay."""
        self._set_state([run_id], RunState.INTERRUPTED, at or datetime.now(UTC))

    def interrupt_stale_runs(self, *, daemon_runs: bool = False) -> list[str]:
        """Mark this host's 'running' runs whose process is gone as 'interrupted'. With
        ``daemon_runs`` (the caller holds the store's lease, so no other daemon writes it)
        every other process' daemon runs too, on any host: a dead or fenced holder's."""
        host, me = socket.gethostname(), os.getpid()
        query = select(CheckRun).where(CheckRun.state == RunState.RUNNING.value)
        if not daemon_runs:
            query = query.where(CheckRun.host == host)
        with self._session() as session:
            running = list(session.exec(query))
        stale = [r.id for r in running if (r.host, r.pid) != (host, me) and (
            (daemon_runs and r.trigger == "daemon")
            or (r.host == host and not _pid_alive(r.pid)))]
        return self._set_state(stale, RunState.INTERRUPTED, None) if stale else []

    def _set_state(self, run_ids: list[str], state: RunState, at: datetime | None) -> list[str]:
        # Only running runs change: a run finished meanwhile by its owner stays finished.
        stmt = (
            update(CheckRun)
            .where(col(CheckRun.id).in_(run_ids), col(CheckRun.state) == RunState.RUNNING.value)
            .values(state=state.value, finished_at=at)
            .returning(col(CheckRun.id))
        )
        with self._session() as session:
            changed = list(session.execute(stmt).scalars())
            session.commit()
        return changed

    def run(self, run_id: str) -> CheckRun | None:
        with self._session() as session:
            return session.get(CheckRun, run_id)

    def runs(self, limit: int = 20) -> list[CheckRun]:
        """The newest runs first."""
        query = select(CheckRun).order_by(col(CheckRun.started_at).desc()).limit(limit)
        with self._session() as session:
            return list(session.exec(query))

    # --- results ------------------------------------------------------------------------

    def record(self, run_id: str, result: ProbeResult) -> int:
        """Insert one result and commit at once; returns its id."""
        row = _to_row(run_id, result)
        with self._session() as session:
            session.add(row)
            session.commit()
        assert row.id is not None
        return row.id

    def results_for_run(self, run_id: str) -> list[ProbeResult]:
        query = (
            select(ProbeResultRow)
            .where(ProbeResultRow.run_id == run_id)
            .order_by(col(ProbeResultRow.id))
        )
        return self._results(query)

    def latest_results(
        self, env_ids: Sequence[str] | None = None, kinds: Sequence[ProbeKind] | None = None
    ) -> list[ProbeResult]:
        """The latest result (by started_at, then id) per environment and probe kind."""
        rank = (
            func.row_number()
            .over(
                partition_by=(col(ProbeResultRow.env_id), col(ProbeResultRow.kind)),
                order_by=(col(ProbeResultRow.started_at).desc(), col(ProbeResultRow.id).desc()),
            )
            .label("rank")
        )
        inner = select(ProbeResultRow, rank)
        if env_ids is not None:
            inner = inner.where(col(ProbeResultRow.env_id).in_(list(env_ids)))
        if kinds is not None:
            inner = inner.where(col(ProbeResultRow.kind).in_([k.value for k in kinds]))
        ranked = inner.subquery()
        latest = aliased(ProbeResultRow, ranked)
        query = (
            select(latest).where(ranked.c.rank == 1).order_by(col(latest.env_id), col(latest.kind))
        )
        return self._results(query)

    def history(
        self, env_id: str, kind: ProbeKind | None = None, limit: int = 100
    ) -> list[ProbeResult]:
        """An environment's results, newest first."""
        query = select(ProbeResultRow).where(ProbeResultRow.env_id == env_id)
        if kind is not None:
            query = query.where(ProbeResultRow.kind == kind.value)
        query = query.order_by(
            col(ProbeResultRow.started_at).desc(), col(ProbeResultRow.id).desc()
        ).limit(limit)
        return self._results(query)

    def latest_with_detail(self, env_id: str, kind: ProbeKind, image_digest: str | None,
                           spec_hash: str, key: str, scan: int = 20) -> ProbeResult | None:
        """The newest of the last ``scan`` results of one environment, kind, image digest and
        spec hash whose details hold ``key`` (evidence reused while that identity holds);
        ``image_digest`` None: of any digest."""
        query = (select(ProbeResultRow)
                 .where(ProbeResultRow.env_id == env_id, ProbeResultRow.kind == kind.value,
                        ProbeResultRow.spec_hash == spec_hash))
        if image_digest is not None:
            query = query.where(ProbeResultRow.image_digest == image_digest)
        query = (query
                 .order_by(col(ProbeResultRow.started_at).desc(),
                           col(ProbeResultRow.id).desc())
                 .limit(scan))
        return next((r for r in self._results(query) if key in r.details), None)

    def _results(self, query: Any) -> list[ProbeResult]:
        with self._session() as session:
            return [probe_result(row) for row in session.exec(query)]

    # --- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_store(url: str | None = None) -> Store:
    """Connect to ``url`` (default: :func:`default_database_url`) and migrate it to head."""
    url = url or default_database_url()
    engine = create_store_engine(url)
    try:
        migrate(engine)
    except (SQLAlchemyError, UnknownRevision) as exc:
        engine.dispose()
        raise open_failure(engine.url, exc) from None
    return Store(engine)
