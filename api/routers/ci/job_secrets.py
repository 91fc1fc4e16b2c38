"""``POST /v1/internal/ci/job-secrets``: the broker where CI workers trade an attempt's token
for that attempt's secrets (seed §6.4).

CI workers hold no key that opens secrets; the API does. A worker presents the token the run
workflow gave the attempt (``Authorization: Bearer <token>``) and the attempt it claims to
be. The answer is the values of the secrets that the job's workflow file declares and the
request names, of the run's own tenant and repository as the database records them, and only
while that attempt is the job's current, running attempt: a token of a finished, cancelled or
superseded attempt opens nothing. A wrong token counts as a failed authentication (429 after
too many). Not part of the public API (not in the OpenAPI document).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from typing import Annotated

from fastapi import APIRouter, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from temporalio.service import RPCError

from activities.ci.secrets import JOB_SECRETS_PATH
from api.deps import ClientDep, DbDep, KeyringDep, note_failed_auth, refuse_if_throttled
from api.errors import ApiError
from clients.ci.start import run_state
from leasehold.records.ci.repos import get_repo
from leasehold.records.ci.secrets import fetch_secrets
from workflows.ci.types.job import AttemptStatus
from workflows.ci.types.run import JobStatus

router = APIRouter(tags=["ci-internal"])
log = logging.getLogger(__name__)

token_bearer = HTTPBearer(auto_error=False, scheme_name="AttemptToken")


class JobSecretsClaim(BaseModel):
    """Which attempt asks, and for which of its job's secrets."""

    run_id: str = Field(pattern=r"^run_[0-9a-f]{24}$")
    job_id: str = Field(min_length=1, max_length=200)
    attempt: int = Field(ge=1)
    names: list[str] = Field(max_length=200)


class JobSecrets(BaseModel):
    secrets: dict[str, str]


def _refused(request: Request) -> ApiError:
    # One answer for every refusal: a caller learns nothing about which runs exist.
    note_failed_auth(request)
    return ApiError(404, "not_found", "no running attempt matches this token")


@router.post(JOB_SECRETS_PATH, include_in_schema=False)
async def job_secrets(
    claim: JobSecretsClaim,
    request: Request,
    client: ClientDep,
    db: DbDep,
    keyring: KeyringDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(token_bearer)],
) -> JobSecrets:
    refuse_if_throttled(request)
    token = credentials.credentials.strip() if credentials is not None else ""
    if not token:
        raise ApiError(401, "unauthorized", "send the attempt's token: 'Authorization: Bearer <token>'")
    try:
        state = await run_state(client, claim.run_id)
    except RPCError:
        raise _refused(request) from None
    job = state.job(claim.job_id)
    attempt = next((a for a in job.attempts if a.attempt == claim.attempt), None) if job else None
    digest = hashlib.sha256(token.encode()).hexdigest()
    if (
        job is None
        or attempt is None
        or job.status != JobStatus.IN_PROGRESS
        or job.attempt != claim.attempt
        or attempt.status != AttemptStatus.RUNNING
        or attempt.secrets_token_sha256 is None
        or not hmac.compare_digest(attempt.secrets_token_sha256, digest)
    ):
        raise _refused(request)
    if not state.secrets_allowed:
        return JobSecrets(secrets={})
    if await asyncio.to_thread(get_repo, db, state.tenant_id, state.repo_id) is None:
        log.warning(
            "run %s names repository %s, which tenant %s does not own", state.run_id, state.repo_id, state.tenant_id
        )
        raise _refused(request)
    declared = set(job.secret_names)
    wanted = [name for name in claim.names if name in declared]
    values = await asyncio.to_thread(fetch_secrets, db, keyring, state.tenant_id, state.repo_id, wanted)
    return JobSecrets(secrets=values)
