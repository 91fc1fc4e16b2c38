"""A video job as the API shows it at one moment, and the one place its status comes from.

Status
------
The read model's row (``video_jobs``) is the record of a job; the engine adds what only it
knows while the job runs. ``job_status`` is the only function that weighs them, and every
reader (``GET /v1/videos/{id}``, the listing, the SSE stream, cancel and delete) goes through
it, by way of ``row_view``:

1. **The outcome in the row** wins once there is one: ``completed``, ``failed`` or
   ``cancelled``, which the workflow writes before it closes, or ``expired``, which the
   lifecycle writes once the content was deleted.
2. **The execution's close status** decides a row still open whose execution closed without
   writing its outcome (terminated, timed out, or started before the read model existed):
   ``Canceled`` -> ``cancelled``; ``Failed``/``Terminated``/``TimedOut`` -> ``failed``;
   ``Completed`` -> ``completed``.
3. **The pending generation activity** decides an ``in_progress`` row whose execution was
   described (``api.video.live``, at most once a second per job): ``in_progress`` while an
   attempt runs on a worker, ``queued`` while one waits to run, which includes a preempted job
   waiting for its next attempt. The row's ``in_progress`` (from the worker's
   ``generation_started`` signal) only says that an attempt started at some point. With no
   generation pending at all, generation has ended and the workflow is recording the outcome
   (cleanup, then its last snapshot): the job stays ``in_progress`` at 99 % until the row
   holds the outcome, so progress never goes backwards on the way to it.
4. **The row's ``queued``/``in_progress``** answers otherwise: a queued job (nothing runs yet,
   so it is not described), a describe that failed, or an execution the engine no longer has.

Progress and attempt come from the same pending activity (its heartbeat details and
attempt number); ``pending_generation`` is the one reader of that proto.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.converter import DataConverter

from activities.video.definitions import GENERATE_VIDEO
from api.schemas.video import Video, VideoError, VideoQueue
from api.video.memo import JobMemo
from leasehold.records.api_keys import Principal
from leasehold.records.video.job_reads import JobRow
from workflows.video.models import format_size
from workflows.video.types import TERMINAL_STATUSES, GenerateProgress, VideoJobInput, VideoJobState, VideoStatus

_VIDEO_STATUSES = {status.value: status for status in VideoStatus}
_CLOSED_STATUSES = {
    WorkflowExecutionStatus.COMPLETED: VideoStatus.COMPLETED,
    WorkflowExecutionStatus.CANCELED: VideoStatus.CANCELLED,
    WorkflowExecutionStatus.FAILED: VideoStatus.FAILED,
    WorkflowExecutionStatus.TERMINATED: VideoStatus.FAILED,
    WorkflowExecutionStatus.TIMED_OUT: VideoStatus.FAILED,
}
_STARTED_STATES = (
    PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
    PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED,
)


def job_status(
    execution_status: WorkflowExecutionStatus | None,
    recorded: VideoStatus | None,
    generating: bool | None,
) -> VideoStatus:
    """The job's status, by the rules in this module's docstring.

    ``recorded``: the status in the job's row; ``execution_status``: the execution's, ``None``
    when it was not described or the engine no longer has it; ``generating``: whether a
    generation attempt runs now, ``None`` when the execution was not described.
    """
    if recorded in TERMINAL_STATUSES:
        return recorded
    closed = _CLOSED_STATUSES.get(execution_status) if execution_status is not None else None
    if closed is not None:
        return closed
    if generating is not None:
        return VideoStatus.IN_PROGRESS if generating else VideoStatus.QUEUED
    return recorded or VideoStatus.QUEUED


@dataclass(frozen=True)
class Estimate:
    """Seconds until done and the expected start/finish times (epoch seconds), or why not;
    while queued, where the job stands (``queue``)."""

    eta_seconds: float | None
    estimated_start_at: float | None = None
    estimated_completion_at: float | None = None
    reason: str | None = None
    queue: VideoQueue | None = None


# How far the expected completion must move for the event stream to send a new snapshot.
ETA_EVENT_SECONDS = 5.0


@dataclass(frozen=True)
class PendingGeneration:
    """What the pending generation activity of a described execution says."""

    # An attempt runs on a worker now (started, or asked to cancel and not yet stopped).
    started: bool
    # The attempt that runs, or the attempt the scheduled activity will start as.
    attempt: int
    progress: GenerateProgress | None
    # When the running attempt started and last heartbeat (epoch seconds), and on which worker.
    started_at: float | None
    heartbeat_at: float | None
    worker: str

    @property
    def attempts_started(self) -> int:
        return self.attempt if self.started else self.attempt - 1


async def pending_generation(converter: DataConverter, desc: WorkflowExecutionDescription) -> PendingGeneration | None:
    """The execution's pending generation activity, ``None`` when none is pending."""
    for pending in desc.raw_description.pending_activities:
        if pending.activity_type.name == GENERATE_VIDEO:
            started = pending.state in _STARTED_STATES
            return PendingGeneration(
                started=started,
                attempt=pending.attempt,
                progress=await _progress(converter, pending),
                started_at=_epoch_of(pending, "last_started_time") if started else None,
                heartbeat_at=_epoch_of(pending, "last_heartbeat_time"),
                worker=pending.last_worker_identity,
            )
    return None


