"""CI configuration variables of deployment environments (``vars`` of a job that names one):
a table of their own, so processes of the previous version, which read ``ci_variables`` only,
keep working beside this one and never take an environment's variable for the repository's
(``leasehold.records.ci.variables``).

Revision ID: 1001
Revises: 1000
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from leasehold.migrations.columns import created_and_updated, serial_id, string, tenant_id, text

revision = "1001"
down_revision = "1000"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ci_environment_variables",
        serial_id(),
        tenant_id(),
        string("repo_scope", 64),
        string("environment", 100),
        string("name", 100),
        text("value"),
        *created_and_updated(),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "repo_scope", "environment", "name", name="uq_ci_environment_variables_name"),
    )
    op.create_index("ix_ci_environment_variables_tenant_id", "ci_environment_variables", ["tenant_id"])


def downgrade() -> None:
    op.drop_table("ci_environment_variables")
