"""Typed payloads of CI: push and run inputs, the parsed workflow spec, job activity I/O, run state.

Light on purpose (stdlib + pydantic): the API, the orchestration worker (inside the workflow
sandbox) and the CI worker all import it. Fields are only ever added, with defaults, so old
histories still decode.

Vocabulary: a *push* (repo + commit + ref) creates one *run* per triggered workflow file; a run
has *jobs* (the ``jobs:`` of the file); a job is executed by *attempts*. Attempt numbers are
issued by the run workflow, start at 1 and grow across worker crashes and manual retries; they
are the fencing token of a job (every log key is attempt-scoped, and the run state points only at
the winning attempt).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

# --------------------------------------------------------------------------------------------
# Statuses


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


class AttemptStatus(StrEnum):
    """How one attempt of a job ended."""

    RUNNING = "running"
    SUCCESS = "success"
    FAILURE = "failure"
    # The job ran past ``timeout-minutes``; its process tree was killed.
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    # The worker was lost (crash, kill -9, heartbeat timeout); a newer attempt superseded it.
    LOST = "lost"
    # Infrastructure error before or around the job (checkout failed, sandbox failed to start).
    ERROR = "error"


class StepStatus(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


# --------------------------------------------------------------------------------------------
# Parsed workflow files (the supported subset of GitHub Actions syntax)


class SpecError(BaseModel):
    """Why a workflow file was rejected: the file, the 1-based line and the key at fault."""

    file: str
    line: int | None = None
    key: str | None = None
    message: str

    def render(self) -> str:
        where = self.file + (f":{self.line}" if self.line is not None else "")
        return f"{where}: {self.key + ': ' if self.key else ''}{self.message}"


class PushFilter(BaseModel):
    """``on.push`` filters (glob patterns); ``None`` means the key was absent."""

    enabled: bool = False
    branches: list[str] | None = None
    branches_ignore: list[str] | None = None
    tags: list[str] | None = None
    tags_ignore: list[str] | None = None
    # ``on.pull_request.types`` (only for pull-request filters); None means the default three.
    types: list[str] | None = None


class StepSpec(BaseModel):
    """One ``run:`` step, or one of the built-in ``uses:`` actions (then ``run`` is empty).
    Expressions stay unevaluated here (``${{ ... }}`` text)."""

    index: int
    id: str | None = None
    name: str
    run: str = ""
    env: dict[str, str] = Field(default_factory=dict)
    working_directory: str | None = None
    shell: str = "bash"
    if_expr: str | None = None
    continue_on_error: bool = False
    timeout_minutes: float | None = None
    line: int | None = None
    # ``uses: actions/checkout@...`` or ``actions/cache@...`` (see ``BUILTIN_ACTIONS``), with
    # its ``with:`` inputs (unevaluated text).
    uses: str | None = None
    with_inputs: dict[str, str] = Field(default_factory=dict)

    @property
    def action(self) -> str | None:
        """``actions/cache`` for ``actions/cache@v4`` (lower-case), ``None`` for a ``run:`` step."""
        return self.uses.split("@", 1)[0].lower() if self.uses else None


# The ``uses:`` actions leasehold implements natively (any version): checkout is a no-op (the
# workspace already holds the commit); cache restores and saves per-tenant caches.
ACTION_CHECKOUT = "actions/checkout"
ACTION_CACHE = "actions/cache"
BUILTIN_ACTIONS = (ACTION_CHECKOUT, ACTION_CACHE)


class JobSpec(BaseModel):
    """One ``jobs.<id>`` entry."""

    id: str
    name: str
    needs: list[str] = Field(default_factory=list)
    runs_on: list[str] = Field(default_factory=lambda: ["linux"])
    env: dict[str, str] = Field(default_factory=dict)
    if_expr: str | None = None
    timeout_minutes: float = 360.0
    continue_on_error: bool = False
    # Declared job outputs (name -> expression); empty means "every value the steps wrote to
    # $GITHUB_OUTPUT" (a leasehold convenience; GitHub requires declaring them).
    outputs: dict[str, str] = Field(default_factory=dict)
    steps: list[StepSpec] = Field(default_factory=list)
    # Leasehold extension (job key ``network: true``): the sandbox keeps a network namespace
    # with the host's network. Off by default.
    network: bool = False
    line: int | None = None
    # Names of the secrets the job references (upper-case): the only ones its worker fetches.
    secrets: list[str] = Field(default_factory=list)
    # ``environment:`` (its name): when the repository protects it, the job waits for approval.
    environment: str | None = None


class WorkflowSpec(BaseModel):
    """A parsed, validated workflow file."""

    path: str
    name: str
    on_push: PushFilter = Field(default_factory=PushFilter)
    # ``on.pull_request``: branches/branches-ignore match the base branch.
    on_pull_request: PushFilter = Field(default_factory=PushFilter)
    env: dict[str, str] = Field(default_factory=dict)
    # In file order; needs form a DAG (validated).
    jobs: list[JobSpec] = Field(default_factory=list)


class WorkflowFile(BaseModel):
    """A workflow file found at a commit: parsed, or rejected with the reason."""

    path: str
    spec: WorkflowSpec | None = None
    error: SpecError | None = None
    # Whether the push (ref) matches ``on.push``; invalid files count as triggered so their
    # failure is visible as a run.
    triggered: bool = True


# --------------------------------------------------------------------------------------------
# Push -> runs


class CIPushInput(BaseModel):
    """Start input of ``CIPushWorkflow`` (built by the API; queues and timeouts from settings)."""

    tenant_id: str
    repo_id: str
    # "owner/name": GITHUB_REPOSITORY and ``github.repository``.
    repo_full_name: str
    clone_url: str
    commit_sha: str
    # Full ref, e.g. "refs/heads/main" or "refs/tags/v1".
    ref: str
    received_at: datetime
    # The deployment's task-queue prefix (settings.queue_prefix).
    queue_prefix: str = ""
    # settings.ci_heartbeat_timeout_seconds etc., resolved by the API.
    heartbeat_timeout_seconds: float = 15.0
    cancel_grace_seconds: float = 5.0
    retry_window_seconds: float = 3 * 24 * 3600
    delivery_id: str | None = None
    # "push" or "pull_request" (then ``ref`` is ``refs/pull/<n>/head`` and ``pull_request`` is set).
    event: str = "push"
    pull_request: PullRequestInfo | None = None
    # The tenant's plan when the push was accepted: its jobs dispatch with this fairness
    # weight, and at most this many of the tenant's jobs run at once (None: uncapped).
    fairness_weight: float | None = None
    max_concurrent_jobs: int | None = None
    # False dispatches the jobs FIFO with everyone else's (no fairness key): a benchmark
    # baseline and an operator's escape hatch.
    fair_share: bool = True
    # The repository's default branch (caches of other refs fall back to its scope).
    default_branch: str | None = None


class PullRequestInfo(BaseModel):
    """The pull request a ``pull_request`` run builds (its head commit)."""

    number: int
    # Branch names (not full refs) of the head and the base.
    head_ref: str
    base_ref: str
    head_repo: str
    base_repo: str
    action: str = "opened"

    @property
    def from_fork(self) -> bool:
        """Code from outside the repository: it runs without the tenant's secrets."""
        return self.head_repo.lower() != self.base_repo.lower()


