"""Baseline: the tables that existed before the read model (issue 13).

A database made by the old ``create_all`` keeps the tables it has; only the absent ones are
created (see ``leasehold.migrations.existing``), and the database is then at this revision.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from leasehold.migrations.existing import table_absent

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TABLES = (
    "api_keys",
    "ci_environments",
    "ci_known_heads",
    "ci_network_grants",
    "ci_secrets",
    "ci_tenant_plans",
    "repositories",
    "repo_webhook_secrets",
    "video_deletions",
)


# Whole on purpose: a recorded revision is the schema as it shipped, one table after another; it is never edited.
def upgrade() -> None:
    if table_absent("api_keys"):
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
    if table_absent("ci_environments"):
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
    if table_absent("ci_known_heads"):
        op.create_table(
            "ci_known_heads",
            sa.Column("repo_id", sa.String(length=32), nullable=False),
            sa.Column("ref", sa.String(length=255), nullable=False),
            sa.Column("sha", sa.String(length=64), nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint("repo_id", "ref"),
        )
    if table_absent("ci_network_grants"):
        op.create_table(
            "ci_network_grants",
            sa.Column("tenant_id", sa.String(length=64), nullable=False),
            sa.Column("allowed", sa.Boolean(), nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint("tenant_id"),
        )
    if table_absent("ci_secrets"):
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
    if table_absent("ci_tenant_plans"):
        op.create_table(
            "ci_tenant_plans",
            sa.Column("tenant_id", sa.String(length=64), nullable=False),
            sa.Column("fairness_weight", sa.Float(), nullable=False),
            sa.Column("max_concurrent_jobs", sa.Integer(), nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint("tenant_id"),
        )
    if table_absent("repositories"):
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
    if table_absent("repo_webhook_secrets"):
        op.create_table(
            "repo_webhook_secrets",
            sa.Column("repo_id", sa.String(length=32), nullable=False),
            sa.Column("key_id", sa.String(length=32), nullable=False),
            sa.Column("nonce", sa.LargeBinary(length=12), nullable=False),
            sa.Column("ciphertext", sa.LargeBinary(), nullable=False),
            sa.ForeignKeyConstraint(["repo_id"], ["repositories.id"]),
            sa.PrimaryKeyConstraint("repo_id"),
        )
    if table_absent("video_deletions"):
        op.create_table(
            "video_deletions",
            sa.Column("job_id", sa.String(length=64), nullable=False),
            sa.Column("tenant_id", sa.String(length=64), nullable=False),
            sa.Column("user_id", sa.String(length=64), nullable=False),
            sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint("job_id"),
        )
        op.create_index("ix_video_deletions_owner", "video_deletions", ["tenant_id", "user_id"], unique=False)


def downgrade() -> None:
    # Children before parents (repo_webhook_secrets refers to repositories).
    for name in reversed(TABLES):
        op.drop_table(name)
