"""CI isolation per tenant: the sandbox backend (``bubblewrap`` or ``gvisor``) a tenant's jobs run
in; a tenant without a row gets bubblewrap. A table of its own, like network grants, so no
existing table changes.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ci_isolation",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id"),
    )


def downgrade() -> None:
    op.drop_table("ci_isolation")