class RunRef(BaseModel):
    """A run created (or found) by a push."""

    run_id: str
    workflow_id: str
    workflow_path: str
    # False when the run already existed (same repo + commit + workflow file).
    created: bool = True


class PushStatus(StrEnum):
    LISTING = "listing"
    DONE = "done"
    FAILED = "failed"


class CIPushState(BaseModel):
    """Answer of ``CIPushWorkflow.state`` (and its result)."""

    push_id: str
    status: PushStatus = PushStatus.LISTING
    runs: list[RunRef] = Field(default_factory=list)
    # Workflow files whose ``on.push`` did not match this ref.
    not_triggered: list[str] = Field(default_factory=list)
    error: str | None = None


class ListWorkflowsInput(BaseModel):
    """Input of the control activity that fetches the mirror and reads workflow files."""

    repo_id: str
    clone_url: str
    commit_sha: str
    ref: str
    event: str = "push"
    # For pull requests: the base branch the ``on.pull_request`` filters match, and the action.
    base_ref: str | None = None
    action: str | None = None
    # Whose repository: the activity reads its protected environments.
    tenant_id: str | None = None


class EnvironmentRule(BaseModel):
    """A repository's protection of one deployment environment, as a run sees it."""

    name: str
    required_approval: bool = False
    # User ids of the tenant who may approve; empty: any user of the tenant.
    approvers: list[str] = Field(default_factory=list)


