"""``/v1/capacity``: per model version, the queue, the workers and the worker count a target
wait needs. The same figures are Prometheus gauges on ``/metrics`` (for an autoscaler such as
KEDA)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import APIRouter, FastAPI

from api.deps import CapacityDep, PrincipalDep
from api.schemas.video import CapacityList, ModelCapacity
from api.video.capacity import start_capacity, stop_capacity


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    # Until api/app.py's lifespan calls start_capacity/stop_capacity itself; both are
    # idempotent, so the two can overlap while that change lands.
    await start_capacity(app)
    try:
        yield
    finally:
        await stop_capacity(app)


router = APIRouter(prefix="/v1/capacity", tags=["capacity"], lifespan=_lifespan)


@router.get("", response_model=CapacityList)
async def get_capacity(tracker: CapacityDep, _principal: PrincipalDep) -> CapacityList:
    """Capacity of every model version served here."""
    await tracker.ready()
    threshold = tracker.settings.video_free_max_wait_seconds
    data = []
    for model in tracker.specs:
        figures = tracker.figures(model)
        free_wait = figures.expected_wait_seconds.get("free")
        admitting_free = free_wait is not None and free_wait <= threshold
        data.append(ModelCapacity(**figures.model_dump(), admitting_free=admitting_free))
    return CapacityList(data=data)