async def _progress(converter: DataConverter, pending: Any) -> GenerateProgress | None:
    if not pending.heartbeat_details.payloads:
        return None
    try:
        decoded = await converter.decode(pending.heartbeat_details.payloads, [GenerateProgress])
    except Exception:
        # Details from another version of the worker: no progress rather than no answer.
        return None
    return decoded[0] if decoded and isinstance(decoded[0], GenerateProgress) else None


def _epoch_of(pending: Any, name: str) -> float | None:
    return getattr(pending, name).ToDatetime(UTC).timestamp() if pending.HasField(name) else None


@dataclass
class JobView:
    """What the API knows about one job at one moment."""

    job_id: str
    memo: JobMemo
    # Whose job it is (the caller: a view is only ever built for its owner).
    owner: Principal
    status: VideoStatus
    progress: int = 0
    attempt: int = 0
    completed_at: datetime | None = None
    expires_at: datetime | None = None
    # The job's state as its row holds it: the outcome's details (error, result keys) are
    # read from it, not copied.
    state: VideoJobState | None = None
    # When the attempt generating now started (epoch seconds).
    attempt_started_at: float | None = None
    estimate: Estimate | None = None
    # The running attempt's newest preview (store key) and the step it shows, from its heartbeat.
    preview_key: str | None = None
    preview_step: int = 0
    # Sort key of listings: (start time, job id).
    start_time: datetime = field(default_factory=lambda: datetime.fromtimestamp(0, UTC))

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def eta_seconds(self) -> float | None:
        return self.estimate.eta_seconds if self.estimate is not None and not self.terminal else None

    def event_id(self) -> str:
        """Identifies this snapshot in the SSE stream: a new id exactly when something shown changed,
        a queued job's place and its expected completion (to ``ETA_EVENT_SECONDS``) included, so a
        watcher sees its position and ETA move without polling."""
        base = f"{self.attempt}.{self.status.value}.{self.progress}"
        estimate = self.estimate
        if estimate is None or self.terminal:
            return base
        place = estimate.queue.position if estimate.queue is not None and self.status is VideoStatus.QUEUED else 0
        done = estimate.estimated_completion_at
        bucket = "-" if done is None else str(int(done // ETA_EVENT_SECONDS))
        return f"{base}.q{place}.e{bucket}"

    def to_video(self) -> Video:
        error = None
        if self.status in (VideoStatus.FAILED, VideoStatus.CANCELLED):
            cancelled = self.status is VideoStatus.CANCELLED
            code = self.state.error_code if self.state is not None else None
            message = self.state.error_message if self.state is not None else None
            error = VideoError(
                code=code or ("cancelled" if cancelled else "generation_failed"),
                message=message or ("the job was cancelled" if cancelled else "generation failed"),
            )
        memo = self.memo
        return Video(
            id=self.job_id,
            model=memo.model,
            status=self.status,
            progress=self.progress,
            created_at=int(memo.created_at),
            completed_at=int(self.completed_at.timestamp()) if self.completed_at and self.terminal else None,
            expires_at=int(self.expires_at.timestamp()) if self.expires_at else None,
            seconds=str(memo.seconds),
            size=format_size(memo.width, memo.height),
            prompt=memo.prompt,
            error=error,
            remixed_from_video_id=memo.source_video.video_id if memo.source_video is not None else None,
            eta_seconds=self.eta_seconds,
            attempt=self.attempt,
            **_estimate_fields(self),
        )


# A row does not say how long until expiry was asked for; jobs are started with this.
DEFAULT_EXPIRES_AFTER_SECONDS: int = VideoJobInput.model_fields["expires_after_seconds"].default


# 100 means done; a job whose generation ended is still being recorded.
FINISHING_PROGRESS = 99


def memo_of_row(record: JobRow, state: VideoJobState) -> JobMemo:
    """What the job *is*, from its row: the request, its hash, when and how it was dispatched."""
    return JobMemo(
        **state.request.model_dump(),
        request_hash=record.request_hash,
        created_at=state.created_at.timestamp(),
        expires_after_seconds=DEFAULT_EXPIRES_AFTER_SECONDS,
        fairness_key=record.fairness_key,
        fairness_weight=record.fairness_weight,
    )


def row_view(
    record: JobRow,
    owner: Principal,
    execution_status: WorkflowExecutionStatus | None = None,
    generation: PendingGeneration | None = None,
    closed_at: datetime | None = None,
) -> JobView:
    """The job as its row says, with what a describe of its execution added (status rules 2-3).

    ``owner`` is the caller, who the row was read for (every read checks it in its query).
    """
    state = VideoJobState.model_validate(record.state)
    recorded = _VIDEO_STATUSES.get(record.status, state.status)
    generating = None
    if execution_status == WorkflowExecutionStatus.RUNNING and generation is not None:
        generating = generation.started
    # Generation ended; the outcome is on its way to the row (rule 3).
    finishing = execution_status == WorkflowExecutionStatus.RUNNING and generation is None
    view = JobView(
        job_id=record.job_id,
        memo=memo_of_row(record, state),
        owner=owner,
        status=job_status(execution_status, recorded, generating),
        attempt=state.attempts_started,
        completed_at=state.completed_at or closed_at,
        expires_at=state.expires_at,
        state=state,
        start_time=state.created_at,
    )
    if state.result is not None:
        view.attempt = max(view.attempt, state.result.attempt)
    if generation is not None and not view.terminal:
        view.attempt = max(view.attempt, generation.attempts_started)
        view.attempt_started_at = generation.started_at
        progress = generation.progress
        if progress is not None and progress.total_steps > 0:
            step = progress.step if generation.started else progress.checkpoint_step
            # 100 means done; a job at its last step is still encoding.
            view.progress = min(FINISHING_PROGRESS, int(100 * step / progress.total_steps))
        if progress is not None and generation.started and progress.preview_key is not None:
            view.preview_key = progress.preview_key
            view.preview_step = progress.preview_step
    if finishing and view.status is VideoStatus.IN_PROGRESS:
        view.progress = FINISHING_PROGRESS
    if view.status in (VideoStatus.COMPLETED, VideoStatus.EXPIRED):
        view.progress = 100
        if view.expires_at is None and view.completed_at is not None:
            view.expires_at = view.completed_at + timedelta(seconds=DEFAULT_EXPIRES_AFTER_SECONDS)
    return view


# Pollers wait a tenth of the ETA, within these bounds; without an ETA, the upper one.
MIN_POLL_AFTER_MS = 500
MAX_POLL_AFTER_MS = 30_000


def poll_after_ms(view: JobView) -> int:
    """How long a poller should wait: a tenth of the ETA, so it follows the ETA as it moves."""
    eta = view.eta_seconds
    if eta is None:
        return MAX_POLL_AFTER_MS
    return int(min(MAX_POLL_AFTER_MS, max(MIN_POLL_AFTER_MS, eta * 100)))


def _estimate_fields(view: JobView) -> dict[str, Any]:
    """The ETA extension fields of a video object."""
    estimate = view.estimate
    if estimate is None or view.terminal:
        return {}
    return {
        "estimated_start_at": _epoch(estimate.estimated_start_at),
        "estimated_completion_at": _epoch(estimate.estimated_completion_at),
        "eta_reason": estimate.reason,
        "queue": estimate.queue if view.status is VideoStatus.QUEUED else None,
    }


def _epoch(value: float | None) -> int | None:
    return round(value) if value is not None else None
