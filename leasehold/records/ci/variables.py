"""CI configuration variables (GitHub's ``vars`` context): per tenant, optionally per repository.

Not secret, so stored in clear, returned by the API and never masked (GitHub's rules): use a
secret for anything that must not appear in a log. Names are case-insensitive and stored
upper-case; a repository's variable wins over a tenant-wide one of the same name.

The push that starts a run reads them once (``variables_for``) and carries them in its input,
so every job of the run sees the same values and the run workflow, which evaluates job-level
expressions, stays deterministic: a change applies to runs pushed after it, as a plan does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import DateTime, String, Text, UniqueConstraint, select
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.records.base import Base, FieldError, from_row, utcnow
from leasehold.records.ci.scoped import TENANT_SCOPE, delete_scoped, existing_or_room, list_scoped

# GitHub's limits: a variable is at most 48 KB, a repository has at most 500 (1,000 for an
# organisation), and a run sees at most 256 KB of them in all.
MAX_VARIABLE_BYTES = 48 * 1024
MAX_VARIABLES_PER_SCOPE = 500
MAX_VARIABLES_BYTES_PER_RUN = 256 * 1024
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")


class CIVariable(Base):
    """One configuration variable."""

    __tablename__ = "ci_variables"
    __table_args__ = (UniqueConstraint("tenant_id", "repo_scope", "name", name="uq_ci_variables_scope_name"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    # "" for tenant-wide, else the repository id.
    repo_scope: Mapped[str] = mapped_column(String(64), default=TENANT_SCOPE)
    name: Mapped[str] = mapped_column(String(100))
    value: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class VariableError(FieldError):
    """A variable the caller can fix; ``field`` names the offending input."""


@dataclass(frozen=True)
class VariableInfo:
    name: str
    value: str
    repo_id: str | None
    created_at: datetime
    updated_at: datetime


def normalize_name(name: str) -> str:
    """GitHub's rules: letters, digits and '_', not starting with a digit or ``GITHUB_``, at most
    100 characters; case-insensitive (stored upper-case)."""
    if not _NAME.match(name):
        raise VariableError(
            "name", "a variable name holds letters, digits and '_', does not start with a digit, at most 100"
        )
    upper = name.upper()
    if upper.startswith("GITHUB_"):
        raise VariableError("name", "variable names must not start with GITHUB_")
    return upper


def validate_value(value: str) -> str:
    if len(value.encode()) > MAX_VARIABLE_BYTES:
        raise VariableError("value", f"a variable must be at most {MAX_VARIABLE_BYTES} bytes")
    if "\x00" in value:
        raise VariableError("value", "a variable must not contain NUL characters")
    return value


def _info(row: CIVariable) -> VariableInfo:
    return from_row(VariableInfo, row, repo_id=row.repo_scope or None)


def put_variable(
    factory: sessionmaker, tenant_id: str, repo_id: str | None, name: str, value: str
) -> tuple[VariableInfo, bool]:
    """Create or replace a variable; ``(info, created)``."""
    key, value = normalize_name(name), validate_value(value)
    scope = repo_id or TENANT_SCOPE
    with factory.begin() as session:
        full = VariableError("name", f"at most {MAX_VARIABLES_PER_SCOPE} variables per scope")
        row = existing_or_room(session, CIVariable, tenant_id, scope, key, MAX_VARIABLES_PER_SCOPE, full)
        created = row is None
        if row is None:
            row = CIVariable(tenant_id=tenant_id, repo_scope=scope, name=key, created_at=utcnow())
            session.add(row)
        row.value = value
        row.updated_at = utcnow()
        session.flush()
        return _info(row), created


def list_variables(factory: sessionmaker, tenant_id: str, repo_id: str | None) -> list[VariableInfo]:
    return [_info(r) for r in list_scoped(factory, CIVariable, tenant_id, repo_id)]


def delete_variable(factory: sessionmaker, tenant_id: str, repo_id: str | None, name: str) -> bool:
    return delete_scoped(factory, CIVariable, tenant_id, repo_id, normalize_name(name))


def variables_for(factory: sessionmaker, tenant_id: str, repo_id: str) -> dict[str, str]:
    """The ``vars`` context of a run of ``repo_id``: tenant-wide variables, the repository's
    over them; names in order, cut off (whole variables) at ``MAX_VARIABLES_BYTES_PER_RUN``."""
    with factory() as session:
        rows = session.scalars(
            select(CIVariable).where(
                CIVariable.tenant_id == tenant_id, CIVariable.repo_scope.in_([TENANT_SCOPE, repo_id])
            )
        ).all()
    merged: dict[str, str] = {}
    for row in sorted(rows, key=lambda r: r.repo_scope != TENANT_SCOPE):
        merged[row.name] = row.value
    out: dict[str, str] = {}
    size = 0
    for name in sorted(merged):
        size += len(name) + len(merged[name].encode())
        if size > MAX_VARIABLES_BYTES_PER_RUN:
            break
        out[name] = merged[name]
    return out
