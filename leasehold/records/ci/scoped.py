"""Rows named within a scope: one tenant's (``repo_scope`` empty), one repository's, or one
environment's of a repository (``environment``, on tables that have the column).

Secrets and configuration variables are both such rows (columns ``tenant_id``, ``repo_scope``,
``name``), so finding, listing and deleting them, and reading what a repository's runs see, is
one query, here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, delete, select
from sqlalchemy.orm import Session, sessionmaker

from leasehold.records.base import Base

# ``repo_scope`` of a tenant-wide row (a real value, so the unique key on the scope works).
TENANT_SCOPE = ""

Row = TypeVar("Row", bound=Base)


def scope_of(repo_id: str | None) -> str:
    return repo_id or TENANT_SCOPE


def _in_scope(table: Any, tenant_id: str, scope: str, environment: str | None) -> tuple[ColumnElement[bool], ...]:
    where = (table.tenant_id == tenant_id, table.repo_scope == scope)
    return where if environment is None else (*where, table.environment == environment)


def existing_or_room(
    session: Session,
    model: type[Row],
    tenant_id: str,
    scope: str,
    name: str,
    most: int,
    full: Exception,
    environment: str | None = None,
) -> Row | None:
    """The scope's row ``name``; ``None`` when there is none and the scope holds fewer than
    ``most`` rows (room for it), else raises ``full``."""
    table: Any = model
    in_scope = _in_scope(table, tenant_id, scope, environment)
    row = session.scalar(select(model).where(*in_scope, table.name == name))
    if row is None and len(session.scalars(select(table.id).where(*in_scope)).all()) >= most:
        raise full
    return row


def list_scoped(
    factory: sessionmaker, model: type[Row], tenant_id: str, repo_id: str | None, environment: str | None = None
) -> list[Row]:
    """One scope's rows, by name (tenant-wide when ``repo_id`` is None)."""
    table: Any = model
    with factory() as session:
        return list(
            session.scalars(
                select(model).where(*_in_scope(table, tenant_id, scope_of(repo_id), environment)).order_by(table.name)
            ).all()
        )


def seen_by_repository(
    factory: sessionmaker, model: type[Row], tenant_id: str, repo_id: str, names: Iterable[str] | None = None
) -> list[Row]:
    """The tenant-wide rows and the repository's (only those named ``names``, when given),
    tenant-wide first: a mapping filled in this order keeps the repository's own row of a name
    over the tenant-wide one, as a run of the repository sees them."""
    table: Any = model
    where = [table.tenant_id == tenant_id, table.repo_scope.in_([TENANT_SCOPE, repo_id])]
    if names is not None:
        where.append(table.name.in_(sorted(names)))
    with factory() as session:
        rows: Sequence[Any] = session.scalars(select(model).where(*where)).all()
    return sorted(rows, key=lambda r: r.repo_scope != TENANT_SCOPE)


def delete_scoped(
    factory: sessionmaker,
    model: type[Base],
    tenant_id: str,
    repo_id: str | None,
    name: str,
    environment: str | None = None,
) -> bool:
    """Remove one named row of a scope; False when there was none."""
    table: Any = model
    with factory.begin() as session:
        result = session.execute(
            delete(model).where(*_in_scope(table, tenant_id, scope_of(repo_id), environment), table.name == name)
        )
    return bool(getattr(result, "rowcount", 0))
