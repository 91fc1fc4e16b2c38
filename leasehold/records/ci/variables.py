"""CI configuration variables (GitHub's ``vars`` context): per tenant, optionally per repository,
or per deployment environment of a repository.

Not secret, so stored in clear, returned by the API and never masked (GitHub's rules): use a
secret for anything that must not appear in a log. Names are case-insensitive and stored
upper-case; a repository's variable wins over a tenant-wide one of the same name, and an
environment's over both, for the jobs that name that environment (``environment:``).

The push that starts a run reads them once (``variables_for``) and carries them in its input,
so every job of the run sees the same values and the run workflow, which evaluates job-level
expressions, stays deterministic: a change applies to runs pushed after it, as a plan does.
Environments' variables are read when the push is listed (``environment_variables_for``: the
names are known only then), within what the push's own left of the per-run bound.

Environment variables have a table of their own (``ci_environment_variables``), so a process
of the previous version, which reads ``ci_variables`` only, never takes them for repository
variables. An environment needs no configuration (``leasehold.records.ci.environments``) to
hold variables: as there, its name is case-insensitive (stored lower-case).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import DateTime, String, Text, UniqueConstraint, select
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.records.base import Base, FieldError, from_row, utcnow
from leasehold.records.ci.environments import ENVIRONMENT_NAME, ENVIRONMENT_NAME_RULE
from leasehold.records.ci.scoped import TENANT_SCOPE, delete_scoped, existing_or_room, list_scoped, seen_by_repository

# GitHub's limits: a variable is at most 48 KB, a repository has at most 500 (1,000 for an
# organisation; 100 for an environment, here 500 too), and a run sees at most 256 KB of them in
# all: tenant, repository and every environment its jobs name together.
MAX_VARIABLE_BYTES = 48 * 1024
MAX_VARIABLES_PER_SCOPE = 500
MAX_VARIABLES_BYTES_PER_RUN = 256 * 1024
# A variable as the per-run bound counts it: ``(..., name, value)``.
_Entry = TypeVar("_Entry", bound=tuple[Any, ...])
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


class CIEnvironmentVariable(Base):
    """One configuration variable of one deployment environment of a repository."""

    __tablename__ = "ci_environment_variables"
    __table_args__ = (
        UniqueConstraint("tenant_id", "repo_scope", "environment", "name", name="uq_ci_environment_variables_name"),
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    # The repository id (named as on ``CIVariable``, so ``leasehold.records.ci.scoped`` serves both).
    repo_scope: Mapped[str] = mapped_column(String(64))
    # Lower-case: environment names are case-insensitive.
    environment: Mapped[str] = mapped_column(String(100))
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
    # The environment (lower-case) of an environment's variable.
    environment: str | None = None


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


def normalize_environment(repo_id: str | None, environment: str) -> str:
    """An environment's name as stored (lower-case); it must be a repository's."""
    if repo_id is None:
        raise VariableError("environment", "an environment's variables belong to a repository")
    if not ENVIRONMENT_NAME.match(environment):
        raise VariableError("environment", ENVIRONMENT_NAME_RULE)
    return environment.lower()


def _info(row: CIVariable | CIEnvironmentVariable) -> VariableInfo:
    environment = row.environment if isinstance(row, CIEnvironmentVariable) else None
    return from_row(VariableInfo, row, repo_id=row.repo_scope or None, environment=environment)


def put_variable(
    factory: sessionmaker,
    tenant_id: str,
    repo_id: str | None,
    name: str,
    value: str,
    environment: str | None = None,
) -> tuple[VariableInfo, bool]:
    """Create or replace a variable (of ``environment`` of ``repo_id`` when given);
    ``(info, created)``."""
    model, env = _table(repo_id, environment)
    key, value = normalize_name(name), validate_value(value)
    scope = repo_id or TENANT_SCOPE
    with factory.begin() as session:
        full = VariableError("name", f"at most {MAX_VARIABLES_PER_SCOPE} variables per scope")
        row = existing_or_room(session, model, tenant_id, scope, key, MAX_VARIABLES_PER_SCOPE, full, env)
        created = row is None
        if row is None:
            where = {} if env is None else {"environment": env}
            row = model(tenant_id=tenant_id, repo_scope=scope, name=key, created_at=utcnow(), **where)
            session.add(row)
        row.value = value
        row.updated_at = utcnow()
        session.flush()
        return _info(row), created


def list_variables(
    factory: sessionmaker, tenant_id: str, repo_id: str | None, environment: str | None = None
) -> list[VariableInfo]:
    model, env = _table(repo_id, environment)
    return [_info(r) for r in list_scoped(factory, model, tenant_id, repo_id, env)]


def delete_variable(
    factory: sessionmaker, tenant_id: str, repo_id: str | None, name: str, environment: str | None = None
) -> bool:
    model, env = _table(repo_id, environment)
    return delete_scoped(factory, model, tenant_id, repo_id, normalize_name(name), env)


def _table(
    repo_id: str | None, environment: str | None
) -> tuple[type[CIVariable] | type[CIEnvironmentVariable], str | None]:
    """Where a scope's variables are: ``ci_variables``, or ``ci_environment_variables`` with the
    environment's stored name."""
    if environment is None:
        return CIVariable, None
    return CIEnvironmentVariable, normalize_environment(repo_id, environment)


