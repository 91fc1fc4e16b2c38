"""What ``/v1/secrets`` and ``/v1/variables`` share: named values of one scope, the tenant's
(``repo_id`` None) or one of its repositories' (``leasehold.records.ci.scoped`` stores both).

Each checks the scope, then runs the record call on a thread; the routers keep their own
schemas and names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from fastapi import Response
from sqlalchemy.orm import sessionmaker

from api.ci.repos import require_repo
from api.errors import invalid, not_found
from leasehold.records.api_keys import Principal
from leasehold.records.ci.secrets import SecretError
from leasehold.records.ci.variables import VariableError

InfoT = TypeVar("InfoT")

# Both name the offending input in ``field``; answered 422 with it.
ScopedError = type[SecretError] | type[VariableError]


async def put_in_scope(
    db: sessionmaker,
    principal: Principal,
    repo_id: str | None,
    response: Response,
    error: ScopedError,
    write: Callable[[], tuple[InfoT, bool]],
) -> InfoT:
    """Create (201) or replace (200) a value; ``write`` returns its info and whether it was new."""
    await require_repo(db, principal.tenant_id, repo_id)
    try:
        info, created = await asyncio.to_thread(write)
    except error as exc:
        raise invalid(exc.field, exc.message) from None
    response.status_code = 201 if created else 200
    return info


async def list_scope(
    db: sessionmaker,
    principal: Principal,
    repo_id: str | None,
    read: Callable[[sessionmaker, str, str | None], list[InfoT]],
) -> list[InfoT]:
    await require_repo(db, principal.tenant_id, repo_id)
    return await asyncio.to_thread(read, db, principal.tenant_id, repo_id)


async def delete_in_scope(
    db: sessionmaker,
    principal: Principal,
    repo_id: str | None,
    name: str,
    remove: Callable[[sessionmaker, str, str | None, str], bool],
    error: ScopedError,
    what: str,
) -> Response:
    """204, or 404 ``what`` when there was none (an invalid name cannot name one)."""
    await require_repo(db, principal.tenant_id, repo_id)
    try:
        removed = await asyncio.to_thread(remove, db, principal.tenant_id, repo_id, name)
    except error:
        removed = False
    if not removed:
        raise not_found(what)
    return Response(status_code=204)
