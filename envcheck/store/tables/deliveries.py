"""Webhooks the notifier delivers to, and each notification's delivery."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import UniqueConstraint
from sqlmodel import AutoString, Field, SQLModel

from envcheck.store.tables.columns import FROZEN, WRITABLE, UTCDateTime, now

__all__ = ["Delivery", "DeliveryStatus", "NotificationRow", "WebhookRow"]


class WebhookRow(SQLModel, table=True):
    """A webhook the notifier delivers to, and how far it got. Never its URL: tokens travel in
    webhook URLs, so a webhook is known by a stable hash and the name it was given."""

    __tablename__ = "webhook"

    id: str = Field(primary_key=True)
    name: str
    format: str  # alertmanager | slack
    # Transitions / incidents up to these ids are handled (delivered, failed, or nothing to
    # send); a new webhook starts at the generation it was first seen, so it gets no backlog.
    transition_cursor: int = 0
    incident_cursor: int = 0
    first_seen: datetime = Field(default_factory=now, sa_type=UTCDateTime)
    last_seen: datetime = Field(default_factory=now, sa_type=UTCDateTime)


class DeliveryStatus(StrEnum):
    PENDING = "pending"  # claimed; not delivered yet (a receiver outage, a shutdown)
    DELIVERED = "delivered"
    FAILED = "failed"  # the receiver refused it (a 4xx): never retried


class Delivery(SQLModel):
    """One notification to one webhook and what its delivery attempts gave. Unique per
    (webhook, subject, subject id): the same transition is never sent twice to a webhook."""

    model_config = FROZEN

    webhook_id: str = Field(foreign_key="webhook.id")
    subject: str  # transition | incident | incident_resolved
    subject_id: int  # the transition's or the incident's id
    # A plain string column, like every enumerated value here (see the package's docstring).
    status: DeliveryStatus = Field(default=DeliveryStatus.PENDING, sa_type=AutoString)
    attempts: int = 0
    http_status: int | None = None
    last_error: str | None = None  # redacted: never the URL or its token
    created_at: datetime = Field(default_factory=now, sa_type=UTCDateTime)
    updated_at: datetime = Field(default_factory=now, sa_type=UTCDateTime)
    delivered_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class NotificationRow(Delivery, table=True):
    __tablename__ = "notification"
    __table_args__ = (
        UniqueConstraint("webhook_id", "subject", "subject_id", name="uq_notification"),
    )
    model_config = WRITABLE

    id: int | None = Field(default=None, primary_key=True)

