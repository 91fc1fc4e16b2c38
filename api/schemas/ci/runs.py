"""Request and response schemas of the CI API: repositories, pushes, runs, jobs, logs."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator

from api.schemas.objects import ObjectList, RecordView
from workflows.ci.types.job import LogStored, StepSummary
from workflows.ci.types.push import CIPushState, PullRequestInfo
from workflows.ci.types.run import CIRunState, JobState, RerunResponse, RetryJobResponse

# Repositories ------------------------------------------------------------------------------


class RepoCreate(BaseModel):
    """``POST /v1/repos``."""

    name: str = Field(description="full name as the git host spells it, e.g. 'acme/widgets'", max_length=200)
    clone_url: str = Field(
        description="https:// URL to a public host (the operator may allow others), or a local path or file:// URL "
        "below the operator's LEASEHOLD_CI_LOCAL_REPO_ROOT",
        max_length=2000,
    )
    webhook_secret: SecretStr = Field(description="the secret the git host signs webhooks with")
    default_branch: str = "main"
    github_id: int | None = Field(default=None, description="the host's numeric repository id, if known")


class RepoOut(RecordView):
    """A registered repository; the webhook secret is never part of it."""

    object: Literal["repository"] = "repository"
    id: str
    name: str
    clone_url: str
    default_branch: str
    github_id: int | None = None
    created_at: datetime


class RepoList(ObjectList[RepoOut]):
    pass


# Pushes and webhooks -----------------------------------------------------------------------

_SHA_PATTERN = r"^[0-9a-fA-F]{40}([0-9a-fA-F]{24})?$"


class PushRequest(BaseModel):
    """``POST /v1/hooks/push``: the generic trigger."""

    repo_id: str = Field(max_length=64)
    commit_sha: str = Field(pattern=_SHA_PATTERN, description="full commit sha (40 or 64 hex digits)")
    ref: str = Field(pattern=r"^refs/[^\s\x00]{1,250}$", description="full ref, e.g. refs/heads/main")


class PushAccepted(BaseModel):
    """A push durably recorded; its runs are created from the workflow files at the commit."""

    object: Literal["push"] = "push"
    id: str
    repo_id: str
    commit_sha: str
    ref: str


class WebhookAnswer(BaseModel):
    """What ``POST /v1/hooks/github`` answers (git hosts show it in their delivery log)."""

    event: str
    status: Literal["ok", "accepted", "ignored"]
    reason: str | None = None
    pushes: list[PushAccepted] = Field(default_factory=list)


class PushRunOut(BaseModel):
    run_id: str
    workflow_path: str


class PushOut(BaseModel):
    """``GET /v1/pushes/{id}``: the runs a push created so far."""

    object: Literal["push"] = "push"
    id: str
    repo_id: str
    status: str
    runs: list[PushRunOut] = Field(default_factory=list)
    not_triggered: list[str] = Field(default_factory=list)
    error: str | None = None

    @classmethod
    def from_state(cls, state: CIPushState, repo_id: str) -> PushOut:
        return cls(
            id=state.push_id,
            repo_id=repo_id,
            status=state.status.value,
            runs=[PushRunOut(run_id=r.run_id, workflow_path=r.workflow_path) for r in state.runs],
            not_triggered=state.not_triggered,
            error=state.error,
        )


# Runs and jobs -------------------------------------------------------------------------------


class StepOut(StepSummary):
    """A step of an attempt: the job activity's own summary of it."""


class AttemptLogOut(LogStored):
    """What was stored of an attempt's log (its object-store prefix stays internal)."""


class AttemptOut(BaseModel):
    attempt: int
    round: int
    status: str
    worker: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    error: str | None = None
    steps: list[StepOut] = Field(default_factory=list)
    log: AttemptLogOut | None = None


class ApprovalOut(BaseModel):
    round: int
    environment: str
    decision: Literal["approved", "rejected"]
    user_id: str
    at: datetime
    comment: str | None = None


class QueueReason(StrEnum):
    """What a job that has not started waits for (``JobQueueOut.reason``)."""

    # Jobs it ``needs`` have not finished.
    NEEDS = "needs"
    # A matrix combination held back by ``max-parallel`` (its siblings run).
    MAX_PARALLEL = "max_parallel"
    # Its environment is protected: a person must approve it.
    APPROVAL = "approval"
    # Another member of its ``concurrency:`` group runs (the job's, or the whole run's).
    CONCURRENCY_GROUP = "concurrency_group"
    # The tenant's cap on running jobs is reached; it waits for a slot in ``position`` order.
    TENANT_CAP = "tenant_cap"
    # No CI worker serves its ``runs-on`` label set.
    NO_WORKER = "no_worker"
    # A worker serves its labels; it waits for one to be free (or is being handed over now).
    WORKER = "worker"
    # Ready; the run is about to queue it.
    STARTING = "starting"
    # The engine did not answer in time: what it waits for is not known right now.
    UNKNOWN = "unknown"


