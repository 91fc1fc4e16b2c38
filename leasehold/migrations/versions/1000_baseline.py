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

from leasehold.migrations.columns import (
    column,
    created_and_updated,
    sealed_value,
    serial_id,
    string,
    tenant_and_user,
    tenant_id,
    text,
    timestamp,
)

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
        string("id", 32),
        string("key_hash", 64),
        *tenant_and_user(),
        string("tier", 16),
        timestamp("created_at"),
        timestamp("revoked_at", nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_api_keys_key_hash", "api_keys", ["key_hash"], unique=True)
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"], unique=False)
    op.create_table(
        "repositories",
        string("id", 32),
        tenant_id(),
        string("name", 200),
        string("clone_url", 2000),
        string("webhook_secret", 256),
        string("default_branch", 200),
        column("github_id", sa.BigInteger(), nullable=True),
        timestamp("created_at"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "name", name="uq_repositories_tenant_name"),
    )
    op.create_index("ix_repositories_github_id", "repositories", ["github_id"], unique=False)
    op.create_index("ix_repositories_name", "repositories", ["name"], unique=False)
    op.create_index("ix_repositories_tenant_id", "repositories", ["tenant_id"], unique=False)
    op.create_table(
        "repo_webhook_secrets",
        string("repo_id", 32),
        *sealed_value(),
        sa.ForeignKeyConstraint(["repo_id"], ["repositories.id"]),
        sa.PrimaryKeyConstraint("repo_id"),
    )
    op.create_table(
        "ci_known_heads",
        string("repo_id", 32),
        string("ref", 255),
        string("sha", 64),
        timestamp("updated_at"),
        sa.PrimaryKeyConstraint("repo_id", "ref"),
    )


def _ci_settings() -> None:
    """What an operator sets per tenant or repository for CI."""
    op.create_table(
        "ci_environments",
        string("repo_id", 32),
        string("name", 100),
        tenant_id(),
        string("display_name", 100),
        column("required_approval", sa.Boolean()),
        text("approvers"),
        timestamp("updated_at"),
        sa.PrimaryKeyConstraint("repo_id", "name"),
    )
    op.create_index("ix_ci_environments_tenant_id", "ci_environments", ["tenant_id"], unique=False)
    op.create_table(
        "ci_network_grants",
        tenant_id(),
        column("allowed", sa.Boolean()),
        timestamp("updated_at"),
        sa.PrimaryKeyConstraint("tenant_id"),
    )
    op.create_table(
        "ci_secrets",
        string("id", 32),
        tenant_id(),
        string("repo_scope", 64),
        string("name", 128),
        *sealed_value(),
        *created_and_updated(),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "repo_scope", "name", name="uq_ci_secrets_scope_name"),
    )
    op.create_index("ix_ci_secrets_tenant_id", "ci_secrets", ["tenant_id"], unique=False)
    op.create_table(
        "ci_tenant_plans",
        tenant_id(),
        column("fairness_weight", sa.Float()),
        column("max_concurrent_jobs", sa.Integer()),
        timestamp("updated_at"),
        sa.PrimaryKeyConstraint("tenant_id"),
    )
    op.create_table(
        "ci_log_retention",
        tenant_id(),
        column("log_retention_days", sa.Integer()),
        timestamp("updated_at"),
        sa.PrimaryKeyConstraint("tenant_id"),
    )
    op.create_table(
        "ci_isolation",
        tenant_id(),
        string("backend", 32),
        timestamp("updated_at"),
        sa.PrimaryKeyConstraint("tenant_id"),
    )
    op.create_table(
        "ci_variables",
        serial_id(),
        tenant_id(),
        string("repo_scope", 64),
        string("name", 100),
        text("value"),
        *created_and_updated(),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "repo_scope", "name", name="uq_ci_variables_scope_name"),
    )
    op.create_index("ix_ci_variables_tenant_id", "ci_variables", ["tenant_id"])


