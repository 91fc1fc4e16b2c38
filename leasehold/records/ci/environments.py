"""Deployment environments of a repository and their protection: which require a person's approval
before a job naming them (``environment:``) may run, and who may give it.

Rules are read when a push's workflow files are listed and travel with the run (workflows never
read the database); a rule changed later applies to later pushes. Names are case-insensitive,
as on GitHub.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Boolean, DateTime, String, Text, select
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.records.base import Base, FieldError, from_row, utcnow

ENVIRONMENT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
ENVIRONMENT_NAME_RULE = "environment names hold letters, digits, '_', '-', '.' (at most 100)"
USER_ID = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
MAX_APPROVERS = 100


class CIEnvironment(Base):
    """One protected (or explicitly unprotected) environment of one repository."""

    __tablename__ = "ci_environments"

    repo_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    # Lower-case: environment names are case-insensitive.
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    display_name: Mapped[str] = mapped_column(String(100))
    required_approval: Mapped[bool] = mapped_column(Boolean, default=False)
    # JSON list of user ids; empty: any user of the tenant may approve.
    approvers: Mapped[str] = mapped_column(Text, default="[]")
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


@dataclass(frozen=True)
class EnvironmentRecord:
    repo_id: str
    name: str
    required_approval: bool
    approvers: list[str]
    updated_at: datetime


class EnvironmentError(FieldError):
    """An environment setting the caller can fix; ``field`` names the input."""


def _record(row: CIEnvironment) -> EnvironmentRecord:
    return from_row(EnvironmentRecord, row, name=row.display_name, approvers=list(json.loads(row.approvers)))


def set_environment(
    factory: sessionmaker, tenant_id: str, repo_id: str, name: str, required_approval: bool, approvers: list[str]
) -> EnvironmentRecord:
    """Create or change an environment of the tenant's repository (the caller checked that the
    repository is the tenant's)."""
    if not ENVIRONMENT_NAME.match(name):
        raise EnvironmentError("name", ENVIRONMENT_NAME_RULE)
    if len(approvers) > MAX_APPROVERS or any(not USER_ID.match(a) for a in approvers):
        raise EnvironmentError("approvers", f"approvers must be at most {MAX_APPROVERS} user ids")
    with factory.begin() as session:
        row = session.get(CIEnvironment, (repo_id, name.lower()))
        if row is None:
            row = CIEnvironment(repo_id=repo_id, name=name.lower(), tenant_id=tenant_id)
            session.add(row)
        row.display_name = name
        row.required_approval = required_approval
        row.approvers = json.dumps(sorted(set(approvers)))
        row.updated_at = utcnow()
        session.flush()
        return _record(row)


def list_environments(factory: sessionmaker, tenant_id: str, repo_id: str) -> list[EnvironmentRecord]:
    with factory() as session:
        rows = session.scalars(
            select(CIEnvironment)
            .where(CIEnvironment.tenant_id == tenant_id, CIEnvironment.repo_id == repo_id)
            .order_by(CIEnvironment.name)
        ).all()
    return [_record(r) for r in rows]
