"""Tables a database already has from before migrations.

Until issue 13 every process created its tables with ``create_all`` and recorded no revision;
such a database may hold any subset of the baseline tables (``create_all`` added tables to old
databases as they appeared). The first revisions create only the tables that are absent, so
the same path adopts an old database and builds a new one; later revisions are plain Alembic.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


def table_absent(name: str) -> bool:
    """Whether ``name`` is missing from the schema being migrated (the connection's default)."""
    return not sa.inspect(op.get_bind()).has_table(name)
