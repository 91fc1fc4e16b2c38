"""The 1.0 baseline: every table of leasehold 1.0, in one revision.

Before 1.0 the schema grew through revisions ``0001`` to ``0009`` (and, before those, the old
``create_all``); no deployment outside development ran them, so 1.0 starts again from this one
revision, which makes the same schema they made. A database at a pre-1.0 revision, or with
leasehold's tables and no revision, is refused on start (``leasehold.migrations.runner``).

Revision ID: 1000
Revises:
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "1000"
down_revision = None
branch_labels = None
depends_on = None

# In creation order; dropped in reverse (repo_webhook_secrets refers to repositories).
TABLES = (
    "api_keys",
    "repositories",
    "repo_webhook_secrets",
    "ci_known_heads",
    "ci_environments",
    "ci_network_grants",
    "ci_secrets",
    "ci_tenant_plans",
    "ci_log_retention",
    "ci_isolation",
    "ci_variables",
    "video_deletions",
    "video_jobs",
    "video_capacity_snapshots",
    "video_webhook_endpoints",
    "video_webhook_deliveries",
    "ci_pushes",
    "ci_runs",
    "ci_run_counters",
    "ci_run_numbers",
    "ci_jobs",
    "ci_attempts",
    "ci_annotations",
    "ci_artifacts",
    "ci_status_reporters",
    "ci_status_deliveries",
)


def _keys_and_repositories() -> None:
    """Operator records: API keys, repositories and their webhook secrets, CI heads seen."""
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("tier", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_api_keys_key_hash", "api_keys", ["key_hash"], unique=True)
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"], unique=False)
    op.create_table(
        "repositories",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("clone_url", sa.String(length=2000), nullable=False),
        sa.Column("webhook_secret", sa.String(length=256), nullable=False),
        sa.Column("default_branch", sa.String(length=200), nullable=False),
        sa.Column("github_id", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "name", name="uq_repositories_tenant_name"),
    )
    op.create_index("ix_repositories_github_id", "repositories", ["github_id"], unique=False)
    op.create_index("ix_repositories_name", "repositories", ["name"], unique=False)
    op.create_index("ix_repositories_tenant_id", "repositories", ["tenant_id"], unique=False)
    op.create_table(
        "repo_webhook_secrets",
        sa.Column("repo_id", sa.String(length=32), nullable=False),
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("nonce", sa.LargeBinary(length=12), nullable=False),
        sa.Column("ciphertext", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["repo_id"], ["repositories.id"]),
        sa.PrimaryKeyConstraint("repo_id"),
    )
    op.create_table(
        "ci_known_heads",
        sa.Column("repo_id", sa.String(length=32), nullable=False),
        sa.Column("ref", sa.String(length=255), nullable=False),
        sa.Column("sha", sa.String(length=64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("repo_id", "ref"),
    )


def _ci_settings() -> None:
    """What an operator sets per tenant or repository for CI."""
    op.create_table(
        "ci_environments",
        sa.Column("repo_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("display_name", sa.String(length=100), nullable=False),
        sa.Column("required_approval", sa.Boolean(), nullable=False),
        sa.Column("approvers", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("repo_id", "name"),
    )
    op.create_index("ix_ci_environments_tenant_id", "ci_environments", ["tenant_id"], unique=False)
    op.create_table(
        "ci_network_grants",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("allowed", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id"),
    )
    op.create_table(
        "ci_secrets",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("repo_scope", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("nonce", sa.LargeBinary(length=12), nullable=False),
        sa.Column("ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "repo_scope", "name", name="uq_ci_secrets_scope_name"),
    )
    op.create_index("ix_ci_secrets_tenant_id", "ci_secrets", ["tenant_id"], unique=False)
    op.create_table(
        "ci_tenant_plans",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("fairness_weight", sa.Float(), nullable=False),
        sa.Column("max_concurrent_jobs", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id"),
    )
    op.create_table(
        "ci_log_retention",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("log_retention_days", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id"),
    )
    op.create_table(
        "ci_isolation",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id"),
    )
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


def _video() -> None:
    """Video jobs (read model), deletions, the capacity snapshot and completion webhooks."""
    op.create_table(
        "video_deletions",
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job_id"),
    )
    op.create_index("ix_video_deletions_owner", "video_deletions", ["tenant_id", "user_id"], unique=False)
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
    op.create_index("ix_video_jobs_closed", "video_jobs", ["status", "completed_at"])
    op.create_table(
        "video_capacity_snapshots",
        sa.Column("deployment", sa.String(length=128), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("snapshot", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("deployment"),
    )
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


def _ci_runs() -> None:
    """The CI read model's pushes and runs, and ``github.run_number``."""
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


def _ci_jobs() -> None:
    """The CI read model's jobs, attempts and annotations."""
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


def _ci_reporting() -> None:
    """What runs leave outside the read model: artifacts, and reports to the git host."""
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


def upgrade() -> None:
    _keys_and_repositories()
    _ci_settings()
    _video()
    _ci_runs()
    _ci_jobs()
    _ci_reporting()


def downgrade() -> None:
    for name in reversed(TABLES):
        op.drop_table(name)
