"""``/v1/variables``, ``/v1/repos/{id}/variables`` and ``/v1/repos/{id}/environments/{env}/variables``:
a tenant's CI configuration variables (GitHub's ``vars`` context), readable, unlike secrets.
Another tenant's repository answers 404 like a missing one. A change applies to runs pushed
after it."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Response
from sqlalchemy.orm import sessionmaker

from api.ci.scoped import delete_in_scope, list_scope, put_in_scope
from api.deps import DbDep, PrincipalDep
from api.errors import invalid
from api.schemas.ci.variables import VariableList, VariableOut, VariablePut
from leasehold.records.api_keys import Principal
from leasehold.records.ci.variables import VariableError, delete_variable, list_variables, put_variable

router = APIRouter(tags=["ci"])


async def _put(
    db: sessionmaker,
    principal: Principal,
    repo_id: str | None,
    name: str,
    body: VariablePut,
    response: Response,
    environment: str | None = None,
) -> VariableOut:
    info = await put_in_scope(
        db,
        principal,
        repo_id,
        response,
        VariableError,
        lambda: put_variable(db, principal.tenant_id, repo_id, name, body.value, environment),
    )
    return VariableOut.model_validate(info)


async def _list(
    db: sessionmaker, principal: Principal, repo_id: str | None, environment: str | None = None
) -> VariableList:
    try:
        infos = await list_scope(db, principal, repo_id, partial(list_variables, environment=environment))
    except VariableError as exc:  # an environment name that cannot be one
        raise invalid(exc.field, exc.message) from None
    return VariableList(data=[VariableOut.model_validate(i) for i in infos])


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
    return await delete_in_scope(db, principal, None, name, delete_variable, VariableError, "variable")


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
    return await delete_in_scope(db, principal, repo_id, name, delete_variable, VariableError, "variable")


@router.put("/v1/repos/{repo_id}/environments/{environment}/variables/{name}", status_code=201)
async def put_environment_variable(
    repo_id: str,
    environment: str,
    name: str,
    body: VariablePut,
    response: Response,
    principal: PrincipalDep,
    db: DbDep,
) -> VariableOut:
    """Create (201) or replace (200) a variable of one deployment environment of a repository: a
    job naming the environment (``environment:``) sees it over the repository's and the
    tenant's. The environment need not be configured (``/environments/{name}``)."""
    return await _put(db, principal, repo_id, name, body, response, environment)


@router.get("/v1/repos/{repo_id}/environments/{environment}/variables")
async def get_environment_variables(repo_id: str, environment: str, principal: PrincipalDep, db: DbDep) -> VariableList:
    return await _list(db, principal, repo_id, environment)


@router.delete("/v1/repos/{repo_id}/environments/{environment}/variables/{name}", status_code=204)
async def delete_environment_variable(
    repo_id: str, environment: str, name: str, principal: PrincipalDep, db: DbDep
) -> Response:
    remove = partial(delete_variable, environment=environment)
    return await delete_in_scope(db, principal, repo_id, name, remove, VariableError, "variable")
