"""Client-side entry points to CI for the API and the CLI: start a push, read, cancel and retry runs.

Light: only the Temporal client and the CI payloads. Errors are Temporal's
(``RPCError`` NOT_FOUND for an unknown run, ``WorkflowUpdateFailedError`` for a refused retry,
whose ``cause`` is an ``ApplicationError`` with ``type`` in ``RetryRejectedReason``).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client, Schedule, WorkflowHandle
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError

from leasehold.temporal import ensure_schedule, interval_schedule
from workflows import search_attributes as sa
from workflows.ci.ids import push_id, push_workflow_id, run_workflow_id
from workflows.ci.push import CIPushWorkflow
from workflows.ci.reconcile import CIReconcileWorkflow
from workflows.ci.run import CIRunWorkflow
from workflows.ci.types.push import CIPushInput, CIPushState
from workflows.ci.types.reconcile import ReconcileInput
from workflows.ci.types.run import (
    ApprovalRequest,
    CIRunState,
    JobState,
    RerunRequest,
    RerunResponse,
    RetryJobRequest,
    RetryJobResponse,
)
from workflows.queues import orchestration_queue


async def start_push(client: Client, inp: CIPushInput) -> str:
    """Durably accept a push; returns its push id. Idempotent: the same repo + commit + ref
    maps onto the same push workflow (running or completed), so redeliveries create nothing."""
    push = inp.push
    pid = push_id(push.repo_id, push.commit_sha, push.ref, push.dispatch_key)
    try:
        await _start_push_workflow(
            client, inp, pid, WorkflowIDConflictPolicy.USE_EXISTING, SearchAttributePair(sa.COMMIT_SHA, push.commit_sha)
        )
    except WorkflowAlreadyStartedError:
        pass  # completed earlier with success: its runs exist
    return pid


async def _start_push_workflow(
    client: Client,
    inp: CIPushInput,
    pid: str,
    conflict: WorkflowIDConflictPolicy,
    *attributes: SearchAttributePair[str],
    memo: dict[str, str] | None = None,
) -> None:
    """Start push ``pid``'s workflow, searchable by tenant, repository and ``attributes``."""
    push = inp.push
    await client.start_workflow(
        CIPushWorkflow.run,
        inp,
        id=push_workflow_id(pid),
        task_queue=orchestration_queue(push.queue_prefix),
        id_conflict_policy=conflict,
        # A push whose git work failed (unreachable clone URL) may be redelivered and retried,
        # and a dispatch that failed (a bad input) sent again under its key.
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
        memo=memo,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(sa.TENANT_ID, push.tenant_id),
                SearchAttributePair(sa.REPO_ID, push.repo_id),
                *attributes,
            ]
        ),
    )


class DispatchConflict(Exception):
    """An Idempotency-Key already used for a dispatch with a different request."""


# Memo key of a dispatch's push workflow: the digest of the request it was started for.
DISPATCH_REQUEST_MEMO = "dispatch_request"


async def start_dispatch(client: Client, inp: CIPushInput, request_digest: str) -> str:
    """Start a ``workflow_dispatch`` (``inp.push.dispatch_key`` names it); returns its push id.

    Each key is one dispatch: the same key again finds the same push (and so the same run)
    while the request is the same, and raises ``DispatchConflict`` when it is not. A dispatch
    that failed (a bad input) may be sent again under its key."""
    push = inp.push
    pid = push_id(push.repo_id, push.commit_sha, push.ref, push.dispatch_key)
    try:
        await _start_push_workflow(
            client, inp, pid, WorkflowIDConflictPolicy.FAIL, memo={DISPATCH_REQUEST_MEMO: request_digest}
        )
    except WorkflowAlreadyStartedError:
        description = await client.get_workflow_handle(push_workflow_id(pid)).describe()
        if await description.memo_value(DISPATCH_REQUEST_MEMO, None) != request_digest:
            raise DispatchConflict(pid) from None
    return pid


async def push_state(client: Client, pid: str) -> CIPushState:
    """Progress of a push: which runs it created (``status == done``) or why it failed."""
    handle = client.get_workflow_handle_for(CIPushWorkflow.run, push_workflow_id(pid))
    return await handle.query(CIPushWorkflow.state)


def run_handle(client: Client, run: str) -> WorkflowHandle[CIRunWorkflow, CIRunState]:
    """Typed handle of a run's workflow."""
    return client.get_workflow_handle_for(CIRunWorkflow.run, run_workflow_id(run))


async def run_state(client: Client, run: str) -> CIRunState:
    """The run and its jobs: statuses, attempts, timings, exit codes, errors, log prefixes."""
    return await run_handle(client, run).query(CIRunWorkflow.state)


async def cancel_run(client: Client, run: str) -> None:
    """Cancel a run: pending jobs cancelled, running ones SIGTERM then SIGKILL, ``if: always()``
    jobs still run, the run ends ``cancelled``. A finished run stays as it was."""
    await run_handle(client, run).cancel()


async def retry_job(client: Client, run: str, job_id: str, requested_by: str | None = None) -> RetryJobResponse:
    """Re-run a failed or cancelled job and its dependents as new attempts (workflow Update)."""
    return await run_handle(client, run).execute_update(
        CIRunWorkflow.retry_job, RetryJobRequest(job_id=job_id, requested_by=requested_by)
    )


async def rerun(client: Client, run: str, requested_by: str | None = None) -> RerunResponse:
    """Re-run every job of a finished run, successful ones included (workflow Update)."""
    return await run_handle(client, run).execute_update(CIRunWorkflow.rerun, RerunRequest(requested_by=requested_by))


async def decide_job(client: Client, run: str, request: ApprovalRequest) -> JobState:
    """Approve or reject a job awaiting approval (workflow Update); returns the job's state."""
    return await run_handle(client, run).execute_update(CIRunWorkflow.decide, request)


def reconcile_schedule_id(queue_prefix: str) -> str:
    """One reconciler schedule per deployment (task-queue prefix)."""
    return f"{queue_prefix}ci-reconcile"


def _reconcile_schedule(queue_prefix: str, interval_seconds: float) -> Schedule:
    # A slow pass (many repositories) is not overlapped by the next one.
    return interval_schedule(
        CIReconcileWorkflow.run,
        ReconcileInput(queue_prefix=queue_prefix),
        f"{reconcile_schedule_id(queue_prefix)}-run",
        orchestration_queue(queue_prefix),
        timedelta(seconds=interval_seconds),
    )


async def ensure_reconcile_schedule(client: Client, queue_prefix: str, interval_seconds: float) -> str:
    """Create the reconciler's schedule, or bring an existing one to this interval (keeping an
    operator's pause); idempotent (every CI worker calls it at start). Returns the schedule id."""
    schedule_id = reconcile_schedule_id(queue_prefix)
    await ensure_schedule(client, schedule_id, _reconcile_schedule(queue_prefix, interval_seconds))
    return schedule_id
