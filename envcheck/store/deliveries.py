"""Store methods for the notifier (mixed into ``Store``): webhooks, their cursors, deliveries.

The store is the notifier's durable queue. A webhook's cursors say which transitions and
incidents it has handled; a delivery row per (webhook, subject, subject id) holds the status
and the attempts, and its uniqueness is what keeps a transition from reaching a webhook twice,
across restarts too. A webhook is known by a hash and a name, never by its URL.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import exists, func, select, update

from envcheck.store.access import StoreAccess
from envcheck.store.core_tables import INCIDENTS as _I
from envcheck.store.core_tables import NOTIFICATIONS as _N
from envcheck.store.core_tables import RESULTS as _P
from envcheck.store.core_tables import RUNS as _R
from envcheck.store.core_tables import TRANSITIONS as _T
from envcheck.store.core_tables import WEBHOOKS as _W
from envcheck.store.core_tables import columns
from envcheck.store.tables.deliveries import Delivery, DeliveryStatus
from envcheck.store.tables.runs import IncidentRow, RunState

# Delivery and DeliveryStatus are the notification table's record (in ``tables.deliveries``),
# named here too for the notifier, which knows this module as its queue.
__all__ = ["Delivery", "DeliveryRecords", "DeliveryStatus", "Subject"]


class Subject(StrEnum):
    TRANSITION = "transition"
    INCIDENT = "incident"
    INCIDENT_RESOLVED = "incident_resolved"


_COLUMNS = columns(_N, Delivery)


def _delivery(row: Any) -> Delivery:
    return Delivery(**row._mapping)


class DeliveryRecords(StoreAccess):
    def register_webhook(self, webhook_id: str, name: str, format: str) -> tuple[int, int]:
        """Note a configured webhook; returns its (transition, incident) cursors. A webhook
        seen for the first time starts at the current generation and newest incident."""
        now = datetime.now(UTC)
        stmt = self._upsert()(_W).values(
            id=webhook_id, name=name, format=format, first_seen=now, last_seen=now,
            transition_cursor=select(func.coalesce(func.max(_T.c.id), 0)).scalar_subquery(),
            incident_cursor=select(func.coalesce(func.max(_I.c.id), 0)).scalar_subquery())
        stmt = stmt.on_conflict_do_update(index_elements=["id"], set_={
            "name": stmt.excluded.name, "format": stmt.excluded.format,
            "last_seen": stmt.excluded.last_seen})
        with self._session() as session:
            session.execute(stmt)
            cursors = session.execute(select(_W.c.transition_cursor, _W.c.incident_cursor)
                                      .where(_W.c.id == webhook_id)).one()
            session.commit()
        return int(cursors[0]), int(cursors[1])

    def advance_webhook(self, webhook_id: str, *, transition: int | None = None,
                        incident: int | None = None) -> None:
        """Move a webhook's cursors forward (never back)."""
        with self._session() as session:
            for column, value in (("transition_cursor", transition),
                                  ("incident_cursor", incident)):
                if value is not None:
                    session.execute(update(_W).where(_W.c.id == webhook_id,
                                                     _W.c[column] < value)
                                    .values({column: value}))
            session.commit()

    def claim_delivery(self, webhook_id: str, subject: Subject, subject_id: int) -> Delivery:
        """The delivery of ``subject_id`` to the webhook, created pending if it is new."""
        now = datetime.now(UTC)
        stmt = self._upsert()(_N).values(
            webhook_id=webhook_id, subject=str(subject), subject_id=subject_id,
            status=str(DeliveryStatus.PENDING), attempts=0, created_at=now, updated_at=now,
        ).on_conflict_do_nothing(index_elements=["webhook_id", "subject", "subject_id"])
        with self._session() as session:
            session.execute(stmt)
            row = session.execute(self._one(webhook_id, subject, subject_id)).one()
            session.commit()
        return _delivery(row)

    def record_attempt(self, webhook_id: str, subject: Subject, subject_id: int,
                       status: DeliveryStatus, *, http_status: int | None = None,
                       error: str | None = None) -> Delivery:
        """Count one attempt and what it gave (``error`` must already be redacted)."""
        now = datetime.now(UTC)
        values: dict[str, Any] = {"attempts": _N.c.attempts + 1, "status": str(status),
                                  "http_status": http_status, "last_error": error,
                                  "updated_at": now}
        if status is DeliveryStatus.DELIVERED:
            values["delivered_at"] = now
        key = (_N.c.webhook_id == webhook_id, _N.c.subject == str(subject),
               _N.c.subject_id == subject_id)
        with self._session() as session:
            session.execute(update(_N).where(*key).values(values))
            row = session.execute(self._one(webhook_id, subject, subject_id)).one()
            session.commit()
        return _delivery(row)

    @staticmethod
    def _one(webhook_id: str, subject: Subject, subject_id: int) -> Any:
        return select(*_COLUMNS).where(_N.c.webhook_id == webhook_id,
                                       _N.c.subject == str(subject),
                                       _N.c.subject_id == subject_id)

    def deliveries(self, webhook_id: str | None = None, status: DeliveryStatus | None = None,
                   limit: int = 100) -> list[Delivery]:
        """Deliveries, newest first (of one webhook, in one status, if given)."""
        query = select(*_COLUMNS).order_by(_N.c.id.desc()).limit(limit)
        if webhook_id is not None:
            query = query.where(_N.c.webhook_id == webhook_id)
        if status is not None:
            query = query.where(_N.c.status == str(status))
        with self._session() as session:
            return [_delivery(row) for row in session.execute(query)]

    def incidents_after(self, after_id: int, limit: int = 100) -> list[IncidentRow]:
        """Incidents recorded after ``after_id``, oldest first."""
        query = select(IncidentRow).where(_I.c.id > after_id).order_by(_I.c.id).limit(limit)
        with self._session() as session:
            return list(session.scalars(query))

    def open_incident_alerts(self, webhook_id: str) -> list[IncidentRow]:
        """Incidents whose firing alert reached the webhook and whose resolution has not."""
        fired = select(_N.c.subject_id).where(
            _N.c.webhook_id == webhook_id, _N.c.subject == str(Subject.INCIDENT),
            _N.c.status == str(DeliveryStatus.DELIVERED))
        settled = (DeliveryStatus.DELIVERED.value, DeliveryStatus.FAILED.value)
        resolved = select(_N.c.subject_id).where(
            _N.c.webhook_id == webhook_id, _N.c.subject == str(Subject.INCIDENT_RESOLVED),
            _N.c.status.in_(settled))
        query = (select(IncidentRow).where(_I.c.id.in_(fired), _I.c.id.not_in(resolved))
                 .order_by(_I.c.id))
        with self._session() as session:
            return list(session.scalars(query))

    def clean_run_since(self, at: datetime) -> datetime | None:
        """When the first run that finished after ``at`` with results and no incident ended:
        the infrastructure works again. None if there is none yet."""
        query = (select(_R.c.finished_at)
                 .where(_R.c.state == RunState.FINISHED.value, _R.c.finished_at > at,
                        ~exists().where(_I.c.run_id == _R.c.id),
                        exists().where(_P.c.run_id == _R.c.id))
                 .order_by(_R.c.finished_at).limit(1))
        with self._session() as session:
            found: datetime | None = session.execute(query).scalar()
        return found
