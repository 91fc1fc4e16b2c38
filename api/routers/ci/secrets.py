"""``/v1/secrets`` and ``/v1/repos/{id}/secrets``: a tenant's CI secrets, write-only.

Values are sealed before they are stored (``leasehold.records.ci.secrets``) and never returned: listing
shows names and times. Another tenant's repository answers 404 like a missing one.
"""

from __future__ import annotations

from fastapi import APIRouter, Response
from sqlalchemy.orm import sessionmaker

from api.ci.scoped import delete_in_scope, list_scope, put_in_scope
from api.deps import DbDep, KeyringDep, PrincipalDep
from api.schemas.ci.secrets import SecretList, SecretOut, SecretPut
from leasehold.records.api_keys import Principal
from leasehold.records.ci.secrets import Keyring, SecretError, delete_secret, list_secrets, put_secret

router = APIRouter(tags=["ci"])


async def _put(
    keyring: Keyring,
    db: sessionmaker,
    principal: Principal,
    repo_id: str | None,
    name: str,
    body: SecretPut,
    response: Response,
) -> SecretOut:
    value = body.value.get_secret_value()
    info = await put_in_scope(
        db,
        principal,
        repo_id,
        response,
        SecretError,
        lambda: put_secret(db, keyring, principal.tenant_id, repo_id, name, value),
    )
    return SecretOut.model_validate(info)


async def _list(db: sessionmaker, principal: Principal, repo_id: str | None) -> SecretList:
    infos = await list_scope(db, principal, repo_id, list_secrets)
    return SecretList(data=[SecretOut.model_validate(i) for i in infos])


@router.put("/v1/secrets/{name}", status_code=201)
async def put_tenant_secret(
    name: str,
    body: SecretPut,
    response: Response,
    principal: PrincipalDep,
    db: DbDep,
    keyring: KeyringDep,
) -> SecretOut:
    """Create (201) or replace (200) a tenant-wide secret."""
    return await _put(keyring, db, principal, None, name, body, response)


@router.get("/v1/secrets")
async def get_tenant_secrets(principal: PrincipalDep, db: DbDep) -> SecretList:
    """Names and update times of the tenant-wide secrets."""
    return await _list(db, principal, None)


@router.delete("/v1/secrets/{name}", status_code=204)
async def delete_tenant_secret(name: str, principal: PrincipalDep, db: DbDep) -> Response:
    return await delete_in_scope(db, principal, None, name, delete_secret, SecretError, "secret")


@router.put("/v1/repos/{repo_id}/secrets/{name}", status_code=201)
async def put_repo_secret(
    repo_id: str,
    name: str,
    body: SecretPut,
    response: Response,
    principal: PrincipalDep,
    db: DbDep,
    keyring: KeyringDep,
) -> SecretOut:
    """Create (201) or replace (200) a secret of one repository (it wins over a tenant-wide one)."""
    return await _put(keyring, db, principal, repo_id, name, body, response)


@router.get("/v1/repos/{repo_id}/secrets")
async def get_repo_secrets(repo_id: str, principal: PrincipalDep, db: DbDep) -> SecretList:
    return await _list(db, principal, repo_id)


@router.delete("/v1/repos/{repo_id}/secrets/{name}", status_code=204)
async def delete_repo_secret(repo_id: str, name: str, principal: PrincipalDep, db: DbDep) -> Response:
    return await delete_in_scope(db, principal, repo_id, name, delete_secret, SecretError, "secret")
