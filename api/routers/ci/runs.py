"""``/v1/runs``: CI runs and their jobs, read from ``CIRunWorkflow`` (its query and its search
attributes), cancelled by workflow cancellation, and jobs retried through a workflow Update.

Another tenant's run answers 404 exactly like a missing one.
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Query
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError

from api.ci.runs import QUERY_TIMEOUT_SECONDS, RUN_UNAVAILABLE, check_job_id, load_run
from api.deps import ClientDep, DbDep, PrincipalDep
from api.errors import ApiError, from_temporal, from_update_rejection, invalid, is_not_found, not_found
from api.schemas.ci.runs import DecisionIn, JobOut, RetryOut, RunList, RunOut, RunSummary
from leasehold.client.ci.start import cancel_run, decide_job, retry_job, run_state
from leasehold.records.api_keys import Principal
from leasehold.records.ci.repos import get_repo
from workflows import search_attributes as sa
from workflows.ci.ids import run_id_from_workflow_id
from workflows.ci.types.run import ApprovalRejectedReason, ApprovalRequest, RetryRejectedReason, RunStatus

router = APIRouter(tags=["ci"])
log = logging.getLogger(__name__)

MAX_LIST = 100
# The registered name of CIRunWorkflow (the class name; it sets no explicit name).
RUN_WORKFLOW_TYPE = "CIRunWorkflow"

_RETRY_STATUS = {
    RetryRejectedReason.UNKNOWN_JOB.value: (404, "not_found"),
    RetryRejectedReason.NOT_RETRYABLE.value: (409, "job_not_retryable"),
    RetryRejectedReason.LIMIT.value: (409, "retry_limit"),
}


_DECISION_STATUS = {
    ApprovalRejectedReason.UNKNOWN_JOB.value: (404, "not_found"),
    ApprovalRejectedReason.NOT_AWAITING.value: (409, "job_not_awaiting_approval"),
    ApprovalRejectedReason.NOT_APPROVER.value: (403, "not_an_approver"),
}


@router.get("/v1/runs/{run}")
async def get_run(run: str, principal: PrincipalDep, client: ClientDep) -> RunOut:
    """A run with its jobs: statuses, attempts, timings, exit codes and errors."""
    return RunOut.from_state(await load_run(client, principal, run))


def _quote(value: str) -> str:
    # Values reach here validated (tenant names, registered repo ids, enum statuses); quoting
    # is a second line of defence for the visibility query language.
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@router.get("/v1/runs")
async def list_runs(
    principal: PrincipalDep,
    client: ClientDep,
    db: DbDep,
    repo: str | None = Query(None, description="only this repository's runs"),
    status: str | None = Query(None, description="queued, in_progress, success, failure or cancelled"),
    limit: int = Query(20, ge=1, le=MAX_LIST),
) -> RunList:
    """The caller's runs, newest first, from Temporal visibility (search attributes)."""
    clauses = [f"WorkflowType = {_quote(RUN_WORKFLOW_TYPE)}", f"TenantId = {_quote(principal.tenant_id)}"]
    if repo is not None:
        if await asyncio.to_thread(get_repo, db, principal.tenant_id, repo) is None:
            raise not_found("repository")
        clauses.append(f"RepoId = {_quote(repo)}")
    if status is not None:
        if status not in {s.value for s in RunStatus}:
            raise invalid("status", f"status must be one of {', '.join(s.value for s in RunStatus)}")
        clauses.append(f"RunState = {_quote(status)}")
    query = " AND ".join(clauses)
    rows: list[RunSummary] = []
    try:
        async for execution in client.list_workflows(query, limit=limit):
            run = run_id_from_workflow_id(execution.id)
            if run is None:
                continue
            attributes = execution.typed_search_attributes
            rows.append(
                RunSummary(
                    id=run,
                    repo_id=attributes.get(sa.REPO_ID),
                    commit_sha=attributes.get(sa.COMMIT_SHA),
                    status=attributes.get(sa.RUN_STATE),
                    created_at=execution.start_time,
                    closed_at=execution.close_time,
                )
            )
    except RPCError as exc:
        raise from_temporal(exc, RUN_UNAVAILABLE, call="listing runs") from None
    return RunList(data=rows)


