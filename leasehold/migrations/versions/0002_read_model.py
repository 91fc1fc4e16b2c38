"""The read model: video jobs, CI pushes, runs, jobs and attempts (issue 13).

What users read and what admission counts, mirrored from the engine with a version per row
(``leasehold.records.versioned``). Tables a ``create_all`` database made during the move to
migrations already has are left alone, as in the baseline.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from leasehold.migrations.existing import table_absent

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TABLES = ("video_jobs", "ci_pushes", "ci_runs", "ci_jobs", "ci_attempts")


# Whole on purpose: a recorded revision is the schema as it shipped, one table after another; it is never edited.
def upgrade() -> None:
    if table_absent("video_jobs"):
        op.create_table(
            "video_jobs",
            sa.Column("job_id", sa.String(length=64), nullable=False),
            sa.Column("tenant_id", sa.String(length=64), nullable=False),
            sa.Column("user_id", sa.String(length=64), nullable=False),
            sa.Column("model", sa.String(length=64), nullable=False),
            sa.Column("tier", sa.String(length=16), nullable=False),
            sa.Column("status", sa.String(length=16), nullable=False),
            sa.Column("version", sa.BigInteger(), nullable=False),
            sa.Column("request_hash", sa.String(length=64), nullable=False),
            sa.Column("engine_started", sa.Boolean(), nullable=False),
            sa.Column("attempts_started", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("state", sa.JSON(), nullable=False),
            sa.Column("fairness_key", sa.String(length=64), nullable=True),
            sa.Column("fairness_weight", sa.Float(), nullable=True),
            sa.PrimaryKeyConstraint("job_id"),
        )
        op.create_index("ix_video_jobs_owner", "video_jobs", ["tenant_id", "user_id", "created_at"])
        op.create_index("ix_video_jobs_owner_status", "video_jobs", ["tenant_id", "user_id", "status"])
        op.create_index("ix_video_jobs_model_status", "video_jobs", ["model", "status", "created_at"])
        op.create_index("ix_video_jobs_expiry", "video_jobs", ["status", "expires_at"])
        op.create_index("ix_video_jobs_outbox", "video_jobs", ["engine_started", "created_at"])
    if table_absent("ci_pushes"):
        op.create_table(
            "ci_pushes",
            sa.Column("push_id", sa.String(length=128), nullable=False),
            sa.Column("tenant_id", sa.String(length=64), nullable=False),
            sa.Column("repo_id", sa.String(length=32), nullable=False),
            sa.Column("commit_sha", sa.String(length=64), nullable=False),
            sa.Column("ref", sa.String(length=255), nullable=False),
            sa.Column("status", sa.String(length=16), nullable=False),
            sa.Column("version", sa.BigInteger(), nullable=False),
            sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("state", sa.JSON(), nullable=False),
            sa.PrimaryKeyConstraint("push_id"),
        )
        op.create_index("ix_ci_pushes_repo", "ci_pushes", ["tenant_id", "repo_id", "received_at"])
    if table_absent("ci_runs"):
        op.create_table(
            "ci_runs",
            sa.Column("run_id", sa.String(length=128), nullable=False),
            sa.Column("tenant_id", sa.String(length=64), nullable=False),
            sa.Column("repo_id", sa.String(length=32), nullable=False),
            sa.Column("commit_sha", sa.String(length=64), nullable=False),
            sa.Column("ref", sa.String(length=255), nullable=False),
            sa.Column("workflow_path", sa.String(length=255), nullable=False),
            sa.Column("event", sa.String(length=32), nullable=False),
            sa.Column("status", sa.String(length=16), nullable=False),
            sa.Column("version", sa.BigInteger(), nullable=False),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("state", sa.JSON(), nullable=False),
            sa.PrimaryKeyConstraint("run_id"),
        )
        op.create_index("ix_ci_runs_tenant", "ci_runs", ["tenant_id", "created_at"])
        op.create_index("ix_ci_runs_repo", "ci_runs", ["tenant_id", "repo_id", "created_at"])
        op.create_index("ix_ci_runs_finished", "ci_runs", ["status", "finished_at"])
    if table_absent("ci_jobs"):
        op.create_table(
            "ci_jobs",
            sa.Column("run_id", sa.String(length=128), nullable=False),
            sa.Column("job_id", sa.String(length=128), nullable=False),
            sa.Column("tenant_id", sa.String(length=64), nullable=False),
            sa.Column("name", sa.String(length=255), nullable=False),
            sa.Column("status", sa.String(length=24), nullable=False),
            sa.Column("round", sa.Integer(), nullable=False),
            sa.Column("attempt", sa.Integer(), nullable=False),
            sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
            sa.PrimaryKeyConstraint("run_id", "job_id"),
        )
        op.create_index("ix_ci_jobs_tenant_status", "ci_jobs", ["tenant_id", "status"])
    if table_absent("ci_attempts"):
        op.create_table(
            "ci_attempts",
            sa.Column("run_id", sa.String(length=128), nullable=False),
            sa.Column("job_id", sa.String(length=128), nullable=False),
            sa.Column("attempt", sa.Integer(), nullable=False),
            sa.Column("tenant_id", sa.String(length=64), nullable=False),
            sa.Column("status", sa.String(length=16), nullable=False),
            sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("log_prefix", sa.String(length=512), nullable=False),
            sa.Column("log_object_key", sa.String(length=512), nullable=True),
            sa.Column("log_index", sa.JSON(), nullable=True),
            sa.Column("compacted_at", sa.DateTime(timezone=True), nullable=True),
            sa.PrimaryKeyConstraint("run_id", "job_id", "attempt"),
        )
        op.create_index("ix_ci_attempts_compaction", "ci_attempts", ["status", "compacted_at"])
        op.create_index("ix_ci_attempts_tenant", "ci_attempts", ["tenant_id"])


def downgrade() -> None:
    for name in reversed(TABLES):
        op.drop_table(name)
