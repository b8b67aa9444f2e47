"""Retired environments (``environment.retired_at``) and what an incident held back
(``incident.held_back``, ``incident.held_back_failures``).

Existing environments are all current (NULL) until the daemon next loads its catalogue;
existing incidents say 0 held back (unknown then).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("environment") as batch:
        batch.add_column(sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("incident") as batch:
        batch.add_column(sa.Column("held_back", sa.Integer(), nullable=False,
                                   server_default="0"))
        batch.add_column(sa.Column("held_back_failures", sa.JSON(), nullable=False,
                                   server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("incident") as batch:
        batch.drop_column("held_back_failures")
        batch.drop_column("held_back")
    with op.batch_alter_table("environment") as batch:
        batch.drop_column("retired_at")
