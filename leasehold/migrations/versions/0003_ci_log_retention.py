"""Lifecycle (issue 13): CI log retention per tenant, and the orphan sweep's index.

A tenant's finished runs and their logs are kept this many days (1 to 3650); a tenant without
a row gets ``Settings.ci_log_retention_days``. A table of its own, like network grants, so it
needs no plan row. ``ix_video_jobs_closed`` lets the video orphan sweep page through jobs
closed in a time window without scanning the table.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from leasehold.migrations.existing import table_absent

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A database a ``create_all`` made during the move to migrations may have it already.
    if table_absent("ci_log_retention"):
        op.create_table(
            "ci_log_retention",
            sa.Column("tenant_id", sa.String(length=64), nullable=False),
            sa.Column("log_retention_days", sa.Integer(), nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint("tenant_id"),
        )
    indexes = {index["name"] for index in sa.inspect(op.get_bind()).get_indexes("video_jobs")}
    if "ix_video_jobs_closed" not in indexes:
        op.create_index("ix_video_jobs_closed", "video_jobs", ["status", "completed_at"])


def downgrade() -> None:
    op.drop_index("ix_video_jobs_closed", table_name="video_jobs")
    op.drop_table("ci_log_retention")
