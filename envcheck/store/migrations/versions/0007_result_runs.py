"""How many runs a result holds, how many failed, and how deep its probe went
(``probe_result.runs``, ``failed_runs``, ``depth``): what the health model weighs.

Existing results hold NULL: one run, failed if the result failed, a full validation (every
tests probe before ran the whole protocol).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-10
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("probe_result") as batch:
        batch.add_column(sa.Column("runs", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("failed_runs", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("depth", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("probe_result") as batch:
        batch.drop_column("depth")
        batch.drop_column("failed_runs")
        batch.drop_column("runs")
