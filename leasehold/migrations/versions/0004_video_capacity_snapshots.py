"""The video capacity tracker's lease and snapshot: ``video_capacity_snapshots`` (issue 13, submit).

One API replica per deployment measures capacity under a lease and publishes a snapshot the
other replicas read, instead of every replica describing every open job.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "video_capacity_snapshots",
        sa.Column("deployment", sa.String(length=128), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("snapshot", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("deployment"),
    )


def downgrade() -> None:
    op.drop_table("video_capacity_snapshots")
