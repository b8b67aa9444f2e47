"""The training run's rollouts as evidence: counters per environment, hour (or day, past the
hour retention), image digest and outcome (``rollout_rollup``), each producer's sequence
numbers already counted (``rollout_producer``), rollouts of unknown environments per hour
(``rollout_unknown``), the hours an incident held back from the health model
(``rollout_held``), and each environment's rollout evidence as last assessed
(``env_state.rollouts``).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-12
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen here, not read from the models: this revision always creates these columns.
_FLOATS = ("reward_sum", "reward_sq")
_DURATIONS = ("sandbox_start_s", "agent_s", "verifier_s")


def upgrade() -> None:
    counters: list[sa.Column[object]] = []
    for name in ("count", "reward_n", "reward_sum", "reward_sq", "reward_zero", "reward_one"):
        kind = sa.Float() if name in _FLOATS else sa.Integer()
        counters.append(sa.Column(name, kind, nullable=False))
    for name in _DURATIONS:
        counters.append(sa.Column(f"{name}_sum", sa.Float(), nullable=False))
        counters.append(sa.Column(f"{name}_n", sa.Integer(), nullable=False))
    op.create_table(
        "rollout_rollup",
        sa.Column("env_id", sa.String(), nullable=False),
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("image_digest", sa.String(), nullable=False),
        sa.Column("outcome", sa.String(), nullable=False),
        sa.Column("period", sa.String(), nullable=False),
        *counters,
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("hour", "env_id", "image_digest", "outcome", "period"),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_rollout_rollup_env", "rollout_rollup", ["env_id", "hour"])
    op.create_table(
        "rollout_producer",
        sa.Column("producer", sa.String(), nullable=False),
        sa.Column("seen", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("producer"),
    )
    op.create_index("ix_rollout_producer_updated_at", "rollout_producer", ["updated_at"])
    op.create_table(
        "rollout_unknown",
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("ids", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("hour"),
    )
    op.create_table(
        "rollout_held",
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("hour"),
    )
    with op.batch_alter_table("env_state") as batch:
        batch.add_column(sa.Column("rollouts", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("env_state") as batch:
        batch.drop_column("rollouts")
    op.drop_table("rollout_held")
    op.drop_table("rollout_unknown")
    op.drop_index("ix_rollout_producer_updated_at", table_name="rollout_producer")
    op.drop_table("rollout_producer")
    op.drop_index("ix_rollout_rollup_env", table_name="rollout_rollup")
    op.drop_table("rollout_rollup")
