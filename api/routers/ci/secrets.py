"""``/v1/secrets`` and ``/v1/repos/{id}/secrets``: a tenant's CI secrets, write-only.

Values are sealed before they are stored (``leasehold.records.ci.secrets``) and never returned: listing
shows names and times. Another tenant's repository answers 404 like a missing one.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from sqlalchemy.orm import sessionmaker

from api.ci.repos import require_repo
from api.deps import DbDep, KeyringDep, PrincipalDep
from api.errors import invalid, not_found
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
    await require_repo(db, principal.tenant_id, repo_id)
    try:
        info, created = await asyncio.to_thread(
            put_secret, db, keyring, principal.tenant_id, repo_id, name, body.value.get_secret_value()
        )
    except SecretError as exc:
        raise invalid(exc.field, exc.message) from None
    response.status_code = 201 if created else 200
    return SecretOut.from_info(info)


async def _delete(db: sessionmaker, principal: Principal, repo_id: str | None, name: str) -> Response:
    await require_repo(db, principal.tenant_id, repo_id)
    try:
        removed = await asyncio.to_thread(delete_secret, db, principal.tenant_id, repo_id, name)
    except SecretError:
        removed = False
    if not removed:
        raise not_found("secret")
    return Response(status_code=204)


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
    infos = await asyncio.to_thread(list_secrets, db, principal.tenant_id, None)
    return SecretList(data=[SecretOut.from_info(i) for i in infos])


@router.delete("/v1/secrets/{name}", status_code=204)
async def delete_tenant_secret(name: str, principal: PrincipalDep, db: DbDep) -> Response:
    return await _delete(db, principal, None, name)


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
    await require_repo(db, principal.tenant_id, repo_id)
    infos = await asyncio.to_thread(list_secrets, db, principal.tenant_id, repo_id)
    return SecretList(data=[SecretOut.from_info(i) for i in infos])


@router.delete("/v1/repos/{repo_id}/secrets/{name}", status_code=204)
async def delete_repo_secret(repo_id: str, name: str, principal: PrincipalDep, db: DbDep) -> Response:
    return await _delete(db, principal, repo_id, name)
