"""CI configuration variables (the ``vars`` context): per tenant, optionally per repository.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ci_variables",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("repo_scope", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "repo_scope", "name", name="uq_ci_variables_scope_name"),
    )
    op.create_index("ix_ci_variables_tenant_id", "ci_variables", ["tenant_id"])


def downgrade() -> None:
    op.drop_index("ix_ci_variables_tenant_id", table_name="ci_variables")
    op.drop_table("ci_variables")
