"""``/v1/repos/{id}/status-reporter``: report each run's state to the repository's git host
(``activities.ci.status_report``). Another tenant's repository answers 404 like a missing one;
the token and key are write-only; the API URL must be one the deployment lets reports reach
(``ci_status_schemes``, ``ci_status_allow_cidrs``), checked here and again at every report."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response

from api.deps import DbDep, KeyringDep, PrincipalDep, SettingsDep
from api.errors import invalid, not_found
from api.schemas.ci.status import StatusReporterOut, StatusReporterPut
from leasehold.records.ci.repos import get_repo
from leasehold.records.ci.status_reporters import (
    ReporterError,
    ReporterInfo,
    ReporterSetting,
    delete_reporter,
    get_reporter,
    put_reporter,
)
from leasehold.webhook_urls import AddressPolicy, RefusedUrl, parse_url

router = APIRouter(tags=["ci"])


def _out(info: ReporterInfo) -> StatusReporterOut:
    return StatusReporterOut.model_validate(info)


@router.put("/v1/repos/{repo_id}/status-reporter")
async def put_status_reporter(
    repo_id: str,
    body: StatusReporterPut,
    principal: PrincipalDep,
    db: DbDep,
    keyring: KeyringDep,
    settings: SettingsDep,
) -> StatusReporterOut:
    """Set (or replace) the repository's reporter; runs pushed after it report to it."""
    repo = await asyncio.to_thread(get_repo, db, principal.tenant_id, repo_id)
    if repo is None:
        raise not_found("repository")
    try:
        url = parse_url(body.api_url.rstrip("/"), settings.ci_status_schemes)
        AddressPolicy(settings.ci_status_allow_cidrs).check_literal(url)
    except RefusedUrl as exc:
        raise invalid("api_url", str(exc)) from None
    if (body.token is None) == (body.app is None):
        raise invalid("token", "give either a token or an app (app_id, installation_id, private_key)")
    setting = ReporterSetting(
        api_url=body.api_url,
        repository=body.repository or repo.name,
        token=body.token.get_secret_value() if body.token is not None else None,
        app_id=body.app.app_id if body.app else None,
        installation_id=body.app.installation_id if body.app else None,
        private_key=body.app.private_key.get_secret_value() if body.app else None,
    )
    try:
        info = await asyncio.to_thread(put_reporter, db, keyring, principal.tenant_id, repo_id, setting)
    except ReporterError as exc:
        field = f"app.{exc.field}" if exc.field in ("app_id", "installation_id", "private_key") else exc.field
        raise invalid(field, exc.message) from None
    return _out(info)


@router.get("/v1/repos/{repo_id}/status-reporter")
async def get_status_reporter(repo_id: str, principal: PrincipalDep, db: DbDep) -> StatusReporterOut:
    """The repository's reporter (404 when it has none)."""
    if await asyncio.to_thread(get_repo, db, principal.tenant_id, repo_id) is None:
        raise not_found("repository")
    info = await asyncio.to_thread(get_reporter, db, principal.tenant_id, repo_id)
    if info is None:
        raise not_found("status reporter")
    return _out(info)


@router.delete("/v1/repos/{repo_id}/status-reporter", status_code=204)
async def delete_status_reporter(repo_id: str, principal: PrincipalDep, db: DbDep) -> Response:
    """Stop reporting: from the next report on, runs of the repository send nothing."""
    if await asyncio.to_thread(get_repo, db, principal.tenant_id, repo_id) is None:
        raise not_found("repository")
    if not await asyncio.to_thread(delete_reporter, db, principal.tenant_id, repo_id):
        raise not_found("status reporter")
    return Response(status_code=204)
