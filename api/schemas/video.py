"""Schemas of ``/v1/videos``: the OpenAI Videos API shapes plus leasehold's extensions.

The request accepts what the official ``openai`` SDK sends (``seconds`` as a string such as
``"4"``, multipart form fields as strings), so form and JSON bodies validate alike.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.schemas.objects import ObjectList
from workflows.video.models import MAX_PROMPT_CHARS
from workflows.video.types import VideoStatus

MAX_SEED = 2**63 - 1
_SIZE = re.compile(r"^([1-9][0-9]{0,4})x([1-9][0-9]{0,4})$")
_INTEGER = re.compile(r"^[+-]?[0-9]{1,20}$")


def _as_int(value: Any) -> Any:
    # Form fields are strings and the SDK sends seconds as "4"; booleans and floats are not
    # integers here even though pydantic's lax mode would accept some of them.
    if isinstance(value, bool):
        raise ValueError("must be an integer")
    if isinstance(value, str):
        text = value.strip()
        if not _INTEGER.match(text):
            raise ValueError("must be an integer")
        return int(text)
    if isinstance(value, float):
        raise ValueError("must be an integer")
    return value


class VideoCreateRequest(BaseModel):
    """Body of ``POST /v1/videos`` (JSON or form). Model-dependent limits are checked later."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS, description="What to generate.")
    model: str | None = Field(default=None, min_length=1, max_length=128, description="A model served here.")
    seconds: int | None = Field(default=None, description="Clip length; the SDK sends it as a string.")
    size: str | None = Field(default=None, description="WIDTHxHEIGHT, e.g. 720x1280.")
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED, description="Extension: same seed, same video.")
    steps: int | None = Field(default=None, ge=1, description="Extension: sampler steps (default: the model's).")

    @field_validator("seconds", "seed", "steps", mode="before")
    @classmethod
    def _integer(cls, value: Any) -> Any:
        return _as_int(value)

    @field_validator("size")
    @classmethod
    def _size_format(cls, value: str | None) -> str | None:
        if value is not None and not _SIZE.match(value):
            raise ValueError("must be WIDTHxHEIGHT, e.g. 720x1280")
        return value

    def dimensions(self) -> tuple[int, int] | None:
        """``(width, height)`` of ``size`` when given."""
        if self.size is None:
            return None
        width, height = self.size.split("x")
        return int(width), int(height)


class VideoError(BaseModel):
    """Why a job failed (or was cancelled)."""

    code: str
    message: str


class VideoQueue(BaseModel):
    """Why a job is still queued."""

    # 1-based place in the model's dispatch order (Temporal fairness across tiers and users).
    position: int
    ahead: int
    workers_serving: int
    completion_rate_per_min: float
    reason: str


class Video(BaseModel):
    """The OpenAI video object, plus ``eta_seconds`` and ``attempt``."""

    id: str
    object: Literal["video"] = "video"
    model: str
    status: VideoStatus
    progress: int = Field(ge=0, le=100)
    created_at: int
    completed_at: int | None = None
    expires_at: int | None = None
    seconds: str
    size: str
    prompt: str
    error: VideoError | None = None
    remixed_from_video_id: str | None = None
    # Extensions: an estimate of seconds until completion (None once terminal), and how many
    # times generation has started (a retry after a lost worker counts again).
    eta_seconds: float | None = None
    attempt: int = 0
    # When the job is expected to start generating and to complete (Unix seconds), and why
    # there is no ETA when ``eta_seconds`` is null while the job is not finished.
    estimated_start_at: int | None = None
    estimated_completion_at: int | None = None
    eta_reason: str | None = None
    # While queued: where the job stands and what serves its model.
    queue: VideoQueue | None = None


class VideoList(ObjectList[Video]):
    """A cursor page of the caller's videos; ``after=last_id`` fetches the next one."""

    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class VideoDeleted(BaseModel):
    """Answer of ``DELETE /v1/videos/{id}``."""

    id: str
    object: Literal["video.deleted"] = "video.deleted"
    deleted: bool = True


class CapacityFigures(BaseModel):
    """The capacity signals of one model version, as the capacity tracker measures them (the
    gauges on ``/metrics`` export the same figures)."""

    model_config = ConfigDict(frozen=True)

    model: str
    # The GPU class of this pool of workers and its memory (null: a deployment without classes,
    # one entry per model).
    gpu_class: str | None = None
    gpu_memory_gib: float | None = None
    measured: bool
    # Tasks waiting for a worker (the server's estimate) and jobs waiting (visibility).
    backlog: int
    queued: int
    running: int
    oldest_queued_age_seconds: float
    add_rate_per_minute: float
    dispatch_rate_per_minute: float
    completion_rate_per_minute: float
    workers_serving: int
    workers_polling: int
    # With reserved and preemptible capacity: the workers serving, by capacity type (null: none).
    workers_by_capacity: dict[str, int] | None = None
    mean_job_seconds: float | None
    target_wait_seconds: float
    # Little's law: arrivals x mean job time, plus the waiting and running work spread over the
    # target wait.
    workers_needed: int
    # Queue wait a new job of each tier would see now (null: no worker serves the model).
    expected_wait_seconds: dict[str, float | None]


class ModelCapacity(CapacityFigures):
    """One entry of ``GET /v1/capacity``: the measured figures and whether free jobs get in."""

    object: Literal["capacity"] = "capacity"
    # Whether new free-tier jobs are accepted right now.
    admitting_free: bool


class CapacityList(ObjectList[ModelCapacity]):
    """Answer of ``GET /v1/capacity``: every model version served here."""