class QueueBlockerOut(BaseModel):
    reason: QueueReason
    message: str


class JobQueueOut(BaseModel):
    """Why a job has not started (``waiting``, ``awaiting_approval`` and ``queued`` jobs only),
    from the records the dispatcher works from; see docs/ci-queue.md.

    ``reason``/``message`` is what it waits for first; ``waiting_for`` lists everything that
    holds it back, in the order it will be passed (the first entry is ``reason``/``message``).
    Only the caller's own tenant is described: its cap, its queued jobs, its groups, and the
    label sets served among the operator's and its own.
    """

    reason: QueueReason
    message: str
    waiting_for: list[QueueBlockerOut] = Field(default_factory=list)
    # 1-based place among the tenant's jobs waiting for a slot of its cap (first come, first
    # served), and how many are ahead; null when it is not waiting for a slot.
    position: int | None = None
    ahead: int | None = None
    # The tenant's cap as the semaphore holds it (null when not read).
    slots_in_use: int | None = None
    slot_limit: int | None = None
    # Its runs-on labels; whether a worker polled their queue lately (null: not known, e.g.
    # labels from an expression not evaluated yet); the label sets served, among those this
    # deployment lists and this run's jobs ask for.
    labels: list[str] = Field(default_factory=list)
    labels_served: bool | None = None
    served_labels: list[list[str]] = Field(default_factory=list)
    # Jobs it needs that have not finished.
    needs: list[str] = Field(default_factory=list)
    environment: str | None = None
    concurrency_group: str | None = None
    # When the engine's records were read (they are cached a moment).
    checked_at: datetime


class JobOut(BaseModel):
    id: str
    name: str
    needs: list[str] = Field(default_factory=list)
    runs_on: list[str] = Field(default_factory=list)
    status: str
    # Failed, but continue-on-error let its dependents go on.
    allowed_failure: bool = False
    # The attempt the job's result comes from (0 before any).
    attempt: int = 0
    attempts: list[AttemptOut] = Field(default_factory=list)
    queued_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    error: str | None = None
    outputs: dict[str, str] = Field(default_factory=dict)
    idempotency_key: str = ""
    # ``environment:`` of the job; a protected one makes it wait in ``awaiting_approval``.
    environment: str | None = None
    # Every approve/reject decision (user, time, comment, round): the audit trail.
    approvals: list[ApprovalOut] = Field(default_factory=list)
    # Why it has not started: only on jobs not started yet, and only where the answer read
    # what they wait for (``GET /v1/runs/{id}`` and ``GET /v1/runs/{id}/jobs/{job}``).
    queue: JobQueueOut | None = None
    # A matrix job runs as its combinations (their job ids, in order; it has no log of its
    # own); a combination names its matrix job and carries its values.
    combinations: list[str] = Field(default_factory=list)
    matrix_of: str | None = None
    matrix: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_state(cls, job: JobState, queue: JobQueueOut | None = None) -> JobOut:
        data = job.model_dump(mode="json")
        data["id"] = data.pop("job_id")
        data["approvals"] = [
            {**a, "decision": "approved" if a.pop("approved") else "rejected"} for a in data.get("approvals", [])
        ]
        return cls.model_validate({**data, "queue": queue})


class RunOut(BaseModel):
    """``GET /v1/runs/{id}``: a run and its jobs."""

    object: Literal["ci.run"] = "ci.run"
    id: str
    repo_id: str
    repo_full_name: str = ""
    commit_sha: str
    ref: str
    workflow_path: str
    workflow_name: str = ""
    # ``github.run_number``: the run's number among its workflow file's runs in the repository
    # (from 1, kept by a re-run; null for a run listed before numbers were assigned).
    run_number: int | None = None
    # The title ``run-name`` gave the run ("" without one).
    display_title: str = ""
    status: str
    cancel_requested: bool = False
    # Why the run failed as a whole (e.g. the workflow file was rejected: file, line, key).
    error: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    retries: int = 0
    # "push" or "pull_request"; for a pull request from a fork, secrets_allowed is false and
    # notice says why its jobs saw no secrets.
    event: str = "push"
    pull_request: PullRequestInfo | None = None
    secrets_allowed: bool = True
    notice: str | None = None
    jobs: list[JobOut] = Field(default_factory=list)

    @classmethod
    def from_state(
        cls, state: CIRunState, queues: dict[str, JobQueueOut] | None = None, run_number: int | None = None
    ) -> RunOut:
        """``queues``: the explanation of each job not started yet, by job id (none: not read);
        ``run_number``: the run's number, which the read model keeps beside the run's state."""
        data = state.model_dump(mode="json", exclude={"jobs", "tenant_id"})
        data["id"] = data.pop("run_id")
        queues = queues or {}
        jobs = [JobOut.from_state(j, queues.get(j.job_id)) for j in state.jobs]
        return cls.model_validate({**data, "jobs": jobs, "run_number": run_number})


