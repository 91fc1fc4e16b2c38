"""Idempotent, order-insensitive writes of the read model.

Every projection row carries ``version``: a number that grows with each transition of the
execution it mirrors (the workflow's history length when the snapshot was taken; 0 for the
row the API writes when it accepts a job). ``write_versioned`` applies a write only when its
version is newer than the row's, so a retried, duplicated or reordered write converges on the
newest one, on SQLite and on Postgres alike.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, String, Table, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Mapped, Session, mapped_column

from leasehold.records.base import utcnow

# The version of lifecycle writes (a video job marked ``expired``): above any history length,
# so no snapshot of the engine, however late it arrives, can bring expired content back.
LIFECYCLE_VERSION = 2**62


class VersionedRow:
    """The columns of every read-model table (a mixin): whose it is, its status, the version
    ``write_versioned`` compares, when it last changed, and the execution's state as JSON (what
    the API renders). Each table adds its key and the columns it is queried by."""

    tenant_id: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    state: Mapped[dict[str, Any]] = mapped_column(JSON)


def dialect_insert(session: Session, table: Any) -> Any:
    """An INSERT of ``table`` in the session's dialect, which has ``on_conflict_do_*`` on both
    SQLite and Postgres (SQLAlchemy's generic insert has neither)."""
    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def write_versioned(session: Session, table: Table, key: dict[str, Any], values: dict[str, Any], version: int) -> bool:
    """Insert or update the row ``key`` with ``values`` at ``version``; ``True`` if it applied.

    An existing row at the same or a newer version is left alone. Runs inside the caller's
    transaction; a concurrent insert of the same key is resolved by trying the update again.
    """
    row = {**values, **key, "version": version}
    for _ in range(2):
        where = [table.c[name] == value for name, value in key.items()]
        changed = session.execute(update(table).where(*where, table.c.version < version).values(**row))
        if changed.rowcount:  # type: ignore[attr-defined]
            return True
        inserted = session.execute(
            dialect_insert(session, table).values(**row).on_conflict_do_nothing(index_elements=list(key))
        )
        if inserted.rowcount:  # type: ignore[attr-defined]
            return True
        # Either a row at a newer (or equal) version exists, or a concurrent writer inserted it
        # between the two statements: one more update settles which.
    return False
