"""Retention: rollups that pruned results are folded into, and how far pruning has gone.

Existing rows are kept as they are: pruning (``envcheck store prune``, the daemon's job) folds
and deletes them later. On PostgreSQL, autovacuum is told to visit ``probe_result`` and the
rollups after a small share of their rows changed, so the batched deletes of pruning are
reclaimed as they go (the default waits for a fifth of a table of tens of millions of rows).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen here, not read from the models: this revision always creates these columns.
_HISTOGRAM_COLUMNS = 31
_AUTOVACUUM = ("autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 5000, "
               "autovacuum_analyze_scale_factor = 0.02")


def upgrade() -> None:
    op.create_table(
        "result_rollup",
        sa.Column("env_id", sa.String(), nullable=False),
        sa.Column("period", sa.String(), nullable=False),
        sa.Column("start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("image_digest", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("duration_sum", sa.Float(), nullable=False),
        sa.Column("duration_max", sa.Float(), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        *(sa.Column(f"d{i:02d}", sa.Integer(), nullable=False)
          for i in range(_HISTOGRAM_COLUMNS)),
        sa.PrimaryKeyConstraint("env_id", "period", "start", "kind", "image_digest", "status",
                                "reason"),
    )
    op.create_index("ix_result_rollup_period_start", "result_rollup", ["period", "start"])
    op.create_table(
        "retention_mark",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    if op.get_bind().dialect.name == "postgresql":
        for table in ("probe_result", "result_rollup"):
            op.execute(f"ALTER TABLE {table} SET ({_AUTOVACUUM})")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE probe_result RESET (autovacuum_vacuum_scale_factor, "
                   "autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor)")
    op.drop_table("retention_mark")
    op.drop_index("ix_result_rollup_period_start", table_name="result_rollup")
    op.drop_table("result_rollup")