class RunSummary(RecordView):
    """One row of ``GET /v1/runs`` (from the read model; ``GET /v1/runs/{id}`` has detail)."""

    object: Literal["ci.run"] = "ci.run"
    # Read from the run's read-model row (``run_id``, ``finished_at``).
    id: str = Field(validation_alias="run_id")
    repo_id: str | None = None
    commit_sha: str | None = None
    ref: str | None = None
    workflow_path: str | None = None
    # As on ``GET /v1/runs/{id}`` (read beside the row: ``ci_run_numbers``).
    run_number: int | None = None
    status: str | None = None
    created_at: datetime | None = None
    # When the run finished (None while it runs).
    closed_at: datetime | None = Field(default=None, validation_alias="finished_at")

    @field_validator("created_at", "closed_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        # SQLite hands back naive times; every time the read model stores is UTC.
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


class RunList(ObjectList[RunSummary]):
    """A page of runs, newest first; ask again with ``after=next_cursor`` while ``has_more``."""

    has_more: bool = False
    next_cursor: str | None = None


class _ObjectFirst(BaseModel):
    """A base that puts ``object`` first in a schema derived from a payload: pydantic orders
    fields from the last base class to the first, so the JSON keeps its key order."""

    object: str


class RetryOut(RetryJobResponse, _ObjectFirst):
    """``POST /v1/runs/{id}/jobs/{job}/retry``: the job and its dependents run again (the
    workflow's own answer)."""

    object: Literal["ci.retry"] = "ci.retry"


class RerunOut(RerunResponse, _ObjectFirst):
    """``POST /v1/runs/{id}/rerun``: every job of the finished run runs again, as the run's
    next attempt (the workflow's own answer)."""

    object: Literal["ci.rerun"] = "ci.rerun"


# Logs ----------------------------------------------------------------------------------------


class LogChunkOut(BaseModel):
    seq: int
    text: str


class LogPage(BaseModel):
    """``GET /v1/runs/{id}/jobs/{job}/logs``: stored chunks of one attempt from ``from_seq``.

    ``gaps`` lists sequence numbers whose chunk could not be stored (lost output, shown, never
    hidden). Ask again with ``from_seq=next_seq`` for more; ``ended`` is true once the attempt's
    log is complete and ``next_seq`` is past its last chunk.
    """

    object: Literal["ci.log"] = "ci.log"
    run_id: str
    job_id: str
    attempt: int
    attempts: list[int] = Field(default_factory=list)
    from_seq: int
    next_seq: int
    ended: bool
    # The attempt's status (running, success, failure, lost, ...).
    status: str | None = None
    chunks: list[LogChunkOut] = Field(default_factory=list)
    gaps: list[int] = Field(default_factory=list)
    has_more: bool = False


# Annotations ---------------------------------------------------------------------------------


class AnnotationOut(RecordView):
    """One ``::error``/``::warning``/``::notice`` an attempt's step printed (masked, bounded)."""

    ordinal: int = Field(description="its place among the attempt's annotations, from 1")
    step: int
    level: str
    message: str
    title: str | None = None
    file: str | None = None
    line: int | None = None
    end_line: int | None = None
    # Read from the annotation's read-model row, whose columns are ``col`` and ``end_col``.
    column: int | None = Field(default=None, validation_alias="col")
    end_column: int | None = Field(default=None, validation_alias="end_col")


class AnnotationPage(BaseModel):
    """``GET /v1/runs/{id}/jobs/{job}/annotations``: one page of an attempt's annotations, from
    the read model (they outlive the engine's retention, as logs do). Ask again with
    ``after=next_after`` while ``has_more``."""

    object: Literal["list"] = "list"
    run_id: str
    job_id: str
    attempt: int | None
    data: list[AnnotationOut] = Field(default_factory=list)
    has_more: bool = False
    next_after: int | None = None


# Environments and approvals ----------------------------------------------------------------


class EnvironmentPut(BaseModel):
    """``PUT /v1/repos/{id}/environments/{name}``: protect (or unprotect) an environment."""

    required_approval: bool = Field(description="jobs naming this environment wait for an approval")
    approvers: list[str] = Field(
        default_factory=list, max_length=100, description="user ids who may approve; empty: any user of the tenant"
    )


class EnvironmentOut(RecordView):
    object: Literal["ci.environment"] = "ci.environment"
    repo_id: str
    name: str
    required_approval: bool
    approvers: list[str] = Field(default_factory=list)
    updated_at: datetime


class EnvironmentList(ObjectList[EnvironmentOut]):
    pass


class DecisionIn(BaseModel):
    """Body of ``POST /v1/runs/{id}/jobs/{job}/approve`` and ``.../reject`` (optional)."""

    comment: str | None = Field(default=None, max_length=1000)
