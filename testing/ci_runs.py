"""A CI run's input as a push makes it, for tests and benchmarks that start ``CIRunWorkflow``
directly on a dev server (no push workflow, no git, no API)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.client import Client

from workflows.ci.types.job import (
    UPDATE_ATTEMPT_STARTED,
    AttemptGrant,
    AttemptStartRequest,
    AttemptStatus,
    JobActivityInput,
    JobResult,
)
from workflows.ci.types.push import PushContext
from workflows.ci.types.run import CIRunInput
from workflows.ci.types.spec import JobSpec, WorkflowSpec


def run_input(prefix: str, jobs: list[JobSpec], **push: Any) -> CIRunInput:
    """A run of ``jobs`` on the task queues of ``prefix`` (tenant ``<prefix>tenant``, a 30 s
    heartbeat timeout and a 1 s retry window unless ``push`` says otherwise: it sets or
    replaces any ``PushContext`` field)."""
    context: dict[str, Any] = {
        "tenant_id": f"{prefix}tenant",
        "repo_id": "repo",
        "repo_full_name": "o/r",
        "clone_url": "/nowhere",
        "commit_sha": "0" * 40,
        "ref": "refs/heads/main",
        "queue_prefix": prefix,
        "heartbeat_timeout_seconds": 30.0,
        "retry_window_seconds": 1.0,
    }
    return CIRunInput(
        push=PushContext(**{**context, **push}),
        run_id=f"run_{uuid.uuid4().hex[:24]}",
        workflow_path=".github/workflows/ci.yml",
        created_at=datetime.now(UTC),
        spec=WorkflowSpec(path="ci.yml", name="ci", jobs=jobs),
    )


async def ask_attempt(client: Client, inp: JobActivityInput, worker: str, update_id: str | None = None) -> AttemptGrant:
    """A stand-in job activity's attempt number, asked of its run with the ``attempt_started``
    Update as the real job activity asks (from within the activity)."""
    return await client.get_workflow_handle(inp.run_workflow_id).execute_update(
        UPDATE_ATTEMPT_STARTED,
        AttemptStartRequest(
            job_id=inp.job.id, round=inp.round, activity_attempt=activity.info().attempt, worker=worker
        ),
        id=update_id,
        result_type=AttemptGrant,
    )


def attempt_grant(client: Client, loop: asyncio.AbstractEventLoop, inp: JobActivityInput, worker: str) -> AttemptGrant:
    """A stand-in job activity's attempt: the grant its input carries, else ``ask_attempt``;
    from the activity's thread, on ``loop`` (where ``client`` lives)."""
    if inp.grant is not None:
        return inp.grant
    return asyncio.run_coroutine_threadsafe(ask_attempt(client, inp, worker), loop).result(60)


def succeeded(inp: JobActivityInput, grant: AttemptGrant, started: datetime, worker: str) -> JobResult:
    """A stand-in job activity's result: the attempt ran and succeeded."""
    return JobResult(
        job_id=inp.job.id,
        attempt=grant.attempt,
        round=inp.round,
        status=AttemptStatus.SUCCESS,
        exit_code=0,
        started_at=started,
        finished_at=datetime.now(UTC),
        worker=worker,
    )
