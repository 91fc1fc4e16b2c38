"""Video admission as HTTP: each refusal ``video_policy.admission`` decides becomes its
``ApiError`` (status, code, message, Retry-After); an admitted job's dispatch is returned."""

from __future__ import annotations

from api.errors import ApiError
from leasehold.gpu_classes import GIB
from leasehold.records.api_keys import Principal
from leasehold.settings import Settings
from video_policy import admission as policy
from video_policy.admission import Admission, CapacityView, ModelUnavailable, ServingView, TooLarge, TooManyQueued
from video_policy.pools import pool_key
from workflows.video.types import VideoRequest


def check_queued_cap(queued: int, limit: int) -> None:
    """Refuse a new job of a user with ``queued`` jobs waiting already (429)."""
    refusal = policy.check_queued_cap(queued, limit)
    if refusal is not None:
        raise too_many_queued_error(refusal)


def too_many_queued_error(refusal: TooManyQueued) -> ApiError:
    queued, limit = refusal.queued, refusal.limit
    return ApiError(
        429,
        "too_many_queued",
        f"you have {queued} videos waiting for a GPU (the limit is {limit}); submit more once some have started",
        extra={"queued": queued, "limit": limit},
    )


def route(tracker: ServingView, settings: Settings, request: VideoRequest) -> str | None:
    """The GPU class whose queue generates ``request`` (``None`` without classes); 400 when the
    job needs more memory than every class has."""
    decision = policy.route(tracker, settings, request)
    if isinstance(decision, TooLarge):
        raise too_large_error(decision)
    return decision


def too_large_error(refusal: TooLarge) -> ApiError:
    need, largest = refusal.need_bytes, refusal.largest
    return ApiError(
        400,
        "video_too_large",
        f"a {refusal.seconds}s {refusal.width}x{refusal.height} video of {refusal.model} needs about "
        f"{need / GIB:.1f} GiB of GPU memory; the largest GPU class here ({largest.name}) has "
        f"{largest.memory_gib:g} GiB. Ask for a smaller {refusal.param}.",
        refusal.param,
        extra={"required_gib": round(need / GIB, 3), "largest_class_gib": largest.memory_gib},
    )


def admit(
    tracker: CapacityView, settings: Settings, principal: Principal, model: str, gpu_class: str | None = None
) -> Admission:
    """Decide on a new job of ``principal`` for ``model`` on ``gpu_class`` (``route``) from the
    measured capacity; raise ``ApiError`` to refuse it (503). The per-user cap is checked apart,
    under the user's lock (``check_queued_cap``)."""
    decision = policy.admit(tracker, settings, principal, pool_key(model, gpu_class))
    if isinstance(decision, Admission):
        return decision
    if isinstance(decision, ModelUnavailable):
        raise ApiError(
            503,
            "model_unavailable",
            f"no worker is serving {decision.label} right now; retry later or choose another model",
            headers={"Retry-After": str(decision.retry_after)},
            extra={"retry_after": decision.retry_after},
        )
    wait, threshold, retry_after = decision.wait, decision.threshold, decision.retry_after
    raise ApiError(
        503,
        "capacity",
        f"GPU capacity for {decision.label} is short: a free video would wait about {wait / 60:.0f} minutes "
        f"(the free tier's limit is {threshold / 60:.0f}); paid videos are still accepted. "
        f"Retry in about {retry_after} seconds.",
        headers={"Retry-After": str(retry_after)},
        extra={"retry_after": retry_after},
    )
