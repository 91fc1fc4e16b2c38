"""``ci_annotations``: the annotations of each CI attempt as rows of the read model (issue 13).

Revision ID: 0010
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ci_annotations",
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("level", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("file", sa.Text(), nullable=True),
        sa.Column("line", sa.Integer(), nullable=True),
        sa.Column("end_line", sa.Integer(), nullable=True),
        sa.Column("col", sa.Integer(), nullable=True),
        sa.Column("end_col", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", "job_id", "attempt", "ordinal"),
    )
    op.create_index("ix_ci_annotations_tenant_level", "ci_annotations", ["tenant_id", "level"])


def downgrade() -> None:
    op.drop_index("ix_ci_annotations_tenant_level", table_name="ci_annotations")
    op.drop_table("ci_annotations")
