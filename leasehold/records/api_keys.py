"""API keys: creation (printed once) and lookup to a principal."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import DateTime, String, select
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.records.base import Base, utcnow

Tier = Literal["paid", "free"]
TIERS: tuple[Tier, ...] = ("paid", "free")
KEY_PREFIX = "lh_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class ApiKey(Base):
    """An API key, stored as a SHA-256 hash (keys are 256-bit random, so no slow KDF is needed)."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    user_id: Mapped[str] = mapped_column(String(64))
    tier: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


@dataclass(frozen=True)
class Principal:
    """Who is calling: every request is scoped to this tenant and user."""

    tenant_id: str
    user_id: str
    tier: Tier
    key_id: str


def key_hash(key: str) -> str:
    """What is stored of a key (and what a cache of principals may key on)."""
    return hashlib.sha256(key.encode()).hexdigest()


def validate_name(field: str, value: str) -> str:
    """Tenant and user ids: 1-64 letters, digits, '_', '.', '-'."""
    if not _NAME.match(value):
        raise ValueError(f"{field} must be 1-64 letters, digits, '_', '.' or '-' (got {value!r})")
    return value


def create_key(factory: sessionmaker, tenant_id: str, user_id: str, tier: str) -> str:
    """Store a new key's hash and return the key itself (the only time it exists in clear)."""
    validate_name("tenant", tenant_id)
    validate_name("user", user_id)
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {', '.join(TIERS)} (got {tier!r})")
    key_id = secrets.token_hex(8)
    key = f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
    with factory.begin() as session:
        session.add(ApiKey(id=key_id, key_hash=key_hash(key), tenant_id=tenant_id, user_id=user_id, tier=tier))
    return key


def lookup(factory: sessionmaker, key: str) -> Principal | None:
    """The principal of a valid, unrevoked key; ``None`` otherwise."""
    if not key.startswith(KEY_PREFIX) or len(key) > 200:
        return None
    with factory() as session:
        row = session.scalar(select(ApiKey).where(ApiKey.key_hash == key_hash(key)))
    if row is None or row.revoked_at is not None:
        return None
    return Principal(tenant_id=row.tenant_id, user_id=row.user_id, tier=row.tier, key_id=row.id)  # type: ignore[arg-type]
