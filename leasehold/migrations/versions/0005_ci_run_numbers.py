"""``github.run_number``: ``ci_run_counters`` (per tenant + repository + workflow file) and
``ci_run_numbers`` (each run's number, by run id) (issue 14, triggers).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ci_run_counters",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("repo_id", sa.String(length=32), nullable=False),
        sa.Column("workflow_path", sa.String(length=255), nullable=False),
        sa.Column("last_number", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "repo_id", "workflow_path"),
    )
    op.create_table(
        "ci_run_numbers",
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("run_id"),
    )


def downgrade() -> None:
    op.drop_table("ci_run_numbers")
    op.drop_table("ci_run_counters")
