"""``/v1/runs``: CI runs and their jobs, read from the read model (``ci_runs``, written by
``CIRunWorkflow`` at each transition, kept after the engine forgets the run), cancelled by
workflow cancellation, and jobs retried or decided through workflow Updates.

Another tenant's run answers 404 exactly like a missing one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from fastapi import APIRouter, Query, Response
from sqlalchemy.orm import sessionmaker
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError

from api.ci.attempt_ref import AttemptRefDep
from api.ci.queue_explanation import QueueExplainerDep
from api.ci.repos import require_repo
from api.ci.runs import (
    QUERY_TIMEOUT_SECONDS,
    RUN_UNAVAILABLE,
    AttemptQuery,
    attempt_prefix,
    chosen_attempt,
    decode_cursor,
    encode_cursor,
    load_job,
    load_job_run,
    load_run,
    stored_run,
)
from api.deps import ClientDep, DbDep, PrincipalDep
from api.errors import ApiError, from_temporal, from_update_rejection, invalid, is_not_found
from api.schemas.ci.runs import (
    AnnotationOut,
    AnnotationPage,
    DecisionIn,
    JobOut,
    RerunOut,
    RetryOut,
    RunList,
    RunOut,
    RunSummary,
)
from clients.ci.start import cancel_run, decide_job, rerun, retry_job, run_state
from leasehold.records.api_keys import Principal
from leasehold.records.ci.run_numbers import numbers_of_runs
from leasehold.records.ci.runs import RunCursor, annotations_of_attempt
from leasehold.records.ci.runs import list_runs as list_run_records
from leasehold.storage import ObjectNotFound
from workflows.ci.ids import step_summary_key
from workflows.ci.types.run import ApprovalRejectedReason, ApprovalRequest, CIRunState, RetryRejectedReason, RunStatus

router = APIRouter(tags=["ci"])
log = logging.getLogger(__name__)

UpdateT = TypeVar("UpdateT")

MAX_LIST = 100
# After a retry or a decision the run workflow writes its new state in the background; the
# answer waits this long for the read model to show it, so the caller's next read does.
PROJECTION_WAIT_SECONDS = 5.0
PROJECTION_POLL_SECONDS = 0.05

_RETRY_STATUS = {
    RetryRejectedReason.UNKNOWN_JOB.value: (404, "not_found"),
    RetryRejectedReason.NOT_RETRYABLE.value: (409, "job_not_retryable"),
    RetryRejectedReason.LIMIT.value: (409, "retry_limit"),
}


_RERUN_STATUS = {
    RetryRejectedReason.RUN_NOT_FINISHED.value: (409, "run_in_progress"),
    RetryRejectedReason.LIMIT.value: (409, "retry_limit"),
}

_DECISION_STATUS = {
    ApprovalRejectedReason.UNKNOWN_JOB.value: (404, "not_found"),
    ApprovalRejectedReason.NOT_AWAITING.value: (409, "job_not_awaiting_approval"),
    ApprovalRejectedReason.NOT_APPROVER.value: (403, "not_an_approver"),
}


@router.get("/v1/runs/{run}")
async def get_run(
    run: str, principal: PrincipalDep, client: ClientDep, db: DbDep, explainer: QueueExplainerDep
) -> RunOut:
    """A run with its jobs: statuses, attempts, timings, exit codes and errors; each job not
    started yet says what it waits for (``queue``)."""
    state = await load_run(db, client, principal, run)
    return RunOut.from_state(state, await explainer.explain(state), await _run_number(db, principal, state.run_id))


@router.get("/v1/runs/{run}/jobs/{job}")
async def get_job(
    run: str, job: str, principal: PrincipalDep, client: ClientDep, db: DbDep, explainer: QueueExplainerDep
) -> JobOut:
    """One job of a run, as in the run; while it has not started, ``queue`` says what it waits for."""
    state, found = await load_job(db, client, principal, run, job)
    queues = await explainer.explain(state, only=job)
    return JobOut.from_state(found, queues.get(job))


@router.get(
    "/v1/runs/{run}/jobs/{job}/summary",
    response_class=Response,
    responses={200: {"content": {"text/markdown": {}}, "description": "the attempt's step summary"}},
)
async def get_step_summary(ref: AttemptRefDep) -> Response:
    """The markdown the attempt's steps wrote to ``$GITHUB_STEP_SUMMARY``, found as its log is
    (another tenant's run is a 404). Served as text with ``nosniff``: it is the job's own text,
    never rendered here."""
    job, store = ref.job, ref.store
    state = await load_job_run(ref.db, ref.client, ref.principal, ref.run, job)
    chosen = chosen_attempt(state, job, ref.attempt)
    key = chosen.log.summary_key if chosen is not None and chosen.log is not None else None
    # Only the one key the attempt's prefix allows, whatever the state says.
    if chosen is None or key is None or key != step_summary_key(attempt_prefix(state, job, chosen)):
        raise ApiError(404, "not_found", "no step summary")
    try:
        data = await asyncio.to_thread(store.get, key)
    except ObjectNotFound:
        raise ApiError(404, "not_found", "no step summary") from None
    return Response(data, media_type="text/markdown; charset=utf-8", headers={"X-Content-Type-Options": "nosniff"})


@router.get("/v1/runs/{run}/jobs/{job}/annotations")
async def list_annotations(
    run: str,
    job: str,
    principal: PrincipalDep,
    client: ClientDep,
    db: DbDep,
    attempt: AttemptQuery = None,
    after: int = Query(0, ge=0, description="next_after of the previous page"),
    limit: int = Query(MAX_LIST, ge=1, le=MAX_LIST),
) -> AnnotationPage:
    """The annotations of one attempt of a job, in the order its steps printed them, from the
    read model (another tenant's run is a 404, as for logs)."""
    state = await load_job_run(db, client, principal, run, job)
    chosen = chosen_attempt(state, job, attempt)
    if chosen is None:
        return AnnotationPage(run_id=state.run_id, job_id=job, attempt=None)
    rows = await asyncio.to_thread(
        annotations_of_attempt, db, principal.tenant_id, state.run_id, job, chosen.attempt, after, limit + 1
    )
    data = [AnnotationOut.model_validate(row) for row in rows[:limit]]
    has_more = len(rows) > limit
    return AnnotationPage(
        run_id=state.run_id,
        job_id=job,
        attempt=chosen.attempt,
        data=data,
        has_more=has_more,
        next_after=data[-1].ordinal if has_more and data else None,
    )


@router.get("/v1/runs")
async def list_runs(
    principal: PrincipalDep,
    db: DbDep,
    repo: str | None = Query(None, description="only this repository's runs"),
    status: str | None = Query(None, description="queued, in_progress, success, failure or cancelled"),
    limit: int = Query(20, ge=1, le=MAX_LIST),
    after: str | None = Query(None, max_length=512, description="next_cursor of the previous page"),
) -> RunList:
    """The caller's runs, newest first, from the read model."""
    await require_repo(db, principal.tenant_id, repo)
    if status is not None and status not in {s.value for s in RunStatus}:
        raise invalid("status", f"status must be one of {', '.join(s.value for s in RunStatus)}")
    cursor = decode_cursor(after) if after is not None else None
    records = await asyncio.to_thread(
        list_run_records, db, principal.tenant_id, repo_id=repo, status=status, after=cursor, limit=limit + 1
    )
    page = records[:limit]
    numbers = await asyncio.to_thread(numbers_of_runs, db, principal.tenant_id, [r.run_id for r in page])
    rows = [RunSummary.model_validate(r).model_copy(update={"run_number": numbers.get(r.run_id)}) for r in page]
    more = len(records) > limit
    last = page[-1] if page else None
    next_cursor = encode_cursor(RunCursor(last.created_at, last.run_id)) if more and last is not None else None
    return RunList(data=rows, has_more=more, next_cursor=next_cursor)


async def _run_number(db: sessionmaker, principal: Principal, run: str) -> int | None:
    """The run's ``github.run_number`` (assigned when its push was listed, before it started, so
    a run the engine answers for has it too)."""
    numbers = await asyncio.to_thread(numbers_of_runs, db, principal.tenant_id, [run])
    return numbers.get(run)


async def _projected(db: sessionmaker, principal: Principal, run: str, shows: Callable[[CIRunState], bool]) -> None:
    """Wait (bounded) until the read model's copy of the run ``shows`` what the engine just did."""
    deadline = time.monotonic() + PROJECTION_WAIT_SECONDS
    while time.monotonic() < deadline:
        state = await stored_run(db, principal, run)
        if state is None or shows(state):
            return
        await asyncio.sleep(PROJECTION_POLL_SECONDS)
    log.warning("run %s: the read model did not show the change within %ss", run, PROJECTION_WAIT_SECONDS)


@router.post("/v1/runs/{run}/cancel", status_code=202)
async def cancel(run: str, principal: PrincipalDep, client: ClientDep, db: DbDep) -> RunOut:
    """Cancel a run: pending jobs are cancelled, running ones get SIGTERM then SIGKILL,
    ``if: always()`` jobs still run. A finished run is answered as it is."""
    state = await load_run(db, client, principal, run)
    try:
        await cancel_run(client, run)
    except RPCError as exc:
        # The workflow already closed: nothing is left to cancel.
        if not is_not_found(exc):
            raise from_temporal(exc, RUN_UNAVAILABLE, call=f"cancel of run {run}") from None
    try:
        state = await asyncio.wait_for(run_state(client, run), timeout=QUERY_TIMEOUT_SECONDS)
    except (RPCError, TimeoutError):
        pass  # closed (or forgotten) by the engine, or slow: the read model's view is an honest answer
    return RunOut.from_state(state, run_number=await _run_number(db, principal, state.run_id))


async def _job_update(
    update: Awaitable[UpdateT],
    statuses: Mapping[str, tuple[int, str]],
    refused: ApiError,
    closed: ApiError,
    call: str,
    param: str = "job",
) -> UpdateT:
    """The answer of an Update about one job of a run: a rejection as ``statuses`` maps it (else
    ``refused``), a run the engine no longer has as ``closed``."""
    try:
        return await update
    except WorkflowUpdateFailedError as exc:
        raise from_update_rejection(exc, statuses, refused, param, call=call) from None
    except RPCError as exc:
        raise from_temporal(exc, RUN_UNAVAILABLE, missing=closed, call=call) from None


@router.post("/v1/runs/{run}/jobs/{job}/retry", status_code=202)
async def retry(run: str, job: str, principal: PrincipalDep, client: ClientDep, db: DbDep) -> RetryOut:
    """Re-run a failed or cancelled job and its dependents on the same commit, as new attempts."""
    await load_job(db, client, principal, run, job)  # 404 before the update is sent
    answer = await _job_update(
        retry_job(client, run, job, requested_by=principal.user_id),
        _RETRY_STATUS,
        ApiError(409, "retry_refused", "the run refused the retry"),
        # NOT_FOUND: the run's retry window is over and its workflow closed.
        ApiError(409, "run_closed", "the run is closed; push again to run it anew"),
        call=f"retry of {run}/{job}",
    )
    await _projected(db, principal, run, lambda s: (j := s.job(job)) is not None and j.round >= answer.round)
    return RetryOut(run_id=answer.run_id, job_id=answer.job_id, round=answer.round, reset_jobs=answer.reset_jobs)


@router.post("/v1/runs/{run}/rerun", status_code=202)
async def rerun_run(run: str, principal: PrincipalDep, client: ClientDep, db: DbDep) -> RerunOut:
    """Re-run every job of a finished run on the same commit, successful ones included, as the
    run's next attempt (``github.run_attempt``), as GitHub's "Re-run all jobs" does."""
    state = await load_run(db, client, principal, run)  # 404 before the update is sent
    attempts = state.retries
    answer = await _job_update(
        rerun(client, run, requested_by=principal.user_id),
        _RERUN_STATUS,
        ApiError(409, "rerun_refused", "the run refused the re-run"),
        ApiError(409, "run_closed", "the run is closed; push again to run it anew"),
        call=f"re-run of {run}",
        param="run",
    )
    await _projected(db, principal, run, lambda s: s.retries > attempts)
    return RerunOut(run_id=answer.run_id, run_attempt=answer.run_attempt, reset_jobs=answer.reset_jobs)


async def _decide(
    run: str, job: str, approved: bool, body: DecisionIn | None, principal: Principal, client: Client, db: sessionmaker
) -> JobOut:
    _, found = await load_job(db, client, principal, run, job)
    decided = len(found.approvals)
    request = ApprovalRequest(
        job_id=job, approved=approved, user_id=principal.user_id, comment=body.comment if body else None
    )
    answer = await _job_update(
        decide_job(client, run, request),
        _DECISION_STATUS,
        ApiError(409, "decision_refused", "the run refused the decision"),
        ApiError(409, "run_closed", "the run is closed"),
        call=f"decision on {run}/{job}",
    )
    await _projected(db, principal, run, lambda s: (j := s.job(job)) is not None and len(j.approvals) > decided)
    return JobOut.from_state(answer)


@router.post("/v1/runs/{run}/jobs/{job}/approve")
async def approve(
    run: str, job: str, principal: PrincipalDep, client: ClientDep, db: DbDep, body: DecisionIn | None = None
) -> JobOut:
    """Approve a job awaiting approval (a user of the run's tenant, among the environment's
    approvers when it names any); the decision is recorded in the job's ``approvals``."""
    return await _decide(run, job, True, body, principal, client, db)


@router.post("/v1/runs/{run}/jobs/{job}/reject")
async def reject(
    run: str, job: str, principal: PrincipalDep, client: ClientDep, db: DbDep, body: DecisionIn | None = None
) -> JobOut:
    """Reject a job awaiting approval: it fails and its dependents are skipped; recorded too."""
    return await _decide(run, job, False, body, principal, client, db)
