"""Admission of video jobs: tiers, the per-user cap, capacity refusals, and dispatch fairness.

Tiers share each model's workers through Temporal task-queue fairness, not priority:
priority is strict, so a sustained paid backlog would starve free jobs forever. Each job's
generation task carries

* ``fairness_key = "<tier>/<tenant>/<user>"``: one key per user, so within a tier one user's
  burst interleaves with other users' jobs instead of queueing them behind it;
* ``fairness_weight = tier weight / users of that tier with jobs waiting`` (counting this one):
  the keys of a tier together weigh the tier's weight, so while both tiers have a backlog
  paid and free get dispatches in the configured ratio (4:1 by default), however many users
  each tier has. Weights are fixed when a task is enqueued; while the number of waiting users
  of a tier changes, that tier's share drifts until the tasks enqueued under the old count
  are dispatched (at most the per-user cap per user).

The per-user cap counts the user's jobs that wait for a worker (not those generating): their
``video_jobs`` rows in ``queued``, counted in the transaction that inserts the new job's row,
under a per-user lock every API replica takes (``api.video.submit``). So it holds exactly,
however many replicas a user's concurrent submits reach.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from api.errors import ApiError
from api.video.capacity import CapacityTracker
from leasehold.records.api_keys import Principal
from leasehold.settings import Settings

# Temporal limits fairness keys to 64 bytes.
MAX_FAIRNESS_KEY = 64
# Retry-After bounds for capacity refusals.
MIN_RETRY_AFTER_SECONDS = 15
MAX_RETRY_AFTER_SECONDS = 3600
# With no worker serving a model, ask callers to come back after this long.
NO_WORKER_RETRY_AFTER_SECONDS = 60


@dataclass(frozen=True)
class Admission:
    """How an admitted job is dispatched."""

    fairness_key: str
    fairness_weight: float


def fairness_key(principal: Principal) -> str:
    """One key per user and tier; hashed when the readable form is too long for Temporal."""
    readable = f"{principal.tier}/{principal.tenant_id}/{principal.user_id}"
    if len(readable.encode()) <= MAX_FAIRNESS_KEY:
        return readable
    digest = hashlib.sha256(f"{principal.tenant_id}\n{principal.user_id}".encode()).hexdigest()[:32]
    return f"{principal.tier}/{digest}"


def queued_limit(settings: Settings, tier: str) -> int:
    return settings.video_paid_max_queued if tier == "paid" else settings.video_free_max_queued


def check_queued_cap(queued: int, limit: int) -> None:
    """Refuse a new job of a user with ``queued`` jobs waiting already (429)."""
    if queued >= limit:
        raise ApiError(
            429,
            "too_many_queued",
            f"you have {queued} videos waiting for a GPU (the limit is {limit}); submit more once some have started",
            extra={"queued": queued, "limit": limit},
        )


def admit(tracker: CapacityTracker, settings: Settings, principal: Principal, model: str) -> Admission:
    """Decide on a new job of ``principal`` for ``model`` from the measured capacity; raise
    ``ApiError`` to refuse it. The per-user cap is checked apart, under the user's lock
    (``check_queued_cap``)."""
    users = tracker.active_users(model, principal.tier)
    users.add((principal.tenant_id, principal.user_id))
    weight = tracker.tier_weight(principal.tier) / len(users)
    snapshot = tracker.snapshots[model]
    if snapshot.workers_serving == 0 and (principal.tier != "paid" or not settings.video_paid_admit_without_workers):
        raise ApiError(
            503,
            "model_unavailable",
            f"no worker is serving {model} right now; retry later or choose another model",
            headers={"Retry-After": str(NO_WORKER_RETRY_AFTER_SECONDS)},
            extra={"retry_after": NO_WORKER_RETRY_AFTER_SECONDS},
        )
    if principal.tier == "free":
        wait = tracker.expected_wait(model, principal.tier, weight)
        threshold = settings.video_free_max_wait_seconds
        if wait is not None and wait > threshold:
            # The free queue drains at least as fast as it grows while refusals last, so the
            # excess over the threshold is a fair guess of when a submit would pass.
            retry_after = int(min(MAX_RETRY_AFTER_SECONDS, max(MIN_RETRY_AFTER_SECONDS, math.ceil(wait - threshold))))
            raise ApiError(
                503,
                "capacity",
                f"GPU capacity for {model} is short: a free video would wait about {wait / 60:.0f} minutes "
                f"(the free tier's limit is {threshold / 60:.0f}); paid videos are still accepted. "
                f"Retry in about {retry_after} seconds.",
                headers={"Retry-After": str(retry_after)},
                extra={"retry_after": retry_after},
            )
    return Admission(fairness_key=fairness_key(principal), fairness_weight=weight)
