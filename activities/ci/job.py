"""The CI job activity: one attempt of one job, its steps in a fresh sandbox over a fresh checkout.

The activity takes the attempt number the run granted with it (its first activity attempt, for a
job that fetches no secrets; the attempt tells the run it is running with one ``attempt_running``
signal once it has run ``start_notice_seconds``), or asks the run workflow for one (Update
``attempt_started``; a stale or cancelled attempt is told not to proceed; it also issues the
secrets token), then runs the attempt (``activities.ci.attempt``). The job's own failure
(non-zero exit, timeout, cancellation) is a result; only infrastructure trouble raises, so
Temporal retries it as a new attempt.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import Counter, Gauge
from sqlalchemy.orm import sessionmaker
from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities.ci.actions import ActionSource
from activities.ci.attempt import JobAttempt
from activities.ci.cache import CICache
from activities.ci.definitions import CIJobDefinition
from activities.ci.git import GitMirror
from activities.ci.reaper import RootReaper
from activities.ci.run_records import RunRecords, UntrustedRun
from activities.ci.sandbox import (
    Sandbox,
    SandboxLimits,
)
from activities.ci.secrets import NoSecrets, SecretSource
from leasehold.storage import ObjectStore
from workflows.ci.types.job import (
    ACTIVITY_RUN_JOB,
    JOB_FATAL_ERROR,
    SIGNAL_ATTEMPT_RUNNING,
    UPDATE_ATTEMPT_STARTED,
    AttemptGrant,
    AttemptRunning,
    AttemptStartRequest,
    AttemptStatus,
    JobActivityInput,
    JobResult,
)

log = logging.getLogger(__name__)

JOBS_TOTAL = Counter("leasehold_ci_jobs_total", "CI job attempts finished on this worker", ["status"])
JOBS_RUNNING = Gauge("leasehold_ci_jobs_running", "CI job attempts running on this worker")

GRANT_TIMEOUT_SECONDS = 30.0


@dataclass
class JobConfig:
    """Worker-side settings of job execution (from ``Settings``)."""

    workspaces: Path
    limits: SandboxLimits
    disk_bytes: int
    log_flush_seconds: float = 0.5
    log_max_bytes: int = 64 << 20
    # How long a log chunk is retried while the object store is unreachable.
    log_retry_seconds: float = 120.0
    # How long a pre-granted attempt runs before it tells the run it is running (a shorter job
    # says it with its result: no signal, no workflow task), unless its grant says (the run's
    # read-model interval, 0.5-5 s: this adds no staleness the API did not have).
    start_notice_seconds: float = 0.5
    # Largest cache archive a job may save (bytes before compression).
    cache_max_bytes: int = 2 << 30
    identity: str = field(default_factory=lambda: f"{os.uname().nodename}-{os.getpid()}")
    # Finished jobs' roots that may wait to be emptied in the background; past that an attempt
    # empties its own before it returns (0: always before).
    reap_backlog: int = 8
    # The artifact service (``activities.ci.artifact_service``): where attempts' sockets and
    # upload spools live (the worker's own directory; None: no artifacts), how long artifacts
    # are kept unless the tenant's log retention says otherwise, and one artifact's limit.
    runtime_dir: Path | None = None
    artifact_retention_days: int = 90
    artifact_max_bytes: int = 2 << 30


class CIJobActivities(CIJobDefinition):
    """Built once per CI worker with its sandbox, store, mirror and Temporal client."""

    def __init__(
        self,
        config: JobConfig,
        store: ObjectStore,
        sandbox: Sandbox,
        mirror: GitMirror,
        client: Client,
        loop: asyncio.AbstractEventLoop,
        records: RunRecords,
        secrets: SecretSource | None = None,
        actions: ActionSource | None = None,
        artifacts: sessionmaker | None = None,
    ) -> None:
        self._config = config
        # The database artifacts are recorded in (None: jobs get no artifact service).
        self._artifacts = artifacts
        # Where remote actions' code comes from (``None``: only local ``./path`` actions run).
        self._actions = actions
        self._records = records
        self._secrets: SecretSource = secrets or NoSecrets()
        self._store = store
        self._sandbox = sandbox
        self._mirror = mirror
        self._client = client
        self._loop = loop
        self._cache = CICache(store, config.cache_max_bytes)
        # Finished jobs' roots, emptied off the critical path (``activities.ci.reaper``).
        self.reaper = RootReaper(sandbox, config.reap_backlog)

    # Fencing ------------------------------------------------------------------------------

    def _request_attempt(self, inp: JobActivityInput) -> AttemptGrant:
        info = activity.info()
        req = AttemptStartRequest(
            job_id=inp.job.id, round=inp.round, activity_attempt=info.attempt, worker=self._config.identity
        )
        handle = self._client.get_workflow_handle(inp.run_workflow_id)
        coro = handle.execute_update(
            # By name: an activity does not import the workflow it serves (docs/fencing.md).
            UPDATE_ATTEMPT_STARTED,
            req,
            # Same id on a repeated call: the workflow answers it once.
            id=f"attempt:{inp.job.id}:{inp.round}:{info.attempt}",
            result_type=AttemptGrant,
        )
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        # Heartbeat while waiting: right after the run's orchestration worker was lost, its
        # answer takes longer than the heartbeat timeout, and a silent wait then lost this
        # healthy attempt too (two of a job's three attempts for one fault).
        beat = info.heartbeat_timeout.total_seconds() * 0.3 if info.heartbeat_timeout else GRANT_TIMEOUT_SECONDS
        deadline = time.monotonic() + GRANT_TIMEOUT_SECONDS
        while True:
            try:
                return future.result(timeout=max(0.0, min(beat, deadline - time.monotonic())))
            except (WorkflowUpdateFailedError, RPCError) as exc:
                # The run is closed or refuses: this attempt must not run.
                return AttemptGrant(proceed=False, reason=str(exc))
            except TimeoutError:
                if time.monotonic() >= deadline:
                    future.cancel()
                    raise ApplicationError("the run did not answer the attempt request") from None
                activity.heartbeat()

    def _notice_start(self, inp: JobActivityInput, grant: AttemptGrant) -> threading.Timer:
        """Tell the run, once the attempt has run the grant's ``notice_seconds`` (else
        ``start_notice_seconds``), that it is running (signal ``attempt_running``; never awaited:
        the job does not wait on the engine)."""
        notice = AttemptRunning(
            job_id=inp.job.id,
            round=inp.round,
            attempt=grant.attempt,
            worker=self._config.identity,
            started_at=datetime.now(UTC),
        )

        def send() -> None:
            handle = self._client.get_workflow_handle(inp.run_workflow_id)
            future = asyncio.run_coroutine_threadsafe(handle.signal(SIGNAL_ATTEMPT_RUNNING, notice), self._loop)
            future.add_done_callback(_log_notice_failure)

        delay = grant.notice_seconds if grant.notice_seconds is not None else self._config.start_notice_seconds
        timer = threading.Timer(max(0.0, delay), send)
        timer.daemon = True
        timer.start()
        return timer

    # The activity -------------------------------------------------------------------------

    @activity.defn(name=ACTIVITY_RUN_JOB)
    def run_job(self, inp: JobActivityInput) -> JobResult:
        """Run one attempt of a job; see the module docstring."""
        with activity.shield_thread_cancel_exception():
            try:
                trusted = self._records.verify(inp, activity.info().workflow_id or "")
            except UntrustedRun as exc:
                log.warning("refused job %s of %s: %s", inp.job.id, inp.run_workflow_id, exc)
                raise ApplicationError(f"refused: {exc}", type=JOB_FATAL_ERROR, non_retryable=True) from None
            pregranted = inp.grant is not None and inp.grant.proceed and activity.info().attempt == 1
            grant = inp.grant if pregranted and inp.grant is not None else self._request_attempt(inp)
            if not grant.proceed:
                log.info("job %s round %s not started: %s", inp.job.id, inp.round, grant.reason)
                return JobResult(
                    job_id=inp.job.id, attempt=0, round=inp.round, status=AttemptStatus.CANCELLED, error=grant.reason
                )
            notice = self._notice_start(inp, grant) if pregranted else None
            JOBS_RUNNING.inc()
            try:
                result = JobAttempt(self, inp, grant, trusted).run()
            finally:
                JOBS_RUNNING.dec()
                if notice is not None:
                    notice.cancel()
            JOBS_TOTAL.labels(result.status.value).inc()
            return result


def _log_notice_failure(future: Any) -> None:
    # The run may have ended meanwhile (cancelled): the result tells it the rest.
    if not future.cancelled() and future.exception() is not None:
        log.info("start notice not delivered: %s", future.exception())
