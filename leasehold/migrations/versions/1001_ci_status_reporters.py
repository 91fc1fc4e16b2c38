"""CI status reporters: a repository's git host and sealed credentials, and the reports
the host accepted (``leasehold.records.ci.status_reporters``).

Revision ID: 1001
Revises: 1000
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "1001"
down_revision = "1000"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ci_status_reporters",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("repo_id", sa.String(length=64), nullable=False),
        sa.Column("api_url", sa.String(length=512), nullable=False),
        sa.Column("repository", sa.String(length=140), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("app_id", sa.String(length=32), nullable=True),
        sa.Column("installation_id", sa.String(length=32), nullable=True),
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("nonce", sa.LargeBinary(length=12), nullable=False),
        sa.Column("ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "repo_id", name="uq_ci_status_reporters_repo"),
    )
    op.create_index("ix_ci_status_reporters_tenant_id", "ci_status_reporters", ["tenant_id"])
    op.create_table(
        "ci_status_deliveries",
        sa.Column("key", sa.String(length=400), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("remote_id", sa.String(length=64), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_index("ix_ci_status_deliveries_tenant_id", "ci_status_deliveries", ["tenant_id"])
    op.create_index("ix_ci_status_deliveries_run_id", "ci_status_deliveries", ["run_id"])


def downgrade() -> None:
    op.drop_table("ci_status_deliveries")
    op.drop_table("ci_status_reporters")
