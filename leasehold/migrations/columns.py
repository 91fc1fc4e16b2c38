"""Column builders the revisions share: the column types and groups leasehold's tables repeat.

Every column a builder makes is NOT NULL unless ``nullable=True`` says otherwise, as the
revisions always declared. A revision that has run must go on making the same schema, so a
builder here never changes what it makes: a different column is a new builder (or a plain
``sa.Column``) in the revision that needs it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa


def column(name: str, type_: sa.types.TypeEngine[Any], *, nullable: bool = False, **options: Any) -> sa.Column:
    """A column of ``type_``, NOT NULL unless ``nullable``."""
    return sa.Column(name, type_, nullable=nullable, **options)


def string(name: str, length: int, *, nullable: bool = False) -> sa.Column:
    """A ``VARCHAR(length)``."""
    return column(name, sa.String(length=length), nullable=nullable)


def text(name: str, *, nullable: bool = False) -> sa.Column:
    """Text of any length."""
    return column(name, sa.Text(), nullable=nullable)


def timestamp(name: str, *, nullable: bool = False) -> sa.Column:
    """A point in time, with its time zone."""
    return column(name, sa.DateTime(timezone=True), nullable=nullable)


def tenant_id() -> sa.Column:
    """Whose row it is: the column every tenant's table has."""
    return string("tenant_id", 64)


def tenant_and_user() -> tuple[sa.Column, sa.Column]:
    """``tenant_id`` and ``user_id``: the tenant's user a row belongs to."""
    return tenant_id(), string("user_id", 64)


def serial_id() -> sa.Column:
    """``id``, an integer the database numbers (the table's primary key)."""
    return column("id", sa.Integer(), autoincrement=True)


def created_and_updated() -> tuple[sa.Column, sa.Column]:
    """``created_at`` and ``updated_at``, in that order."""
    return timestamp("created_at"), timestamp("updated_at")


def sealed_value() -> tuple[sa.Column, sa.Column, sa.Column]:
    """A value sealed by a ``Keyring`` (``leasehold.records.ci.secrets``): the key's id, the nonce
    and the ciphertext."""
    return string("key_id", 32), column("nonce", sa.LargeBinary(length=12)), column("ciphertext", sa.LargeBinary())
