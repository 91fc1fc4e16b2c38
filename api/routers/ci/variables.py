"""``/v1/variables`` and ``/v1/repos/{id}/variables``: a tenant's CI configuration variables
(GitHub's ``vars`` context), readable, unlike secrets. Another tenant's repository answers 404
like a missing one. A change applies to runs pushed after it."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from sqlalchemy.orm import sessionmaker

from api.ci.repos import require_repo
from api.deps import DbDep, PrincipalDep
from api.errors import invalid, not_found
from api.schemas.ci.variables import VariableList, VariableOut, VariablePut
from leasehold.records.api_keys import Principal
from leasehold.records.ci.variables import VariableError, delete_variable, list_variables, put_variable

router = APIRouter(tags=["ci"])


async def _put(
    db: sessionmaker, principal: Principal, repo_id: str | None, name: str, body: VariablePut, response: Response
) -> VariableOut:
    await require_repo(db, principal.tenant_id, repo_id)
    try:
        info, created = await asyncio.to_thread(put_variable, db, principal.tenant_id, repo_id, name, body.value)
    except VariableError as exc:
        raise invalid(exc.field, exc.message) from None
    response.status_code = 201 if created else 200
    return VariableOut.from_info(info)


async def _list(db: sessionmaker, principal: Principal, repo_id: str | None) -> VariableList:
    await require_repo(db, principal.tenant_id, repo_id)
    infos = await asyncio.to_thread(list_variables, db, principal.tenant_id, repo_id)
    return VariableList(data=[VariableOut.from_info(i) for i in infos])


async def _delete(db: sessionmaker, principal: Principal, repo_id: str | None, name: str) -> Response:
    await require_repo(db, principal.tenant_id, repo_id)
    try:
        removed = await asyncio.to_thread(delete_variable, db, principal.tenant_id, repo_id, name)
    except VariableError:
        removed = False
    if not removed:
        raise not_found("variable")
    return Response(status_code=204)


@router.put("/v1/variables/{name}", status_code=201)
async def put_tenant_variable(
    name: str, body: VariablePut, response: Response, principal: PrincipalDep, db: DbDep
) -> VariableOut:
    """Create (201) or replace (200) a tenant-wide variable."""
    return await _put(db, principal, None, name, body, response)


@router.get("/v1/variables")
async def get_tenant_variables(principal: PrincipalDep, db: DbDep) -> VariableList:
    return await _list(db, principal, None)


@router.delete("/v1/variables/{name}", status_code=204)
async def delete_tenant_variable(name: str, principal: PrincipalDep, db: DbDep) -> Response:
    return await _delete(db, principal, None, name)


@router.put("/v1/repos/{repo_id}/variables/{name}", status_code=201)
async def put_repo_variable(
    repo_id: str, name: str, body: VariablePut, response: Response, principal: PrincipalDep, db: DbDep
) -> VariableOut:
    """Create (201) or replace (200) a variable of one repository (it wins over a tenant-wide one)."""
    return await _put(db, principal, repo_id, name, body, response)


@router.get("/v1/repos/{repo_id}/variables")
async def get_repo_variables(repo_id: str, principal: PrincipalDep, db: DbDep) -> VariableList:
    return await _list(db, principal, repo_id)


@router.delete("/v1/repos/{repo_id}/variables/{name}", status_code=204)
async def delete_repo_variable(repo_id: str, name: str, principal: PrincipalDep, db: DbDep) -> Response:
    return await _delete(db, principal, repo_id, name)
