"""Health and quarantine: state per environment, transitions, incidents, suites.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "env_state",
        sa.Column("env_id", sa.String(), nullable=False),
        sa.Column("suite", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("image_digest", sa.String(), nullable=True),
        sa.Column("kinds", sa.JSON(), nullable=False),
        sa.Column("quarantined", sa.Boolean(), nullable=False),
        sa.Column("q_source", sa.String(), nullable=True),
        sa.Column("q_actor", sa.String(), nullable=True),
        sa.Column("q_reason", sa.String(), nullable=True),
        sa.Column("q_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("q_evidence", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("env_id"),
    )
    op.create_table(
        "transition",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("env_id", sa.String(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("old_state", sa.String(), nullable=False),
        sa.Column("new_state", sa.String(), nullable=False),
        sa.Column("was_quarantined", sa.Boolean(), nullable=False),
        sa.Column("quarantined", sa.Boolean(), nullable=False),
        sa.Column("actor", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("image_digest", sa.String(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_transition_env_id", "transition", ["env_id"])
    op.create_table(
        "incident",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("failing", sa.Integer(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("detail", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["check_run.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_incident_run_id", "incident", ["run_id"])
    op.create_table(
        "suite",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("description", sa.String(), nullable=False),
        sa.Column("allow_degraded", sa.Boolean(), nullable=False),
        sa.Column("file", sa.String(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("suite")
    op.drop_index("ix_incident_run_id", table_name="incident")
    op.drop_table("incident")
    op.drop_index("ix_transition_env_id", table_name="transition")
    op.drop_table("transition")
    op.drop_table("env_state")
