"""``/v1/repos/{id}/environments``: which deployment environments of a repository require approval,
and who may give it. Another tenant's repository answers 404 like a missing one."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from api.ci.repos import require_repo
from api.deps import DbDep, PrincipalDep
from api.errors import invalid
from api.schemas.ci.runs import EnvironmentList, EnvironmentOut, EnvironmentPut
from leasehold.records.ci.environments import EnvironmentError, list_environments, set_environment

router = APIRouter(tags=["ci"])


@router.put("/v1/repos/{repo_id}/environments/{name}")
async def put_environment(
    repo_id: str, name: str, body: EnvironmentPut, principal: PrincipalDep, db: DbDep
) -> EnvironmentOut:
    """Create or change an environment's protection; applies to runs pushed after it."""
    await require_repo(db, principal.tenant_id, repo_id)
    try:
        record = await asyncio.to_thread(
            set_environment, db, principal.tenant_id, repo_id, name, body.required_approval, body.approvers
        )
    except EnvironmentError as exc:
        raise invalid(exc.field, exc.message) from None
    return EnvironmentOut.model_validate(record)


@router.get("/v1/repos/{repo_id}/environments")
async def get_environments(repo_id: str, principal: PrincipalDep, db: DbDep) -> EnvironmentList:
    """The repository's environments and their protection."""
    await require_repo(db, principal.tenant_id, repo_id)
    records = await asyncio.to_thread(list_environments, db, principal.tenant_id, repo_id)
    return EnvironmentList(data=[EnvironmentOut.model_validate(r) for r in records])
