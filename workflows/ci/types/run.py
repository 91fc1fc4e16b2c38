"""One run (repository + commit + workflow file): its start input, its state (query and result),
and the Updates that retry a job or decide on an approval."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from workflows.ci.types.job import AttemptStatus, LogSummary, StepResult
from workflows.ci.types.push import EnvironmentRule, PullRequestInfo, PushScoped
from workflows.ci.types.spec import SpecError, WorkflowSpec


class RunStatus(StrEnum):
    """Status of a run (also the ``RunState`` search attribute)."""

    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    SUCCESS = "success"
    FAILURE = "failure"
    CANCELLED = "cancelled"


RUN_TERMINAL_STATUSES = frozenset({RunStatus.SUCCESS, RunStatus.FAILURE, RunStatus.CANCELLED})


class JobStatus(StrEnum):
    """Status of a job within a run.

    ``waiting``: its ``needs`` are not finished; ``queued``: its activity is scheduled but no
    worker runs it yet; ``in_progress``: an attempt is running; the rest are final (until a
    retry sets the job, and its dependents, back to ``waiting``).
    """

    WAITING = "waiting"
    # Ready, but its environment requires a person's approval first (``approve``/``reject``).
    AWAITING_APPROVAL = "awaiting_approval"
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    SUCCESS = "success"
    FAILURE = "failure"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


JOB_FINAL_STATUSES = frozenset({JobStatus.SUCCESS, JobStatus.FAILURE, JobStatus.CANCELLED, JobStatus.SKIPPED})


class CIRunInput(PushScoped):
    """Start input of ``CIRunWorkflow``: one run = the push's repo + commit, and one workflow file."""

    run_id: str
    workflow_path: str
    created_at: datetime
    # The parsed file, or why it was rejected (then the run fails at once with that message).
    spec: WorkflowSpec | None = None
    spec_error: SpecError | None = None
    push_id: str | None = None
    # Protection rules of the environments the jobs name (lower-case name -> rule), resolved
    # when the push was listed.
    environments: dict[str, EnvironmentRule] = Field(default_factory=dict)
    # Configuration variables of the environments the jobs name (lower-case name -> name ->
    # value), read when the push was listed: a job naming one sees them over ``push.variables``
    # (``job_vars``).
    environment_variables: dict[str, dict[str, str]] = Field(default_factory=dict)
    # ``github.run_number``, assigned when the push was listed (None: a run started before
    # run numbers, which shows 1).
    run_number: int | None = None
    # Report each round's state to the git host (the repository had a reporter when the push
    # was listed; ``activities.ci.status_report``).
    report_status: bool = False
    # Some file of the push listens for this workflow's runs (``on.workflow_run``): each round's
    # start and end start a ``workflow_run`` push (``workflows.ci.run_triggers``).
    notify_workflow_run: bool = False

    def environment_vars(self, environment: str | None) -> dict[str, str]:
        """The configuration variables of ``environment`` (a job's ``environment:``) this run
        carries; empty for none."""
        return dict(self.environment_variables.get(environment.lower(), {})) if environment else {}

    def job_vars(self, environment: str | None) -> dict[str, str]:
        """The ``vars`` context of a job naming ``environment`` (or none): the environment's
        variables over the repository's and the tenant's, as on GitHub."""
        return self.push.vars_with(self.environment_vars(environment))


class JobAttemptState(BaseModel):
    attempt: int
    round: int
    status: AttemptStatus = AttemptStatus.RUNNING
    worker: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    error: str | None = None
    steps: list[StepResult] = Field(default_factory=list)
    # Object-store prefix of this attempt's log (``ci/<tenant>/<run>/<job>/attempt-<n>/``).
    log_prefix: str = ""
    log: LogSummary | None = None
    # sha256 of the attempt's secrets token (the token itself only goes to the worker).
    secrets_token_sha256: str | None = None


class ApprovalDecision(BaseModel):
    """Who decided on a job awaiting approval, when, and what."""

    job_id: str
    round: int
    environment: str
    approved: bool
    user_id: str
    at: datetime
    comment: str | None = None


