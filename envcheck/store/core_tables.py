"""The store's tables as SQLAlchemy Core objects, for the reads and upserts that skip the ORM
(cheaper than ORM rows where a page or a probe reads many), and the columns that make a
record."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, ColumnElement, Table, select
from sqlmodel import SQLModel

from envcheck.store.tables.catalogue import EnvironmentRow, SuiteRow
from envcheck.store.tables.deliveries import NotificationRow, WebhookRow
from envcheck.store.tables.results import ProbeResultRow
from envcheck.store.tables.rollouts import (
    RolloutHeldRow,
    RolloutProducerRow,
    RolloutUnknownRow,
    rollout_rollup,
)
from envcheck.store.tables.rollups import RetentionMarkRow, result_rollup
from envcheck.store.tables.runs import CheckRun, IncidentRow
from envcheck.store.tables.shapes import DataSourceShapeRow
from envcheck.store.tables.states import EnvStateRow, TransitionRow

__all__ = ["ENVS", "HELD_ROLLOUTS", "INCIDENTS", "MARKS", "NOTIFICATIONS", "PRODUCERS",
           "RESULTS", "ROLLOUTS", "ROLLUPS", "RUNS", "SHAPES", "STATES", "SUITES",
           "TRANSITIONS", "UNKNOWN_ROLLOUTS", "WEBHOOKS", "columns", "not_retired"]


def _core(model: type[SQLModel]) -> Any:
    table: Table = model.__table__  # type: ignore[attr-defined]
    return table


RESULTS = _core(ProbeResultRow)
ENVS = _core(EnvironmentRow)
STATES = _core(EnvStateRow)
SUITES = _core(SuiteRow)
TRANSITIONS = _core(TransitionRow)
RUNS = _core(CheckRun)
SHAPES = _core(DataSourceShapeRow)
INCIDENTS = _core(IncidentRow)
WEBHOOKS = _core(WebhookRow)
NOTIFICATIONS = _core(NotificationRow)
MARKS = _core(RetentionMarkRow)
ROLLUPS: Any = result_rollup
ROLLOUTS: Any = rollout_rollup
PRODUCERS = _core(RolloutProducerRow)
UNKNOWN_ROLLOUTS = _core(RolloutUnknownRow)
HELD_ROLLOUTS = _core(RolloutHeldRow)


def not_retired(env_id: Any) -> ColumnElement[bool]:
    """``env_id`` (a column) is no retired environment's: what every reader of the current
    fleet (allowlists, quarantine lists, counts, metrics) keeps to. A retired environment's
    rows stay, for its history and its return."""
    retired = select(ENVS.c.id).where(ENVS.c.retired_at.is_not(None))
    condition: ColumnElement[bool] = env_id.not_in(retired)
    return condition


def columns(table: Any, record: type[SQLModel]) -> list[Column[Any]]:
    """The columns of ``table`` that make a ``record`` (a record the table's class extends)."""
    return [table.c[name] for name in record.model_fields]