class ListWorkflowsResult(BaseModel):
    files: list[WorkflowFile] = Field(default_factory=list)
    # The repository's protected environments that the files' jobs name (lower-case names).
    environments: dict[str, EnvironmentRule] = Field(default_factory=dict)


class CIRunInput(BaseModel):
    """Start input of ``CIRunWorkflow``: one run = repo + commit + workflow file."""

    run_id: str
    tenant_id: str
    repo_id: str
    repo_full_name: str
    clone_url: str
    commit_sha: str
    ref: str
    workflow_path: str
    created_at: datetime
    # The parsed file, or why it was rejected (then the run fails at once with that message).
    spec: WorkflowSpec | None = None
    spec_error: SpecError | None = None
    queue_prefix: str = ""
    heartbeat_timeout_seconds: float = 15.0
    cancel_grace_seconds: float = 5.0
    # How long a finished run stays open for job retries before its workflow completes.
    retry_window_seconds: float = 3 * 24 * 3600
    push_id: str | None = None
    event: str = "push"
    pull_request: PullRequestInfo | None = None
    fairness_weight: float | None = None
    max_concurrent_jobs: int | None = None
    fair_share: bool = True
    default_branch: str | None = None
    # Protection rules of the environments the jobs name (lower-case name -> rule), resolved
    # when the push was listed.
    environments: dict[str, EnvironmentRule] = Field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Job activity


class JobActivityInput(BaseModel):
    """Input of the job activity (one Temporal activity per job per retry round)."""

    run_id: str
    run_workflow_id: str
    tenant_id: str
    repo_id: str
    repo_full_name: str
    clone_url: str
    commit_sha: str
    ref: str
    workflow_name: str
    workflow_path: str
    job: JobSpec
    # Workflow-level env (job and step env are in ``job``).
    workflow_env: dict[str, str] = Field(default_factory=dict)
    # ``needs.<job>.outputs`` / ``.result`` for the job's expressions.
    needs: dict[str, NeedResult] = Field(default_factory=dict)
    # Manual-retry round of this job (0 first); attempts of an older round are stale.
    round: int = 0
    cancel_grace_seconds: float = 5.0
    event: str = "push"
    # False for code from a fork: the job's secrets are empty and its log says why.
    secrets_allowed: bool = True
    # The repository's default branch: caches fall back to its scope.
    default_branch: str | None = None


class NeedResult(BaseModel):
    """What a dependent job sees of a finished job: ``needs.<id>.result`` and ``.outputs``."""

    result: str
    outputs: dict[str, str] = Field(default_factory=dict)


class AttemptStartRequest(BaseModel):
    """Update ``CIRunWorkflow.attempt_started``: a worker asks to run a job (fencing)."""

    job_id: str
    round: int
    # The Temporal activity attempt within this round (dedups the update).
    activity_attempt: int
    worker: str = ""


class AttemptGrant(BaseModel):
    """The workflow's answer: the attempt number to use, or ``proceed=False`` (stale/cancelled)."""

    proceed: bool
    attempt: int = 0
    reason: str | None = None
    # The attempt's secrets token: the worker trades it at the API for exactly the secrets the
    # job declares, while this attempt holds the job's lease (its state is ``running``).
    secrets_token: str | None = None


class LogSummary(BaseModel):
    """Where an attempt's log lives and what was stored of it.

    Chunks are ``<prefix><seq:08d>.log`` for seq 0..next_seq-1; seqs in ``gaps`` could not be
    stored (each also has a best-effort ``<seq:08d>.gap`` marker); ``<prefix>end.json`` marks
    the end of the log.
    """

    prefix: str
    next_seq: int = 0
    gaps: list[int] = Field(default_factory=list)
    bytes: int = 0
    ended: bool = False


class StepResult(BaseModel):
    index: int
    name: str
    status: StepStatus
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # Outcome before continue-on-error (GitHub's ``steps.<id>.outcome``).
    outcome: StepStatus | None = None


