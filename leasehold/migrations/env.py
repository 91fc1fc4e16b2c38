"""Alembic's environment: migrate the connection ``runner.upgrade_to_head`` hands over.

Online only, on the caller's connection and transaction, so the caller's lock (Postgres
advisory lock, SQLite file lock) covers the whole upgrade.
"""

from __future__ import annotations

from alembic import context

import leasehold.records.tables  # noqa: F401  (declares every table on Base, for autogenerate)
from leasehold.records.base import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("leasehold migrations run through leasehold.migrations.runner, on a connection")

context.configure(connection=connection, target_metadata=Base.metadata, compare_type=True, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