@router.post("/v1/runs/{run}/cancel", status_code=202)
async def cancel(run: str, principal: PrincipalDep, client: ClientDep) -> RunOut:
    """Cancel a run: pending jobs are cancelled, running ones get SIGTERM then SIGKILL,
    ``if: always()`` jobs still run. A finished run is answered as it is."""
    state = await load_run(client, principal, run)
    try:
        await cancel_run(client, run)
    except RPCError as exc:
        # The workflow already closed: nothing is left to cancel.
        if not is_not_found(exc):
            raise from_temporal(exc, RUN_UNAVAILABLE, call=f"cancel of run {run}") from None
    try:
        state = await asyncio.wait_for(run_state(client, run), timeout=QUERY_TIMEOUT_SECONDS)
    except (RPCError, TimeoutError):
        pass  # the cancellation is recorded; the previous view is still an honest answer
    return RunOut.from_state(state)


@router.post("/v1/runs/{run}/jobs/{job}/retry", status_code=202)
async def retry(run: str, job: str, principal: PrincipalDep, client: ClientDep) -> RetryOut:
    """Re-run a failed or cancelled job and its dependents on the same commit, as new attempts."""
    check_job_id(job)
    state = await load_run(client, principal, run)
    if state.job(job) is None:
        raise not_found("job")
    try:
        answer = await retry_job(client, run, job, requested_by=principal.user_id)
    except WorkflowUpdateFailedError as exc:
        refused = ApiError(409, "retry_refused", "the run refused the retry")
        raise from_update_rejection(exc, _RETRY_STATUS, refused, "job", call=f"retry of {run}/{job}") from None
    except RPCError as exc:
        # NOT_FOUND: the run's retry window is over and its workflow closed.
        closed = ApiError(409, "run_closed", "the run is closed; push again to run it anew")
        raise from_temporal(exc, RUN_UNAVAILABLE, missing=closed, call=f"retry of {run}/{job}") from None
    return RetryOut(run_id=answer.run_id, job_id=answer.job_id, round=answer.round, reset_jobs=answer.reset_jobs)


async def _decide(
    run: str, job: str, approved: bool, body: DecisionIn | None, principal: Principal, client: Client
) -> JobOut:
    check_job_id(job)
    state = await load_run(client, principal, run)
    if state.job(job) is None:
        raise not_found("job")
    request = ApprovalRequest(
        job_id=job, approved=approved, user_id=principal.user_id, comment=body.comment if body else None
    )
    try:
        answer = await decide_job(client, run, request)
    except WorkflowUpdateFailedError as exc:
        refused = ApiError(409, "decision_refused", "the run refused the decision")
        raise from_update_rejection(exc, _DECISION_STATUS, refused, "job", call=f"decision on {run}/{job}") from None
    except RPCError as exc:
        closed = ApiError(409, "run_closed", "the run is closed")
        raise from_temporal(exc, RUN_UNAVAILABLE, missing=closed, call=f"decision on {run}/{job}") from None
    return JobOut.from_state(answer)


@router.post("/v1/runs/{run}/jobs/{job}/approve")
async def approve(
    run: str, job: str, principal: PrincipalDep, client: ClientDep, body: DecisionIn | None = None
) -> JobOut:
    """Approve a job awaiting approval (a user of the run's tenant, among the environment's
    approvers when it names any); the decision is recorded in the job's ``approvals``."""
    return await _decide(run, job, True, body, principal, client)


@router.post("/v1/runs/{run}/jobs/{job}/reject")
async def reject(
    run: str, job: str, principal: PrincipalDep, client: ClientDep, body: DecisionIn | None = None
) -> JobOut:
    """Reject a job awaiting approval: it fails and its dependents are skipped; recorded too."""
    return await _decide(run, job, False, body, principal, client)
