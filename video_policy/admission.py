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

With GPU classes (``leasehold.gpu_classes``) a job is first routed (``route``): to the smallest
class whose memory holds its estimate, or the next larger one that has live workers while that
one has none; a job larger than every class is refused. Fairness, the no-worker refusal
and the free tier's wait are then decided on the chosen class's queue.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from leasehold.gpu_classes import GpuClass, classes_fitting, job_memory_bytes
from leasehold.records.api_keys import Principal
from leasehold.settings import Settings
from video_policy.eta import ModelSnapshot
from workflows.video.models import get_model
from workflows.video.types import VideoRequest

# Temporal limits fairness keys to 64 bytes.
MAX_FAIRNESS_KEY = 64
# Retry-After bounds for capacity refusals.
MIN_RETRY_AFTER_SECONDS = 15
MAX_RETRY_AFTER_SECONDS = 3600
# With no worker serving a model, ask callers to come back after this long.
NO_WORKER_RETRY_AFTER_SECONDS = 60


class PoolView(Protocol):
    """What admission reads of a pool: its key and how messages name it."""

    @property
    def key(self) -> str: ...

    @property
    def label(self) -> str: ...


class WaitingUsers(Protocol):
    """The users of a tier with jobs waiting: admission adds the caller and counts them."""

    def add(self, user: tuple[str, str], /) -> None: ...

    def __len__(self) -> int: ...


class CapacityView(Protocol):
    """The measured capacity admission decides from (the API's tracker, or the planner's
    simulation)."""

    @property
    def pools(self) -> Mapping[str, PoolView]: ...

    @property
    def snapshots(self) -> Mapping[str, ModelSnapshot]: ...

    def active_users(self, model: str, tier: str) -> WaitingUsers: ...

    def tier_weight(self, tier: str) -> float: ...

    def expected_wait(self, model: str, tier: str, weight: float) -> float | None: ...


class ServingView(Protocol):
    """What routing reads: how many workers serve a model on a GPU class now."""

    def workers_serving(self, model: str, gpu_class: str | None) -> int: ...


@dataclass(frozen=True)
class Admission:
    """Admitted: how the job is dispatched."""

    fairness_key: str
    fairness_weight: float


@dataclass(frozen=True)
class ModelUnavailable:
    """Refused: no worker serves the pool (named ``label``) right now."""

    label: str
    retry_after: int = NO_WORKER_RETRY_AFTER_SECONDS


@dataclass(frozen=True)
class OverCapacity:
    """Refused: a free job would wait ``wait`` seconds, past the free tier's ``threshold``."""

    label: str
    wait: float
    threshold: float
    retry_after: int


@dataclass(frozen=True)
class TooManyQueued:
    """Refused: the user has ``queued`` jobs waiting already, at or past ``limit``."""

    queued: int
    limit: int


@dataclass(frozen=True)
class TooLarge:
    """Refused: the job needs ``need_bytes`` of GPU memory, more than the largest class has;
    ``param`` is what the caller can change (``seconds`` when a shorter video would fit)."""

    model: str
    seconds: int
    width: int
    height: int
    need_bytes: int
    largest: GpuClass
    param: str


def fairness_key(principal: Principal) -> str:
    """One key per user and tier; hashed when the readable form is too long for Temporal."""
    readable = f"{principal.tier}/{principal.tenant_id}/{principal.user_id}"
    if len(readable.encode()) <= MAX_FAIRNESS_KEY:
        return readable
    digest = hashlib.sha256(f"{principal.tenant_id}\n{principal.user_id}".encode()).hexdigest()[:32]
    return f"{principal.tier}/{digest}"


def queued_limit(settings: Settings, tier: str) -> int:
    return settings.video_paid_max_queued if tier == "paid" else settings.video_free_max_queued


def check_queued_cap(queued: int, limit: int) -> TooManyQueued | None:
    """The refusal of a new job of a user with ``queued`` jobs waiting already, if it is one."""
    if queued >= limit:
        return TooManyQueued(queued=queued, limit=limit)
    return None


def route(capacity: ServingView, settings: Settings, request: VideoRequest) -> str | TooLarge | None:
    """The GPU class whose queue generates ``request`` (``None`` without classes); ``TooLarge``
    when the job needs more memory than every class has.

    The smallest class that holds the job's estimate, unless it has no live worker (the
    capacity tracker's last refresh: pollers seen recently, or workers generating with live
    heartbeats); then the next larger one that has. With none live anywhere, the smallest that
    fits: the job waits there for a worker.
    """
    classes = settings.gpu_classes
    spec = get_model(request.model)
    if not classes or spec is None:
        return None
    per_pixel = spec.memory_bytes_per_frame_pixel
    need = job_memory_bytes(spec.frame_count(request.seconds), request.width, request.height, per_pixel)
    fitting = classes_fitting(classes, need)
    if not fitting:
        largest = classes[-1]
        # Name what the caller can change: the length when a shorter video would fit.
        shortest = job_memory_bytes(spec.frame_count(spec.min_seconds), request.width, request.height, per_pixel)
        param = "seconds" if shortest <= largest.memory_bytes else "size"
        return TooLarge(spec.name, request.seconds, request.width, request.height, need, largest, param)
    for gpu_class in fitting:
        if capacity.workers_serving(spec.name, gpu_class.name) > 0:
            return gpu_class.name
    return fitting[0].name


def capacity_breakdown(by_capacity: dict[str, int]) -> str:
    """`` (2 reserved, 0 preemptible workers)`` where the pool is split by capacity type, so a
    refusal says which capacity is short; empty otherwise."""
    if not by_capacity:
        return ""
    return (
        " ("
        + ", ".join(f"{n} {t}" for t, n in sorted(by_capacity.items(), key=lambda i: i[0] != "reserved"))
        + " workers)"
    )


def admit(
    capacity: CapacityView, settings: Settings, principal: Principal, pool: str
) -> Admission | ModelUnavailable | OverCapacity:
    """Decide on a new job of ``principal`` for the pool keyed ``pool`` (``pools.pool_key``) from
    the measured capacity. The per-user cap is checked apart, under the user's lock
    (``check_queued_cap``)."""
    label, model = capacity.pools[pool].label, capacity.pools[pool].key
    label += capacity_breakdown(capacity.snapshots[model].workers_by_capacity)
    users = capacity.active_users(model, principal.tier)
    users.add((principal.tenant_id, principal.user_id))
    weight = capacity.tier_weight(principal.tier) / len(users)
    snapshot = capacity.snapshots[model]
    if snapshot.workers_serving == 0 and (principal.tier != "paid" or not settings.video_paid_admit_without_workers):
        return ModelUnavailable(label=label)
    if principal.tier == "free":
        wait = capacity.expected_wait(model, principal.tier, weight)
        threshold = settings.video_free_max_wait_seconds
        if wait is not None and wait > threshold:
            # The free queue drains at least as fast as it grows while refusals last, so the
            # excess over the threshold is a fair guess of when a submit would pass.
            retry_after = int(min(MAX_RETRY_AFTER_SECONDS, max(MIN_RETRY_AFTER_SECONDS, math.ceil(wait - threshold))))
            return OverCapacity(label=label, wait=wait, threshold=threshold, retry_after=retry_after)
    return Admission(fairness_key=fairness_key(principal), fairness_weight=weight)
