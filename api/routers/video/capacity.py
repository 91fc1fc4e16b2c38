"""``/v1/capacity``: per model version and GPU class (one entry per model without classes),
the queue, the workers and the worker count a target wait needs. The same figures are
Prometheus gauges on ``/metrics`` (for an autoscaler such as KEDA)."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import CapacityDep, PrincipalDep
from api.schemas.video import CapacityList, ModelCapacity

router = APIRouter(prefix="/v1/capacity", tags=["capacity"])


@router.get("", response_model=CapacityList)
async def get_capacity(tracker: CapacityDep, _principal: PrincipalDep) -> CapacityList:
    """Capacity of every model version (and GPU class) served here."""
    await tracker.ready()
    threshold = tracker.settings.video_free_max_wait_seconds
    data = []
    for pool in tracker.pools:
        figures = tracker.figures(pool)
        free_wait = figures.expected_wait_seconds.get("free")
        admitting_free = free_wait is not None and free_wait <= threshold
        data.append(ModelCapacity(**figures.model_dump(), admitting_free=admitting_free))
    return CapacityList(data=data)