class JobState(BaseModel):
    job_id: str
    name: str
    needs: list[str] = Field(default_factory=list)
    runs_on: list[str] = Field(default_factory=list)
    status: JobStatus = JobStatus.WAITING
    # True when the job failed but ``continue-on-error`` lets dependents see success.
    allowed_failure: bool = False
    round: int = 0
    # The attempt the job's result comes from (the winning one); 0 before any.
    attempt: int = 0
    attempts: list[JobAttemptState] = Field(default_factory=list)
    queued_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    error: str | None = None
    outputs: dict[str, str] = Field(default_factory=dict)
    # Same on every attempt: ``<run id>/<job id>``.
    idempotency_key: str = ""
    environment: str | None = None
    # Every approve/reject decision on this job, oldest first (the audit trail; kept across
    # retry rounds, each decision names its round).
    approvals: list[ApprovalDecision] = Field(default_factory=list)
    # Names of the secrets the job declares: the most its attempts' tokens can fetch.
    secret_names: list[str] = Field(default_factory=list)
    # A matrix job (``strategy``) runs as one job per combination, listed after it: the matrix
    # job's own state aggregates theirs (``needs`` on it waits for all of them). A combination
    # names its matrix job in ``matrix_of`` and carries its values, index and count.
    combinations: list[str] = Field(default_factory=list)
    matrix_of: str | None = None
    matrix: dict[str, Any] = Field(default_factory=dict)
    job_index: int = 0
    job_total: int = 1
    # The job-level ``concurrency`` group it ran in (evaluated), if any.
    concurrency_group: str | None = None
    # The key under which the tenant's semaphore counts this round's slot, when it is not the
    # round's own (``<job>#<round>``): a slot handed over from the job round that made it ready.
    slot_key: str | None = None
    # Waiting in its run's own queue for a slot the run holds (the run asked the tenant's
    # semaphore for as many slots as the cap leaves it; the next one a job of the run gives
    # back goes to the oldest job waiting here).
    run_slot_wait: bool = False

    def current_attempt(self) -> JobAttemptState | None:
        """The attempt the state points at (the winning one once finished)."""
        for a in reversed(self.attempts):
            if a.attempt == self.attempt:
                return a
        return None


class CIRunState(BaseModel):
    """Answer of ``CIRunWorkflow.state``; also the workflow's result."""

    run_id: str
    tenant_id: str
    repo_id: str
    repo_full_name: str = ""
    commit_sha: str
    ref: str
    workflow_path: str
    workflow_name: str = ""
    # The run's title from the file's ``run-name`` ("" without one).
    display_title: str = ""
    status: RunStatus = RunStatus.QUEUED
    cancel_requested: bool = False
    error: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    jobs: list[JobState] = Field(default_factory=list)
    # Manual retries accepted so far (bounded, see CIRunWorkflow).
    retries: int = 0
    event: str = "push"
    pull_request: PullRequestInfo | None = None
    # False when the run builds code from a fork: its jobs get no secrets (``notice`` says so).
    secrets_allowed: bool = True
    notice: str | None = None
    # The sandbox backend its jobs run in (the tenant's plan when the push came): the queue
    # explanation asks whether that backend's workers serve a job's labels.
    isolation: str = "bubblewrap"
    # The workflow-level ``concurrency`` group (evaluated), if the file has one.
    concurrency_group: str | None = None

    def job(self, job_id: str) -> JobState | None:
        for j in self.jobs:
            if j.job_id == job_id:
                return j
        return None


class RetryJobRequest(BaseModel):
    """Update ``CIRunWorkflow.retry_job``: re-run a failed (or cancelled) job and its dependents."""

    job_id: str
    requested_by: str | None = None


class RetryJobResponse(BaseModel):
    run_id: str
    job_id: str
    # The retry round the job now runs in; its attempts get new attempt numbers.
    round: int
    # The job and every dependent set back to ``waiting``.
    reset_jobs: list[str] = Field(default_factory=list)


class RerunRequest(BaseModel):
    """Update ``CIRunWorkflow.rerun``: run every job of a finished run again (GitHub's "Re-run
    all jobs"), successful ones included, as the run's next attempt."""

    requested_by: str | None = None


class RerunResponse(BaseModel):
    run_id: str
    # ``github.run_attempt`` of the new attempt (1 is the push's own).
    run_attempt: int
    reset_jobs: list[str] = Field(default_factory=list)


class ApprovalRequest(BaseModel):
    """Update ``CIRunWorkflow.decide``: approve or reject a job awaiting approval."""

    job_id: str
    approved: bool
    user_id: str
    comment: str | None = None


class ApprovalRejectedReason(StrEnum):
    """``ApplicationError.type`` of a refused decision (the API maps these to HTTP statuses)."""

    UNKNOWN_JOB = "CIUnknownJob"
    NOT_AWAITING = "CIJobNotAwaitingApproval"
    NOT_APPROVER = "CINotAnApprover"


class RetryRejectedReason(StrEnum):
    """``ApplicationError.type`` of a rejected retry (the API maps these to HTTP statuses)."""

    UNKNOWN_JOB = "CIUnknownJob"
    NOT_RETRYABLE = "CIJobNotRetryable"
    LIMIT = "CIRetryLimit"
    # ``rerun``: the run has not finished (a whole run is re-run only once it has ended).
    RUN_NOT_FINISHED = "CIRunNotFinished"
