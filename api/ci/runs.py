"""Reading the caller's CI run, shared by the runs and logs routers.

The run comes from the read model (``ci_runs.state``, written by the run workflow at each
transition), so it is served after the engine has forgotten the execution. Only a run the read
model does not hold yet (its workflow started a moment ago and has not written its first
snapshot, or it started before the read model existed) is asked of the engine, which is
authoritative for open executions. Another tenant's run answers 404 exactly like a missing one.
"""

from __future__ import annotations

import asyncio
import base64
import re
from datetime import UTC, datetime
from typing import Annotated

from fastapi import Query
from sqlalchemy.orm import sessionmaker
from temporalio.client import Client
from temporalio.service import RPCError

from api.errors import ApiError, from_temporal, invalid, not_found
from clients.ci.start import run_state
from leasehold.records.api_keys import Principal
from leasehold.records.ci.runs import RunCursor, get_run
from workflows.ci.ids import attempt_log_prefix
from workflows.ci.types.run import JOB_FINAL_STATUSES, CIRunState, JobAttemptState, JobState

_RUN_ID = re.compile(r"^run_[0-9a-f]{8,64}$")
_JOB_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,99}$")
# A query goes to a worker: bound the wait so a missing worker is a clear 503, not a hang.
QUERY_TIMEOUT_SECONDS = 10.0
RUN_UNAVAILABLE = "the run could not be read now; try again"
# The ``attempt`` query of the reads about one attempt of a job (logs, summary, annotations).
AttemptQuery = Annotated[int | None, Query(ge=1, description="default: the job's current attempt")]


def check_run_id(run: str) -> None:
    """404 for a string no run id could be (before anything is read)."""
    if not _RUN_ID.match(run):
        raise not_found("run")


async def stored_run(db: sessionmaker, principal: Principal, run: str) -> CIRunState | None:
    """The caller's run as the read model holds it, or ``None``."""
    record = await asyncio.to_thread(get_run, db, principal.tenant_id, run)
    return CIRunState.model_validate(record.state) if record is not None else None


async def load_run(db: sessionmaker, client: Client, principal: Principal, run: str) -> CIRunState:
    """The caller's run; 404 when it does not exist or belongs to another tenant."""
    check_run_id(run)
    state = await stored_run(db, principal, run)
    if state is not None:
        return state
    try:
        state = await asyncio.wait_for(run_state(client, run), timeout=QUERY_TIMEOUT_SECONDS)
    except (RPCError, TimeoutError) as exc:
        raise from_temporal(exc, RUN_UNAVAILABLE, missing=not_found("run"), call=f"query of run {run}") from None
    if state.tenant_id != principal.tenant_id:
        raise not_found("run")
    return state


def check_job_id(job: str) -> None:
    """404 for a job name no workflow file could declare (before any query is sent)."""
    if not _JOB_ID.match(job):
        raise not_found("job")


async def load_job_run(db: sessionmaker, client: Client, principal: Principal, run: str, job: str) -> CIRunState:
    """The caller's run, read for one of its jobs: the job's name is checked first."""
    check_job_id(job)
    return await load_run(db, client, principal, run)


async def load_job(
    db: sessionmaker, client: Client, principal: Principal, run: str, job: str
) -> tuple[CIRunState, JobState]:
    """The caller's run and its job ``job``; 404 when the run has no such job."""
    state = await load_job_run(db, client, principal, run, job)
    found = state.job(job)
    if found is None:
        raise not_found("job")
    return state, found


def encode_cursor(cursor: RunCursor) -> str:
    """An opaque ``next_cursor`` for the run listing."""
    raw = f"{cursor.created_at.isoformat()}|{cursor.run_id}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(value: str) -> RunCursor:
    """The position a ``next_cursor`` names; 400 naming ``after`` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()
        created, run = raw.split("|", 1)
        created_at = datetime.fromisoformat(created)
    except (ValueError, UnicodeDecodeError):
        raise invalid("after", "after must be a next_cursor from an earlier page") from None
    if not _RUN_ID.match(run):
        raise invalid("after", "after must be a next_cursor from an earlier page")
    # SQLite hands back naive UTC times; the database compares them as UTC either way.
    return RunCursor(created_at=created_at if created_at.tzinfo else created_at.replace(tzinfo=UTC), run_id=run)


def chosen_attempt(state: CIRunState, job_id: str, attempt: int | None) -> JobAttemptState | None:
    """The attempt a log or summary read is about: ``attempt``, else the job's current one
    (``None`` before its first). 404 for an unknown job or attempt."""
    job = state.job(job_id)
    if job is None:
        raise not_found("job")
    if attempt is None:
        if job.attempt:
            return job.current_attempt()
        # Between a retry and its first attempt, the older attempts are not "the current log".
        return job.attempts[-1] if job.attempts and job.status in JOB_FINAL_STATUSES else None
    for candidate in job.attempts:
        if candidate.attempt == attempt:
            return candidate
    raise ApiError(404, "not_found", f"job {job_id!r} has no attempt {attempt}", param="attempt")


def attempt_prefix(state: CIRunState, job_id: str, attempt: JobAttemptState) -> str:
    """Where the attempt's log (and summary) live in the object store."""
    # The state names the prefix; derive it for states recorded before it did.
    return attempt.log_prefix or attempt_log_prefix(state.tenant_id, state.run_id, job_id, attempt.attempt)
