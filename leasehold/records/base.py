"""The declarative base every leasehold table is declared on, and the clock its timestamps use.

The table modules (listed in ``leasehold.records.tables``) import this; the engine, sessions and
migrations are ``leasehold.database``'s.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import DeclarativeBase


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    """Declarative base of every leasehold table."""
