"""Store methods for the health model and the quarantine feed (mixed into ``Store``).

State and transition change in one transaction, so the list, the exports, the metrics and
the notifier, which all read these rows, never see one without the other.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, insert, text, update
from sqlalchemy import select as sa_select
from sqlmodel import col, select

from envcheck.core.depth import RunCount
from envcheck.core.results import ProbeKind, Status
from envcheck.core.states import Observation
from envcheck.store.access import StoreAccess
from envcheck.store.core_tables import ENVS, RESULTS, STATES, TRANSITIONS, not_retired
from envcheck.store.sql import GENERATION_SQL, SUITE_FEED_SQL, FeedRow
from envcheck.store.tables.catalogue import EnvironmentRow, RetiredListing, SuiteRow
from envcheck.store.tables.runs import IncidentRow
from envcheck.store.tables.states import EnvStateRow, QuarantineListing, TransitionRow

if TYPE_CHECKING:  # the catalogue's models (pydantic) are not needed to read the store
    from envcheck.catalogue.models import Suite

__all__ = ["RETIRED", "FeedRecords", "FeedRow"]

_IDS_BATCH = 500  # ids per IN list: under SQLite's limit of bound parameters
# The state a transition names when an environment leaves the catalogue (or comes back from).
RETIRED = "retired"
# Enough history for any decision (SPRT release needs ~30 runs) without reading it all.
OBSERVATION_WINDOW = 400


class FeedRecords(StoreAccess):
    def observations(self, env_id: str, window: int = OBSERVATION_WINDOW
                     ) -> list[tuple[ProbeKind, Observation]]:
        """An environment's newest results (per kind at most ``window``), for the model, each
        with the runs it holds (:class:`~envcheck.core.depth.RunCount`)."""
        table = RESULTS
        rank = func.row_number().over(
            partition_by=table.c.kind,
            order_by=(table.c.started_at.desc(), table.c.id.desc()),
        ).label("rank")
        names = ("kind", "status", "reason", "started_at", "image_digest", "spec_hash",
                 "run_id", "id", "runs", "failed_runs", "depth")
        inner = (sa_select(*(table.c[n] for n in names), rank)
                 .where(table.c.env_id == env_id).subquery())
        query = sa_select(*(inner.c[n] for n in names)).where(inner.c.rank <= window)
        out: list[tuple[ProbeKind, Observation]] = []
        with self._session() as session:
            for (kind, status, reason, at, digest, spec, run_id, rid, runs, failed,
                 depth) in session.execute(query):
                count = RunCount.stored(Status(status), runs, failed, depth)
                out.append((ProbeKind(kind), Observation(
                    Status(status), reason, at, digest, spec, run_id, rid, count.runs,
                    count.failed, count.depth)))
        return out

    def sync_suites(self, suites: Sequence[Suite]) -> None:
        with self._session() as session:
            for suite in suites:
                row = session.get(SuiteRow, suite.id) or SuiteRow(id=suite.id)
                row.description, row.allow_degraded = suite.description, suite.allow_degraded
                row.file, row.updated_at = suite.file, datetime.now(UTC)
                session.add(row)
            session.commit()

    def suites(self) -> list[SuiteRow]:
        with self._session() as session:
            return list(session.exec(select(SuiteRow).order_by(col(SuiteRow.id))))

    def suite(self, suite_id: str) -> SuiteRow | None:
        with self._session() as session:
            return session.get(SuiteRow, suite_id)

    def suite_members(self, suite_id: str) -> list[str]:
        query = (select(EnvironmentRow.id).where(EnvironmentRow.suite == suite_id)
                 .order_by(col(EnvironmentRow.id)))
        with self._session() as session:
            return list(session.exec(query))

    def environment_suite(self, env_id: str) -> str | None:
        with self._session() as session:
            row = session.get(EnvironmentRow, env_id)
            return row.suite if row is not None else None

    def record_incident(self, run_id: str, kind: str, failing: int, total: int, detail: str,
                        held_back: int = 0,
                        held_back_failures: Sequence[dict[str, str]] = ()) -> int:
        """The incident's id."""
        with self._session() as session:
            row = IncidentRow(run_id=run_id, kind=kind, failing=failing, total=total,
                              detail=detail, held_back=held_back,
                              held_back_failures=list(held_back_failures))
            session.add(row)
            session.commit()
            assert row.id is not None
            return row.id

    def incident_runs(self) -> frozenset[str]:
        with self._session() as session:
            return frozenset(session.exec(select(IncidentRow.run_id)))

    def incidents(self, limit: int = 50, since: datetime | None = None) -> list[IncidentRow]:
        """The newest incidents first (those at or after ``since``, if given)."""
        query = select(IncidentRow).order_by(col(IncidentRow.id).desc()).limit(limit)
        if since is not None:
            query = query.where(col(IncidentRow.at) >= since)
        with self._session() as session:
            return list(session.exec(query))

    def retire_absent(self, present: Collection[str], now: datetime | None = None
                      ) -> list[TransitionRow]:
        """Retire every current environment not in ``present`` (the daemon's whole
        catalogue): it leaves allowlists, quarantine lists and counts, its rows stay. Each
        gets a transition to ``retired`` (the feed's generation moves, its alerts resolve)."""
        keep = set(present)
        with self._transaction() as conn:
            current = conn.execute(sa_select(ENVS.c.id).where(ENVS.c.retired_at.is_(None)))
            leaving = sorted(i for i, in current if i not in keep)
            return self._move(conn, leaving, now or datetime.now(UTC), retire=True)

    def reinstate(self, ids: Collection[str], now: datetime | None = None
                  ) -> list[TransitionRow]:
        """Bring back those of ``ids`` that are retired (the catalogue names them again),
        with their history, state and quarantine as they left; a transition each."""
        wanted = set(ids)
        with self._transaction() as conn:
            retired = conn.execute(sa_select(ENVS.c.id).where(ENVS.c.retired_at.is_not(None)))
            back = sorted(i for i, in retired if i in wanted)
            return self._move(conn, back, now or datetime.now(UTC), retire=False)

    def _move(self, conn: Any, env_ids: list[str], at: datetime, *, retire: bool
              ) -> list[TransitionRow]:
        """Retire or reinstate ``env_ids`` and record their transitions, in ``conn``'s
        transaction: a transition seen is a retirement done."""
        rows: list[TransitionRow] = []
        for start in range(0, len(env_ids), _IDS_BATCH):
            batch = env_ids[start:start + _IDS_BATCH]
            conn.execute(update(ENVS).where(ENVS.c.id.in_(batch))
                         .values(retired_at=at if retire else None))
            states = {r.env_id: r for r in conn.execute(
                sa_select(STATES.c.env_id, STATES.c.state, STATES.c.quarantined,
                          STATES.c.image_digest).where(STATES.c.env_id.in_(batch)))}
            for env_id in batch:
                state = states.get(env_id)
                now_state = state.state if state is not None else "unknown"
                quarantined = bool(state.quarantined) if state is not None else False
                moved = ({"old_state": now_state, "new_state": RETIRED,
                          "was_quarantined": quarantined, "quarantined": False,
                          "reason": "left the catalogue"} if retire else
                         {"old_state": RETIRED, "new_state": now_state,
                          "was_quarantined": False, "quarantined": quarantined,
                          "reason": "back in the catalogue"})
                values: dict[str, Any] = {
                    "env_id": env_id, "at": at, "actor": "envcheck", "evidence": [],
                    "image_digest": state.image_digest if state is not None else None, **moved}
                new_id = conn.execute(insert(TRANSITIONS).values(**values)
                                      .returning(TRANSITIONS.c.id)).scalar_one()
                rows.append(TransitionRow(id=new_id, **values))
        return rows

    def retired(self) -> list[RetiredListing]:
        """Retired environments, the most recently retired first."""
        state = func.coalesce(STATES.c.state, "unknown")
        query = (sa_select(ENVS.c.id, ENVS.c.suite, ENVS.c.image, ENVS.c.retired_at,
                           ENVS.c.last_seen, state.label("state"),
                           func.coalesce(STATES.c.quarantined, False).label("quarantined"))
                 .select_from(ENVS.outerjoin(STATES, STATES.c.env_id == ENVS.c.id))
                 .where(ENVS.c.retired_at.is_not(None))
                 .order_by(ENVS.c.retired_at.desc(), ENVS.c.id))
        with self._reading() as conn:
            return [RetiredListing(env_id=r.id, suite=r.suite, image=r.image,
                                   retired_at=r.retired_at, last_seen=r.last_seen,
                                   state=r.state, quarantined=bool(r.quarantined))
                    for r in conn.execute(query)]

    def env_states(self, env_ids: Sequence[str] | None = None) -> list[EnvStateRow]:
        query = select(EnvStateRow).order_by(col(EnvStateRow.env_id))
        if env_ids is not None:
            query = query.where(col(EnvStateRow.env_id).in_(list(env_ids)))
        with self._session() as session:
            return list(session.exec(query))

    def env_state(self, env_id: str) -> EnvStateRow | None:
        with self._session() as session:
            return session.get(EnvStateRow, env_id)

    def apply(self, env_id: str, suite: str, values: dict[str, Any],
              transition: TransitionRow | None) -> int | None:
        """Write an environment's new state and, if it changed, its transition, atomically.

        Returns the transition id (the new feed generation), if any.
        """
        with self._session() as session:
            row = session.get(EnvStateRow, env_id) or EnvStateRow(env_id=env_id, suite=suite)
            for key, value in values.items():
                setattr(row, key, value)
            row.suite = suite
            row.updated_at = datetime.now(UTC)
            session.add(row)
            if transition is not None:
                session.add(transition)
            session.commit()
            return transition.id if transition is not None else None

    def transitions(self, env_id: str | None = None, limit: int = 100,
                    after_id: int | None = None) -> list[TransitionRow]:
        """Newest first; ``after_id`` gives those after a generation (oldest first)."""
        query = select(TransitionRow)
        if env_id is not None:
            query = query.where(TransitionRow.env_id == env_id)
        if after_id is not None:
            query = query.where(col(TransitionRow.id) > after_id).order_by(col(TransitionRow.id))
        else:
            query = query.order_by(col(TransitionRow.id).desc())
        with self._session() as session:
            return list(session.exec(query.limit(limit)))

    def generation(self) -> int:
        """The feed's generation: the newest transition id (0 before any)."""
        with self._reading() as conn:
            return int(conn.execute(text(GENERATION_SQL)).scalar() or 0)

    def quarantined(self, suite: str | None = None) -> list[QuarantineListing]:
        """The quarantined environments (of ``suite``, if given), by id: the feed's list."""
        query = (select(EnvStateRow).where(col(EnvStateRow.quarantined).is_(True),
                                           not_retired(col(EnvStateRow.env_id)))
                 .order_by(col(EnvStateRow.env_id)))
        if suite is not None:
            query = query.where(EnvStateRow.suite == suite)
        with self._session() as session:
            return [QuarantineListing.of(row) for row in session.exec(query)]

    def suite_feed_rows(self, suite_id: str) -> list[FeedRow]:
        """Each member of a suite with its state and quarantine, by id
        (:data:`~envcheck.store.sql.SUITE_FEED_SQL`, which ``envcheck gate`` runs too)."""
        with self._reading() as conn:
            return [FeedRow.of(row) for row in
                    conn.execute(text(SUITE_FEED_SQL), {"suite": suite_id}).all()]
