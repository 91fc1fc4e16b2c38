"""A run's attempt numbers: issued by the workflow (Update ``attempt_started``) or pre-granted."""

from __future__ import annotations

import hashlib
from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.ci.ids import attempt_log_prefix
    from workflows.ci.run_projection import RunProjection
    from workflows.ci.types.job import (
        SIGNAL_ATTEMPT_RUNNING,
        UPDATE_ATTEMPT_STARTED,
        AttemptGrant,
        AttemptRunning,
        AttemptStartRequest,
        AttemptStatus,
    )
    from workflows.ci.types.run import JobAttemptState, JobState, JobStatus, RunStatus


class RunAttempts(RunProjection):
    """Issues and records job attempts; a stale attempt is told not to proceed."""

    @workflow.update(name=UPDATE_ATTEMPT_STARTED)
    def attempt_started(self, req: AttemptStartRequest) -> AttemptGrant:
        """A worker is about to run a job: issue its attempt number, or tell a stale one to stop."""
        job = self._state.job(req.job_id)
        if job is None or req.round != job.round or job.status not in (JobStatus.QUEUED, JobStatus.IN_PROGRESS):
            return AttemptGrant(proceed=False, reason="stale attempt")
        if req.job_id in self._cancelling:
            return AttemptGrant(proceed=False, reason="cancelled")
        now = workflow.now()
        reserved = self._reserved.pop(job.job_id, None)
        if reserved is not None and reserved[0] == job.round and req.activity_attempt == 1:
            # The first activity attempt of a pre-granted round asks anyway (a worker from before
            # pre-granting): it gets the number its input carries.
            n = reserved[1]
        else:
            if reserved is not None and reserved[0] == job.round:
                # The pre-granted attempt ran (or was lost) without reporting its start.
                self._record_attempt(job, reserved[1], "", None)
            for a in job.attempts:
                if a.status == AttemptStatus.RUNNING:
                    # The server re-dispatched the activity: the earlier attempt lost its lease.
                    a.status = AttemptStatus.LOST
                    a.finished_at = now
                    a.error = (
                        "worker lost (no heartbeat); superseded by a new attempt"
                        if a.started_at is not None
                        else "ended or lost its worker before it reported its start; superseded by a new attempt"
                    )
            n = self._next_attempt(job)
        # Random per attempt (the workflow's seeded RNG: replay gives the same value); only its
        # hash is kept in the state that queries show.
        token = workflow.uuid4().hex + workflow.uuid4().hex
        self._record_attempt(job, n, req.worker, now, hashlib.sha256(token.encode()).hexdigest())
        return AttemptGrant(proceed=True, attempt=n, secrets_token=token)

    def _next_attempt(self, job: JobState) -> int:
        """A number no attempt of this job had (recorded, or granted with an activity)."""
        n = max(max((a.attempt for a in job.attempts), default=0), self._issued.get(job.job_id, 0)) + 1
        self._issued[job.job_id] = n
        return n

    def _record_attempt(
        self, job: JobState, n: int, worker: str, started_at: datetime | None, token_sha256: str | None = None
    ) -> JobAttemptState:
        """Attempt ``n`` of the job's current round runs (or ran): the state points at it."""
        att = JobAttemptState(
            attempt=n,
            round=job.round,
            worker=worker,
            started_at=started_at,
            log_prefix=attempt_log_prefix(self._inp.push.tenant_id, self._inp.run_id, job.job_id, n),
            secrets_token_sha256=token_sha256,
        )
        job.attempts.append(att)
        self._issued[job.job_id] = max(self._issued.get(job.job_id, 0), n)
        job.attempt = n
        if started_at is not None:
            job.status = JobStatus.IN_PROGRESS
            job.started_at = job.started_at or started_at
            if self._state.started_at is None:
                self._state.started_at = started_at
            self._set_status(RunStatus.IN_PROGRESS)
        self._snapshots.changed()
        return att

    def _take_reserved(self, job: JobState, attempt: int) -> bool:
        """The pre-granted ``attempt`` of the job's current round, if it is not recorded yet."""
        if self._reserved.get(job.job_id) == (job.round, attempt):
            del self._reserved[job.job_id]
            return True
        return False

    @workflow.signal(name=SIGNAL_ATTEMPT_RUNNING)
    def attempt_running(self, notice: AttemptRunning) -> None:
        """A pre-granted attempt has been running a moment: the job is in progress on its worker."""
        job = self._state.job(notice.job_id)
        if job is None or job.round != notice.round or job.status != JobStatus.QUEUED:
            return
        if self._take_reserved(job, notice.attempt):
            self._record_attempt(job, notice.attempt, notice.worker, notice.started_at)
