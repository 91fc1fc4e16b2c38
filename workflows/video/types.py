"""Typed payloads of video jobs, shared by the workflow, the GPU activity and the API.

Light on purpose (stdlib + pydantic): the API and the orchestration worker import it.
Fields are only ever added, with defaults, so old histories still decode.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field


class VideoStatus(StrEnum):
    """The OpenAI Videos API statuses."""

    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Not the workflow's: the lifecycle sets it in the read model once a completed job's
    # content was deleted at ``expires_at`` (the job still reads; its content answers 410).
    EXPIRED = "expired"


TERMINAL_STATUSES = frozenset({VideoStatus.COMPLETED, VideoStatus.FAILED, VideoStatus.CANCELLED, VideoStatus.EXPIRED})


class InputReference(BaseModel):
    """The image an image-to-video job starts from: validated by the API, stored under the job."""

    # Object-store key (under ``job_object_prefix``) and what the API found in the bytes.
    key: str
    sha256: str
    content_type: str
    width: int
    height: int
    size_bytes: int


class SourceVideo(InputReference):
    """The finished video a remix starts from: a copy of its MP4 under the remix's own job, so
    the remix runs even if the source is deleted meanwhile (``content_type`` is video/mp4)."""

    # The video it was copied from (``remixed_from_video_id`` of the remix).
    video_id: str
    frames: int


class VideoRequest(BaseModel):
    """What to generate; validated by the API before a job exists."""

    prompt: str
    model: str
    seconds: int
    width: int
    height: int
    seed: int
    # Sampler steps; ``None`` means the model's catalogue default (tests ask for more, to run longer).
    steps: int | None = None
    # Image-to-video: the first frame's image (``None``: text-to-video, and every older job).
    input_reference: InputReference | None = None
    # Remix: the finished video a video-to-video job starts from (``None``: every other job).
    source_video: SourceVideo | None = None


class VideoJobFacts(BaseModel):
    """What a job is and whose: fixed at submit, carried by the start input and the state."""

    job_id: str
    tenant_id: str
    user_id: str
    tier: str
    request: VideoRequest
    # SHA-256 of the canonical request body: same idempotency key + other body is a conflict.
    request_hash: str
    # The GPU class whose queue generates it (chosen at submit from its estimated memory and the
    # live workers); ``None``: a deployment without classes, and every job from before them.
    gpu_class: str | None = None


class VideoJobInput(VideoJobFacts):
    """Start input of ``VideoJobWorkflow``. Queues and timeouts are resolved by the API from settings."""

    created_at: datetime
    expires_after_seconds: int = 7 * 24 * 3600
    # Where generation runs (the model's queue) and where housekeeping runs.
    generate_queue: str
    housekeeping_queue: str
    # Reserved/preemptible deployments: the other capacity type's queue, which generation is
    # handed to when ``generate_queue`` has no free worker for ``fallback_after_seconds``
    # (schedule-to-start), and back again (``None``: one queue, as before capacity types).
    fallback_queue: str | None = None
    fallback_after_seconds: float = 30.0
    heartbeat_timeout_seconds: float = 20.0
    checkpoint_interval_seconds: float = 10.0
    # Dispatch priority and fairness (Temporal task-queue Priority); used by admission.
    priority_key: int | None = None
    fairness_key: str | None = None
    fairness_weight: float | None = None


class GenerateInput(BaseModel):
    """Input of the generation activity (one attempt per Temporal activity attempt)."""

    job_id: str
    request: VideoRequest
    # Every object of this job lives under this prefix; attempts write under
    # ``<prefix>/attempt-<n>/`` so a stale attempt can change nothing the job points at.
    object_prefix: str
    checkpoint_interval_seconds: float
    # Added to Temporal's attempt number: each hand-over to another capacity type's queue is a
    # new activity counting attempts from 1, and attempt-scoped keys must stay unique.
    attempt_offset: int = 0


class GenerateProgress(BaseModel):
    """Heartbeat details: progress and the newest checkpoint this attempt knows of."""

    step: int = 0
    total_steps: int = 0
    checkpoint_key: str | None = None
    checkpoint_step: int = 0
    # When the heartbeat was sent (worker clock, epoch seconds) and the attempt that sent it.
    sent_at: float = 0.0
    attempt: int = 0
    # The newest preview this attempt stored (attempt-scoped key) and the step it shows; only
    # the current attempt's heartbeats reach the server, so a stale attempt's preview is never named.
    preview_key: str | None = None
    preview_step: int = 0


class GenerationStarted(BaseModel):
    """Signal from a GPU worker: an attempt of generation started (mirrored as ``JobState``)."""

    attempt: int
    resumed_from_step: int = 0


class GenerateResult(BaseModel):
    """What a successful attempt produced; the workflow records exactly one of these."""

    video_key: str
    thumbnail_key: str
    # The JPEG grid of frames next to the video (None from workers that made none).
    spritesheet_key: str | None = None
    attempt: int
    width: int
    height: int
    frames: int
    fps: float
    total_steps: int
    resumed_from_step: int = 0
    gpu_seconds: float = 0.0
    checkpoint_seconds: float = 0.0


class CleanupInput(BaseModel):
    """Delete objects under ``prefix``, except ``keep`` keys."""

    prefix: str
    keep: list[str] = Field(default_factory=list)


class VideoJobState(VideoJobFacts):
    """The answer of ``VideoJobWorkflow.state``: everything the API shows about a job.

    Live progress comes from the pending activity's heartbeat details (DescribeWorkflowExecution),
    so progress does not grow the workflow history.
    """

    status: VideoStatus
    created_at: datetime
    started_at: datetime | None = None
    completed_at: datetime | None = None
    expires_at: datetime | None = None
    attempts_started: int = 0
    error_code: str | None = None
    error_message: str | None = None
    result: GenerateResult | None = None
    deleted: bool = False


class ProjectVideoJobInput(BaseModel):
    """A snapshot of a job for the read model (``video_jobs``), and the version it was taken at.

    ``version`` is the workflow's history length when it scheduled the write: it grows with
    every transition, so a retried or late snapshot never overwrites a newer one.
    """

    state: VideoJobState
    version: int


class ProjectionResult(BaseModel):
    """Whether the snapshot was applied (``False``: the row already held a newer one)."""

    applied: bool


class CleanupResult(BaseModel):
    """How many objects a cleanup deleted."""

    deleted: int = 0


class VideoErrorType(StrEnum):
    """``ApplicationError.type`` values of video jobs; the workflow copies them into ``error_code``."""

    # The request cannot be generated (size, length, steps, model): retrying cannot help.
    INVALID_REQUEST = "InvalidRequest"
    # The worker got a job for another model version than the one it loaded.
    MODEL_MISMATCH = "ModelMismatch"
    # The worker was told it will go away; the job continues from its checkpoint elsewhere.
    PREEMPTED = "Preempted"
    # The model failed on this input in a way retrying cannot fix.
    GENERATION_FAILED = "GenerationFailed"
    # The job ran out of its overall time budget.
    TIMED_OUT = "TimedOut"
    # Anything else the workflow could not classify.
    INTERNAL = "InternalError"


# A finished job's spritesheet (a JPEG grid of frames) sits next to its video.mp4 under this
# name (``GenerateResult.spritesheet_key``).
SPRITESHEET_NAME = "spritesheet.jpg"


def job_object_prefix(job_id: str) -> str:
    """Every object of a job (checkpoints, video, thumbnail) lives under this store prefix."""
    return f"videos/{job_id}"


def reference_key(job_id: str, sha256: str, extension: str, kind: str = "reference") -> str:
    """Where a job's input image (``kind`` "reference") or a remix's source video ("source") is
    stored: named by its content, so a replayed submit writes the same object and other bytes
    never overwrite it."""
    return f"{job_object_prefix(job_id)}/input/{kind}-{sha256[:16]}.{extension}"


class VideoEventType(StrEnum):
    """The completion events a job's webhooks announce (``docs/webhooks.md``)."""

    COMPLETED = "video.completed"
    FAILED = "video.failed"
    CANCELLED = "video.cancelled"


class VideoEventInput(BaseModel):
    """Announce a job's outcome to its owner's webhook endpoints."""

    state: VideoJobState
    event_type: VideoEventType


class VideoEventResult(BaseModel):
    """How the deliveries of one event ended (pending ones are retried by Temporal)."""

    delivered: int = 0
    failed: int = 0
