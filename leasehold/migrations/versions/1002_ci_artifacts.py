"""CI artifacts (``leasehold.records.ci.artifacts``).

Revision ID: 1002
Revises: 1001
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "1002"
down_revision = "1001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ci_artifacts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("repo_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("digest", sa.String(length=100), nullable=True),
        sa.Column("object_key", sa.String(length=512), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "name", name="uq_ci_artifacts_run_name"),
    )
    op.create_index("ix_ci_artifacts_tenant_id", "ci_artifacts", ["tenant_id"])
    op.create_index("ix_ci_artifacts_run_id", "ci_artifacts", ["run_id"])
    op.create_index("ix_ci_artifacts_expires_at", "ci_artifacts", ["expires_at"])


def downgrade() -> None:
    op.drop_table("ci_artifacts")
