"""``/v1/repos``: a tenant registers the repositories whose pushes become CI runs (the
keyring that seals their webhook secrets is set up by ``api.ci.startup`` when the app starts)."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Request

from api.deps import DbDep, PrincipalDep
from api.errors import ApiError, invalid, not_found
from api.schemas.ci.runs import RepoCreate, RepoList, RepoOut
from leasehold.records.ci.repos import (
    RepoError,
    RepoExists,
    add_repo,
    get_repo,
    list_repos,
)

log = logging.getLogger(__name__)


router = APIRouter(tags=["ci"])


@router.post("/v1/repos", status_code=201)
async def create_repo(body: RepoCreate, principal: PrincipalDep, db: DbDep, request: Request) -> RepoOut:
    """Register a repository for the caller's tenant; the webhook secret is never returned.

    ``clone_url`` must be allowed by the operator: ``https://`` to a public host by default,
    a local path only below ``LEASEHOLD_CI_LOCAL_REPO_ROOT``."""
    try:
        record = await asyncio.to_thread(
            add_repo,
            db,
            principal.tenant_id,
            body.name,
            body.clone_url,
            body.webhook_secret.get_secret_value(),
            body.default_branch,
            body.github_id,
            policy=request.app.state.clone_policy,
            keyring=request.app.state.secrets_keyring,
        )
    except RepoExists as exc:
        raise ApiError(409, "repo_exists", exc.message, param=exc.field) from None
    except RepoError as exc:
        raise invalid(exc.field, exc.message) from None
    return RepoOut.model_validate(record)


@router.get("/v1/repos")
async def get_repos(principal: PrincipalDep, db: DbDep) -> RepoList:
    """The caller's repositories."""
    records = await asyncio.to_thread(list_repos, db, principal.tenant_id)
    return RepoList(data=[RepoOut.model_validate(r) for r in records])


@router.get("/v1/repos/{repo_id}")
async def get_one_repo(repo_id: str, principal: PrincipalDep, db: DbDep) -> RepoOut:
    """One repository; another tenant's answers 404 like a missing one."""
    record = await asyncio.to_thread(get_repo, db, principal.tenant_id, repo_id)
    if record is None:
        raise not_found("repository")
    return RepoOut.model_validate(record)
