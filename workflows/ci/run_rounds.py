"""A run's new rounds and decisions: Updates ``retry_job``, ``rerun`` and ``decide`` (approvals)."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.ci.run_groups import RunGroups
    from workflows.ci.types.push import EnvironmentRule
    from workflows.ci.types.run import (
        ApprovalDecision,
        ApprovalRejectedReason,
        ApprovalRequest,
        JobState,
        JobStatus,
        RerunRequest,
        RerunResponse,
        RetryJobRequest,
        RetryJobResponse,
        RetryRejectedReason,
        RunStatus,
    )
    from workflows.queues import CI_MAX_RETRIES_PER_RUN


class RunRounds(RunGroups):
    """Retries (a job and its dependents run a new round) and approval decisions."""

    @workflow.update
    def retry_job(self, req: RetryJobRequest) -> RetryJobResponse:
        """Re-run a failed or cancelled job and every job that depends on it, as new attempts."""
        target = self._state.job(req.job_id)
        assert target is not None
        reset: list[str] = []
        for job_id in self._dependents(req.job_id):
            job = self._state.job(job_id)
            assert job is not None
            if job_id in reset:
                continue
            if job.combinations and job_id in (req.job_id, target.matrix_of):
                # The matrix job asked for (its failed and cancelled combinations run again) or
                # the one whose combination was asked for: it reopens, its strategy kept.
                for child_id in job.combinations:
                    child = self._state.job(child_id)
                    if child is not None and (
                        child_id == req.job_id
                        or (job_id == req.job_id and child.status in (JobStatus.FAILURE, JobStatus.CANCELLED))
                    ):
                        self._reset_job(child)
                        reset.append(child_id)
                self._reopen(job)
                reset.append(job_id)
                continue
            if job_id == req.job_id or not job.matrix_of:
                self._reset_job(job)
                reset.append(job_id)
            # A dependent matrix job is expanded again (its needs' outputs may change): every
            # combination waits for that.
            for child_id in job.combinations:
                child = self._state.job(child_id)
                if child is not None and child_id not in reset:
                    self._reset_job(child)
                    reset.append(child_id)
        self._begin_round()
        return RetryJobResponse(run_id=self._inp.run_id, job_id=req.job_id, round=target.round, reset_jobs=reset)

    @workflow.update
    def rerun(self, req: RerunRequest) -> RerunResponse:
        """Run every job of the finished run again, successful ones included, as new attempts."""
        reset: list[str] = []
        for job in self._state.jobs:
            if job.matrix_of:
                continue  # a combination runs again with its matrix job, below
            for child_id in job.combinations:
                child = self._state.job(child_id)
                if child is not None:
                    self._reset_job(child)
                    reset.append(child_id)
            if job.combinations and not job.needs:
                # Its strategy is kept (as a retry of it would); a dependent matrix job is
                # expanded again, since its needs' outputs may change.
                self._reopen(job)
            else:
                self._reset_job(job)
            reset.append(job.job_id)
        self._begin_round()
        return RerunResponse(run_id=self._inp.run_id, run_attempt=self._state.retries + 1, reset_jobs=reset)

    @rerun.validator
    def _validate_rerun(self, req: RerunRequest) -> None:
        if self._state.finished_at is None:
            raise ApplicationError(
                "the run has not finished; cancel it or wait for it to end before re-running all of its jobs",
                type=RetryRejectedReason.RUN_NOT_FINISHED,
            )
        if self._state.retries >= CI_MAX_RETRIES_PER_RUN:
            raise ApplicationError(f"at most {CI_MAX_RETRIES_PER_RUN} retries per run", type=RetryRejectedReason.LIMIT)

    def _begin_round(self) -> None:
        """The run's next attempt: in progress again, its retry window closed until it ends."""
        self._state.retries += 1
        self._state.cancel_requested = False
        self._state.finished_at = None
        self._set_status(RunStatus.IN_PROGRESS)
        self._retry_pending = True
        self._dirty = True
        self._snapshots.changed()

    def _reset_job(self, job: JobState) -> None:
        self._round_specs.pop(job.job_id, None)
        self._reserved.pop(job.job_id, None)
        job.slot_key = None
        self._cancel_reasons.pop(job.job_id, None)
        job.round += 1
        job.status = JobStatus.WAITING
        job.attempt = 0
        job.allowed_failure = False
        job.queued_at = job.started_at = job.finished_at = None
        job.exit_code = None
        job.error = None
        job.outputs = {}

    @retry_job.validator
    def _validate_retry(self, req: RetryJobRequest) -> None:
        job = self._state.job(req.job_id)
        if job is None:
            raise ApplicationError(f"no job {req.job_id!r} in this run", type=RetryRejectedReason.UNKNOWN_JOB)
        if job.status not in (JobStatus.FAILURE, JobStatus.CANCELLED):
            raise ApplicationError(
                f"job {req.job_id!r} is {job.status.value}; only failed or cancelled jobs can be retried",
                type=RetryRejectedReason.NOT_RETRYABLE,
            )
        if self._state.cancel_requested and self._state.finished_at is None:
            raise ApplicationError("the run is being cancelled", type=RetryRejectedReason.NOT_RETRYABLE)
        for job_id in self._dependents(req.job_id):
            dep = self._state.job(job_id)
            if dep is not None and dep.status in (JobStatus.QUEUED, JobStatus.IN_PROGRESS):
                raise ApplicationError(
                    f"job {job_id!r} depends on {req.job_id!r} and is still running",
                    type=RetryRejectedReason.NOT_RETRYABLE,
                )
        if self._state.retries >= CI_MAX_RETRIES_PER_RUN:
            raise ApplicationError(f"at most {CI_MAX_RETRIES_PER_RUN} retries per run", type=RetryRejectedReason.LIMIT)

    @workflow.update
    def decide(self, req: ApprovalRequest) -> JobState:
        """Approve or reject a job awaiting approval; the decision is kept in the job's state."""
        job = self._state.job(req.job_id)
        assert job is not None and job.environment is not None
        job.approvals.append(
            ApprovalDecision(
                job_id=job.job_id,
                round=job.round,
                environment=job.environment,
                approved=req.approved,
                user_id=req.user_id,
                at=workflow.now(),
                comment=req.comment,
            )
        )
        if req.approved:
            # Ready again; the scheduler now finds this round approved and starts it.
            job.status = JobStatus.WAITING
        else:
            reason = f"rejected by {req.user_id}" + (f": {req.comment}" if req.comment else "")
            self._finish_job(job, JobStatus.FAILURE, error=reason)
        self._dirty = True
        self._snapshots.changed()
        return job

    @decide.validator
    def _validate_decide(self, req: ApprovalRequest) -> None:
        job = self._state.job(req.job_id)
        if job is None:
            raise ApplicationError(f"no job {req.job_id!r} in this run", type=ApprovalRejectedReason.UNKNOWN_JOB)
        if job.status != JobStatus.AWAITING_APPROVAL:
            raise ApplicationError(
                f"job {req.job_id!r} is {job.status.value}, not awaiting approval",
                type=ApprovalRejectedReason.NOT_AWAITING,
            )
        rule = self._approval_rule(job.job_id)
        if rule is not None and rule.approvers and req.user_id not in rule.approvers:
            raise ApplicationError(
                f"{req.user_id!r} may not approve deployments to {rule.name!r}",
                type=ApprovalRejectedReason.NOT_APPROVER,
            )

    def _approval_rule(self, job_id: str) -> EnvironmentRule | None:
        spec = self._spec_of(job_id)
        if spec is None or spec.environment is None:
            return None
        rule = self._inp.environments.get(spec.environment.lower())
        return rule if rule is not None and rule.required_approval else None

    def _awaiting_approval(self) -> bool:
        return any(j.status == JobStatus.AWAITING_APPROVAL for j in self._state.jobs)