def variable_size(name: str, value: str) -> int:
    """What one variable takes of a run's ``MAX_VARIABLES_BYTES_PER_RUN``: its name and its
    value's UTF-8 bytes (``workflows.ci.types.push.variables_size`` counts a push's the same)."""
    return len(name) + len(value.encode())


def variables_for(factory: sessionmaker, tenant_id: str, repo_id: str) -> dict[str, str]:
    """The ``vars`` context of a run of ``repo_id``: tenant-wide variables, the repository's
    over them; names in order, cut off (whole variables) at ``MAX_VARIABLES_BYTES_PER_RUN``."""
    merged = {row.name: row.value for row in seen_by_repository(factory, CIVariable, tenant_id, repo_id)}
    return dict(_within(((name, merged[name]) for name in sorted(merged)), MAX_VARIABLES_BYTES_PER_RUN))


def environment_variables_for(
    factory: sessionmaker, tenant_id: str, repo_id: str, environments: Iterable[str], budget: int
) -> dict[str, dict[str, str]]:
    """The variables of the named environments of ``repo_id`` (lower-case name -> variables; an
    environment without any is left out), by environment then name, cut off (whole variables)
    once they would take more than ``budget`` bytes together: what the run's own ``vars`` left
    of ``MAX_VARIABLES_BYTES_PER_RUN``."""
    wanted = {e.lower() for e in environments}
    if not wanted or budget <= 0:
        return {}
    with factory() as session:
        rows = session.execute(
            select(CIEnvironmentVariable.environment, CIEnvironmentVariable.name, CIEnvironmentVariable.value)
            .where(
                CIEnvironmentVariable.tenant_id == tenant_id,
                CIEnvironmentVariable.repo_scope == repo_id,
                CIEnvironmentVariable.environment.in_(wanted),
            )
            .order_by(CIEnvironmentVariable.environment, CIEnvironmentVariable.name)
        ).all()
    out: dict[str, dict[str, str]] = {}
    for env, name, value in _within((tuple(row) for row in rows), budget):
        out.setdefault(env, {})[name] = value
    return out


def _within(variables: Iterable[_Entry], budget: int) -> Iterator[_Entry]:
    """Entries ending in ``(name, value)``, in order, until the next would take the total past
    ``budget`` bytes: the per-run bound cuts whole variables only."""
    size = 0
    for entry in variables:
        size += variable_size(entry[-2], entry[-1])
        if size > budget:
            return
        yield entry
