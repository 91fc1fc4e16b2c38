"""One job attempt: the job activity's input, heartbeat and result, and the fencing Update it sends first.

Attempt numbers are issued by the run workflow (Update ``attempt_started``), start at 1 and grow
across worker crashes and manual retries; they are the fencing token of a job (every log key is
attempt-scoped, and the run state points only at the winning attempt). ``docs/fencing.md`` says
why CI does not fence with the activity attempt as video does.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from workflows.ci.types.push import PushScoped
from workflows.ci.types.spec import JobSpec

# The job activity (one per job per retry round; a CI worker of the job's ``runs-on`` runs it).
ACTIVITY_RUN_JOB = "ci_run_job"
# Error types of the job activity that retrying cannot fix.
JOB_FATAL_ERROR = "CIJobFatal"
# An image queue's worker took the job but has no free job slot (``worker_ci.image_queues``):
# the run gives the job to its labels' queue at once, as when no such worker took it in time.
IMAGE_WORKER_FULL_ERROR = "CIImageWorkerFull"
# The run workflow's Update a job attempt sends before it runs anything (its name in histories),
# unless the run granted the attempt in the activity's input (``JobActivityInput.grant``).
UPDATE_ATTEMPT_STARTED = "attempt_started"
# The signal a pre-granted attempt sends once it has run ``START_NOTICE_SECONDS`` (``AttemptRunning``).
SIGNAL_ATTEMPT_RUNNING = "attempt_running"


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


class NeedResult(BaseModel):
    """What a dependent job sees of a finished job: ``needs.<id>.result`` and ``.outputs``."""

    result: str
    outputs: dict[str, str] = Field(default_factory=dict)


class AttemptGrant(BaseModel):
    """The workflow's answer: the attempt number to use, or ``proceed=False`` (stale/cancelled)."""

    proceed: bool
    attempt: int = 0
    reason: str | None = None
    # The attempt's secrets token: the worker trades it at the API for exactly the secrets the
    # job declares, while this attempt holds the job's lease (its state is ``running``).
    secrets_token: str | None = None
    # A pre-granted attempt reports its start (``attempt_running``) once it has run this long:
    # the run's read-model interval, so the report is never later than the read model would
    # show it anyway (``None``: the worker's own default).
    notice_seconds: float | None = None


class JobActivityInput(PushScoped):
    """Input of the job activity (one Temporal activity per job per retry round)."""

    run_id: str
    run_workflow_id: str
    workflow_name: str
    workflow_path: str
    job: JobSpec
    # Workflow-level env (job and step env are in ``job``).
    workflow_env: dict[str, str] = Field(default_factory=dict)
    # ``needs.<job>.outputs`` / ``.result`` for the job's expressions.
    needs: dict[str, NeedResult] = Field(default_factory=dict)
    # Manual-retry round of this job (0 first); attempts of an older round are stale.
    round: int = 0
    # False for code from a fork: the job's secrets are empty and its log says why.
    secrets_allowed: bool = True
    # One combination of the job's ``strategy.matrix`` (empty: not a matrix job), its index
    # among the job's combinations and their count (``strategy.job-index``/``job-total``).
    matrix: dict[str, Any] = Field(default_factory=dict)
    job_index: int = 0
    job_total: int = 1
    # For a combination: the matrix job's id (``GITHUB_JOB``, ``github.job``); ``job.id`` is the
    # combination's own (``<job>-<n>``: logs, secrets, attempts).
    matrix_job_id: str | None = None
    # ``github.run_number``: the run's number among the runs of its repository and workflow
    # file, when the run knows it (None: 1).
    run_number: int | None = None
    # The attempt the run granted with the activity, for its first activity attempt (a job that
    # fetches no secrets: no token), so that attempt starts without the ``attempt_started``
    # round trip; ``None`` (or a retried activity attempt): ask with the Update.
    grant: AttemptGrant | None = None
    # The configuration variables of the job's ``environment:`` (``CIRunInput.environment_vars``).
    environment_variables: dict[str, str] = Field(default_factory=dict)

    @property
    def vars_context(self) -> dict[str, str]:
        """The job's ``vars`` context: its environment's variables over the push's."""
        return self.push.vars_with(self.environment_variables)


class AttemptRunning(BaseModel):
    """Signal ``attempt_running``: a pre-granted attempt is running on ``worker`` since ``started_at``
    (sent once it has run a moment; an attempt that ends before says it with its result)."""

    job_id: str
    round: int
    attempt: int
    worker: str = ""
    started_at: datetime


class AttemptStartRequest(BaseModel):
    """Update ``CIRunWorkflow.attempt_started``: a worker asks to run a job (fencing)."""

    job_id: str
    round: int
    # The Temporal activity attempt within this round (dedups the update).
    activity_attempt: int
    worker: str = ""


class LogStored(BaseModel):
    """What was stored of an attempt's log: chunks 0..next_seq-1 except the gaps (also what the
    API shows of it)."""

    next_seq: int = 0
    gaps: list[int] = Field(default_factory=list)
    bytes: int = 0
    ended: bool = False


class LogSummary(LogStored):
    """Where an attempt's log lives and what was stored of it.

    Chunks are ``<prefix><seq:08d>.log`` for seq 0..next_seq-1; seqs in ``gaps`` could not be
    stored (each also has a best-effort ``<seq:08d>.gap`` marker); ``<prefix>end.json`` marks
    the end of the log.
    """

    prefix: str
    # Object key of the attempt's ``$GITHUB_STEP_SUMMARY`` markdown (every step's, in order),
    # stored beside the log; None when no step wrote one.
    summary_key: str | None = None


class AnnotationLevel(StrEnum):
    NOTICE = "notice"
    WARNING = "warning"
    ERROR = "error"


class Annotation(BaseModel):
    """A ``::error``/``::warning``/``::notice`` workflow command a step printed (masked, bounded)."""

    level: AnnotationLevel
    message: str
    title: str | None = None
    file: str | None = None
    line: int | None = None
    end_line: int | None = None
    column: int | None = None
    end_column: int | None = None
    # The step that printed it (0-based, as ``StepSummary.index``).
    step: int = 0


class StepSummary(BaseModel):
    """How one step of an attempt went (also what the API shows of it)."""

    index: int
    name: str
    status: StepStatus
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # Annotations the step printed (the job's are those of its steps; bounded per step and
    # per attempt, because they travel in the run state).
    annotations: list[Annotation] = Field(default_factory=list)


class StepResult(StepSummary):
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


class LogEnd(BaseModel):
    """Content of ``<attempt prefix>end.json``: the attempt's log is complete."""

    attempt: int
    next_seq: int
    gaps: list[int] = Field(default_factory=list)
    status: AttemptStatus
    exit_code: int | None = None
    finished_at: datetime
