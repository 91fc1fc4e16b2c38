"""A video job as the API shows it at one moment, and the one place its status comes from.

Status
------
Four things speak about a job's status; ``job_status`` is the only function that weighs
them, and every reader (``GET /v1/videos/{id}``, the listing, the SSE stream, cancel and
delete) goes through it:

1. **The outcome the workflow recorded** wins once there is one: ``completed``, ``failed``
   or ``cancelled`` in its ``state`` query, or, when the query is not asked or not answered,
   in the ``JobState`` search attribute it writes at the same moment.
2. **The execution's close status** decides a closed execution that recorded no outcome: it
   was cancelled, terminated, timed out or failed before the workflow could say so
   (``Canceled`` -> ``cancelled``; ``Failed``/``Terminated``/``TimedOut`` -> ``failed``;
   ``Completed`` -> ``completed``).
3. **The pending generation activity** decides an open job whenever the execution was
   described: ``in_progress`` while an attempt runs on a worker, ``queued`` otherwise, which
   includes a preempted job waiting for its next attempt and the moments before the first.
   The workflow's own ``in_progress`` (from the worker's ``generation_started`` signal) only
   says that an attempt started at some point, so it does not decide this.
4. **The workflow's ``queued``/``in_progress``** (query, else search attribute) answers for an
   open job only when the execution could not be described (a listing whose describe failed).

Progress and attempt come from the same pending activity (its heartbeat details and
attempt number); ``pending_generation`` is the one reader of that proto.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.converter import DataConverter

from activities.video.generation import GENERATE_VIDEO
from api.schemas.video import Video, VideoError, VideoQueue
from api.video.memo import JobMemo
from leasehold.records.api_keys import Principal
from workflows.video.models import format_size
from workflows.video.types import TERMINAL_STATUSES, GenerateProgress, VideoJobState, VideoStatus

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


def recorded_status(value: str | None) -> VideoStatus | None:
    """A status the workflow wrote (its ``JobState`` search attribute), if it is one."""
    return _VIDEO_STATUSES.get(value or "")


def job_status(
    execution_status: WorkflowExecutionStatus | None,
    recorded: VideoStatus | None,
    generating: bool | None,
) -> VideoStatus:
    """The job's status, by the rules in this module's docstring.

    ``recorded``: the workflow's status (its query, else its ``JobState`` search attribute);
    ``generating``: whether a generation attempt runs now, ``None`` when the execution was not
    described.
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
    # The workflow's answer to its ``state`` query, when it was asked and answered: the
    # outcome's details (error, result keys) are read from it, not copied.
    state: VideoJobState | None = None
    # When the attempt generating now started (epoch seconds).
    attempt_started_at: float | None = None
    estimate: Estimate | None = None
    # Sort key of listings: (start time, job id).
    start_time: datetime = field(default_factory=lambda: datetime.fromtimestamp(0, UTC))

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def eta_seconds(self) -> float | None:
        return self.estimate.eta_seconds if self.estimate is not None and not self.terminal else None

    def event_id(self) -> str:
        """Identifies this snapshot in the SSE stream: a new id exactly when something shown changed."""
        return f"{self.attempt}.{self.status.value}.{self.progress}"

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
            eta_seconds=self.eta_seconds,
            attempt=self.attempt,
            **_estimate_fields(self),
        )


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
