"""Completion webhooks of video jobs: ``video_webhook_endpoints`` and ``video_webhook_deliveries``
(issue 15, item 6).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "video_webhook_endpoints",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("secret_key_id", sa.String(length=32), nullable=False),
        sa.Column("secret_nonce", sa.LargeBinary(), nullable=False),
        sa.Column("secret_ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_video_webhook_endpoints_owner", "video_webhook_endpoints", ["tenant_id", "user_id"])
    op.create_table(
        "video_webhook_deliveries",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("endpoint_id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("event_type", sa.String(length=32), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("endpoint_id", "job_id", "event_type", name="uq_video_webhook_deliveries_event"),
    )
    op.create_index("ix_video_webhook_deliveries_endpoint", "video_webhook_deliveries", ["endpoint_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_video_webhook_deliveries_endpoint", table_name="video_webhook_deliveries")
    op.drop_table("video_webhook_deliveries")
    op.drop_index("ix_video_webhook_endpoints_owner", table_name="video_webhook_endpoints")
    op.drop_table("video_webhook_endpoints")