def _video() -> None:
    """Video jobs (read model), deletions, the capacity snapshot and completion webhooks."""
    op.create_table(
        "video_deletions",
        string("job_id", 64),
        *tenant_and_user(),
        timestamp("deleted_at"),
        sa.PrimaryKeyConstraint("job_id"),
    )
    op.create_index("ix_video_deletions_owner", "video_deletions", ["tenant_id", "user_id"], unique=False)
    op.create_table(
        "video_jobs",
        string("job_id", 64),
        *tenant_and_user(),
        string("model", 64),
        string("tier", 16),
        string("status", 16),
        column("version", sa.BigInteger()),
        string("request_hash", 64),
        column("engine_started", sa.Boolean()),
        column("attempts_started", sa.Integer()),
        timestamp("created_at"),
        timestamp("started_at", nullable=True),
        timestamp("completed_at", nullable=True),
        timestamp("expires_at", nullable=True),
        timestamp("updated_at"),
        column("state", sa.JSON()),
        string("fairness_key", 64, nullable=True),
        column("fairness_weight", sa.Float(), nullable=True),
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
        string("deployment", 128),
        string("owner", 128),
        timestamp("lease_expires_at"),
        timestamp("published_at", nullable=True),
        column("snapshot", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("deployment"),
    )
    op.create_table(
        "video_webhook_endpoints",
        string("id", 40),
        *tenant_and_user(),
        string("url", 2048),
        string("secret_key_id", 32),
        column("secret_nonce", sa.LargeBinary()),
        column("secret_ciphertext", sa.LargeBinary()),
        timestamp("created_at"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_video_webhook_endpoints_owner", "video_webhook_endpoints", ["tenant_id", "user_id"])
    op.create_table(
        "video_webhook_deliveries",
        string("id", 40),
        string("endpoint_id", 40),
        *tenant_and_user(),
        string("job_id", 64),
        string("event_type", 32),
        text("body"),
        string("status", 16),
        column("attempts", sa.JSON()),
        *created_and_updated(),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("endpoint_id", "job_id", "event_type", name="uq_video_webhook_deliveries_event"),
    )
    op.create_index("ix_video_webhook_deliveries_endpoint", "video_webhook_deliveries", ["endpoint_id", "created_at"])


def _ci_runs() -> None:
    """The CI read model's pushes and runs, and ``github.run_number``."""
    op.create_table(
        "ci_pushes",
        string("push_id", 128),
        tenant_id(),
        string("repo_id", 32),
        string("commit_sha", 64),
        string("ref", 255),
        string("status", 16),
        column("version", sa.BigInteger()),
        timestamp("received_at"),
        timestamp("updated_at"),
        column("state", sa.JSON()),
        sa.PrimaryKeyConstraint("push_id"),
    )
    op.create_index("ix_ci_pushes_repo", "ci_pushes", ["tenant_id", "repo_id", "received_at"])
    op.create_table(
        "ci_runs",
        string("run_id", 128),
        tenant_id(),
        string("repo_id", 32),
        string("commit_sha", 64),
        string("ref", 255),
        string("workflow_path", 255),
        string("event", 32),
        string("status", 16),
        column("version", sa.BigInteger()),
        timestamp("created_at"),
        timestamp("finished_at", nullable=True),
        timestamp("updated_at"),
        column("state", sa.JSON()),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.create_index("ix_ci_runs_tenant", "ci_runs", ["tenant_id", "created_at"])
    op.create_index("ix_ci_runs_repo", "ci_runs", ["tenant_id", "repo_id", "created_at"])
    op.create_index("ix_ci_runs_finished", "ci_runs", ["status", "finished_at"])
    op.create_table(
        "ci_run_counters",
        tenant_id(),
        string("repo_id", 32),
        string("workflow_path", 255),
        column("last_number", sa.Integer()),
        sa.PrimaryKeyConstraint("tenant_id", "repo_id", "workflow_path"),
    )
    op.create_table(
        "ci_run_numbers",
        string("run_id", 128),
        tenant_id(),
        column("number", sa.Integer()),
        timestamp("created_at"),
        sa.PrimaryKeyConstraint("run_id"),
    )


def _ci_jobs() -> None:
    """The CI read model's jobs, attempts and annotations."""
    op.create_table(
        "ci_jobs",
        string("run_id", 128),
        string("job_id", 128),
        tenant_id(),
        string("name", 255),
        string("status", 24),
        column("round", sa.Integer()),
        column("attempt", sa.Integer()),
        timestamp("queued_at", nullable=True),
        timestamp("started_at", nullable=True),
        timestamp("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("run_id", "job_id"),
    )
    op.create_index("ix_ci_jobs_tenant_status", "ci_jobs", ["tenant_id", "status"])
    op.create_table(
        "ci_attempts",
        string("run_id", 128),
        string("job_id", 128),
        column("attempt", sa.Integer()),
        tenant_id(),
        string("status", 16),
        timestamp("started_at", nullable=True),
        timestamp("finished_at", nullable=True),
        string("log_prefix", 512),
        string("log_object_key", 512, nullable=True),
        column("log_index", sa.JSON(), nullable=True),
        timestamp("compacted_at", nullable=True),
        sa.PrimaryKeyConstraint("run_id", "job_id", "attempt"),
    )
    op.create_index("ix_ci_attempts_compaction", "ci_attempts", ["status", "compacted_at"])
    op.create_index("ix_ci_attempts_tenant", "ci_attempts", ["tenant_id"])
    op.create_table(
        "ci_annotations",
        string("run_id", 128),
        string("job_id", 128),
        column("attempt", sa.Integer()),
        column("ordinal", sa.Integer()),
        tenant_id(),
        column("step", sa.Integer()),
        string("level", 16),
        text("message"),
        text("title", nullable=True),
        text("file", nullable=True),
        column("line", sa.Integer(), nullable=True),
        column("end_line", sa.Integer(), nullable=True),
        column("col", sa.Integer(), nullable=True),
        column("end_col", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", "job_id", "attempt", "ordinal"),
    )
    op.create_index("ix_ci_annotations_tenant_level", "ci_annotations", ["tenant_id", "level"])


def _ci_reporting() -> None:
    """What runs leave outside the read model: artifacts, and reports to the git host."""
    op.create_table(
        "ci_artifacts",
        serial_id(),
        tenant_id(),
        string("repo_id", 64),
        string("run_id", 128),
        string("job_id", 128),
        column("attempt", sa.Integer()),
        string("name", 256),
        string("state", 16),
        column("size", sa.BigInteger()),
        string("digest", 100, nullable=True),
        string("object_key", 512),
        timestamp("created_at"),
        timestamp("expires_at"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "name", name="uq_ci_artifacts_run_name"),
    )
    op.create_index("ix_ci_artifacts_tenant_id", "ci_artifacts", ["tenant_id"])
    op.create_index("ix_ci_artifacts_run_id", "ci_artifacts", ["run_id"])
    op.create_index("ix_ci_artifacts_expires_at", "ci_artifacts", ["expires_at"])
    op.create_table(
        "ci_status_reporters",
        serial_id(),
        tenant_id(),
        string("repo_id", 64),
        string("api_url", 512),
        string("repository", 140),
        string("kind", 16),
        string("app_id", 32, nullable=True),
        string("installation_id", 32, nullable=True),
        *sealed_value(),
        *created_and_updated(),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "repo_id", name="uq_ci_status_reporters_repo"),
    )
    op.create_index("ix_ci_status_reporters_tenant_id", "ci_status_reporters", ["tenant_id"])
    op.create_table(
        "ci_status_deliveries",
        string("key", 400),
        tenant_id(),
        string("run_id", 128),
        string("outcome", 16),
        string("remote_id", 64, nullable=True),
        text("detail", nullable=True),
        timestamp("updated_at"),
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