class JobResult(BaseModel):
    """Result of the job activity: the job's own failure is a result, not an activity error."""

    job_id: str
    attempt: int
    round: int
    status: AttemptStatus
    exit_code: int | None = None
    error: str | None = None
    outputs: dict[str, str] = Field(default_factory=dict)
    steps: list[StepResult] = Field(default_factory=list)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    log: LogSummary | None = None
    worker: str = ""


class JobHeartbeat(BaseModel):
    """Heartbeat details of the job activity."""

    attempt: int
    step: int = 0
    log_next_seq: int = 0


# --------------------------------------------------------------------------------------------
# Run state (query), cancel, retry


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


class ApprovalDecision(BaseModel):
    """Who decided on a job awaiting approval, when, and what."""

    job_id: str
    round: int
    environment: str
    approved: bool
    user_id: str
    at: datetime
    comment: str | None = None


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


class LogEnd(BaseModel):
    """Content of ``<attempt prefix>end.json``: the attempt's log is complete."""

    attempt: int
    next_seq: int
    gaps: list[int] = Field(default_factory=list)
    status: AttemptStatus
    exit_code: int | None = None
    finished_at: datetime


# --------------------------------------------------------------------------------------------
# Per-tenant concurrency cap (CITenantSemaphoreWorkflow)


class SlotRequest(BaseModel):
    """Signal ``acquire``: a run asks for a slot for one job round (``key`` = ``<job>#<round>``)."""

    holder: str
    key: str
    # The tenant's cap as the run knows it (the newest request's value applies).
    limit: int


class SlotRelease(BaseModel):
    """Signal ``release``: the job round ended (or was cancelled while waiting)."""

    holder: str
    key: str


class SlotGrant(BaseModel):
    """Signal ``slot_granted`` to the run: the job may start its activity."""

    key: str


class SemaphoreState(BaseModel):
    """Input (for continue-as-new) and query answer of the tenant semaphore."""

    tenant_id: str
    limit: int = 1
    holders: list[SlotRequest] = Field(default_factory=list)
    pending: list[SlotRequest] = Field(default_factory=list)
    granted_total: int = 0


JobActivityInput.model_rebuild()
JobState.model_rebuild()
CIRunState.model_rebuild()

# Activity names: workflows start activities by name, so they never import subprocess code.
ACTIVITY_LIST_WORKFLOWS = "ci_list_workflows"
ACTIVITY_RUN_JOB = "ci_run_job"
# Most jobs a workflow file may declare (bounds the run workflow's history, with
# CI_MAX_RETRIES_PER_RUN).
MAX_JOBS_PER_WORKFLOW = 64
MAX_STEPS_PER_JOB = 100


# --------------------------------------------------------------------------------------------
# Reconciler (lost webhooks)

ACTIVITY_RECONCILE_LIST = "ci_reconcile_list_repos"
ACTIVITY_RECONCILE_REPO = "ci_reconcile_repo"


class ReconcileInput(BaseModel):
    """Input of ``CIReconcileWorkflow`` (the schedule's action holds one)."""

    queue_prefix: str = ""
    # Only these repositories (None: every registered one).
    repo_ids: list[str] | None = None


class ReconcileRepos(BaseModel):
    """The repositories to look at, oldest first."""

    repo_ids: list[str] = Field(default_factory=list)


class ReconcileRepoInput(BaseModel):
    repo_id: str


class ReconciledPush(BaseModel):
    """A branch head the reconciler pushed (``ci_start.start_push``: a no-op when a webhook
    already delivered the same repository + commit + ref)."""

    repo_id: str
    ref: str
    commit_sha: str
    push_id: str


class ReconcileRepoResult(BaseModel):
    repo_id: str
    pushes: list[ReconciledPush] = Field(default_factory=list)
    # Changed heads of branches no workflow watches (recorded, not pushed).
    unwatched: list[str] = Field(default_factory=list)


class ReconcileResult(BaseModel):
    repos: int = 0
    pushes: list[ReconciledPush] = Field(default_factory=list)
    # repo id -> why it could not be reconciled this time (tried again next interval).
    errors: dict[str, str] = Field(default_factory=dict)
