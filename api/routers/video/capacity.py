"""``/v1/capacity``: per model version, the queue, the workers and the worker count a target
wait needs. The same figures are Prometheus gauges on ``/metrics`` (for an autoscaler such as
KEDA). This router also owns the capacity tracker's background task (its lifespan)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Literal

from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel

from api.deps import PrincipalDep
from api.errors import ApiError
from api.video.capacity import CapacityTracker


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    # Runs inside the app's lifespan, so settings and the Temporal client are already there.
    tracker = CapacityTracker(app.state.temporal, app.state.settings)
    app.state.video_capacity = tracker
    task = asyncio.create_task(tracker.run(), name="video-capacity")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


router = APIRouter(prefix="/v1/capacity", tags=["capacity"], lifespan=_lifespan)


def capacity_tracker(request: Request) -> CapacityTracker | None:
    """The process's tracker, or ``None`` in an app built without this router."""
    return getattr(request.app.state, "video_capacity", None)


class ModelCapacity(BaseModel):
    """Capacity signals of one model version."""

    object: Literal["capacity"] = "capacity"
    model: str
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
    mean_job_seconds: float | None
    target_wait_seconds: float
    # Little's law: arrivals x mean job time, plus the waiting and running work spread over the
    # target wait.
    workers_needed: int
    # Queue wait a new job of each tier would see now (null: no worker serves the model).
    expected_wait_seconds: dict[str, float | None]
    # Whether new free-tier jobs are accepted right now.
    admitting_free: bool


class CapacityList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCapacity]


@router.get("", response_model=CapacityList)
async def get_capacity(request: Request, _principal: PrincipalDep) -> CapacityList:
    """Capacity of every model version served here."""
    tracker = capacity_tracker(request)
    if tracker is None:
        raise ApiError(503, "temporarily_unavailable", "capacity is not measured by this process")
    await tracker.ready()
    threshold = tracker.settings.video_free_max_wait_seconds
    data = []
    for model in tracker.specs:
        figures = tracker.figures(model)
        free_wait = figures.expected_wait_seconds.get("free")
        data.append(
            ModelCapacity(
                model=figures.model,
                measured=figures.measured,
                backlog=figures.backlog,
                queued=figures.queued,
                running=figures.running,
                oldest_queued_age_seconds=figures.oldest_queued_age_seconds,
                add_rate_per_minute=figures.add_rate_per_minute,
                dispatch_rate_per_minute=figures.dispatch_rate_per_minute,
                completion_rate_per_minute=figures.completion_rate_per_minute,
                workers_serving=figures.workers_serving,
                workers_polling=figures.workers_polling,
                mean_job_seconds=figures.mean_job_seconds,
                target_wait_seconds=figures.target_wait_seconds,
                workers_needed=figures.workers_needed,
                expected_wait_seconds=figures.expected_wait_seconds,
                admitting_free=free_wait is not None and free_wait <= threshold,
            )
        )
    return CapacityList(data=data)
