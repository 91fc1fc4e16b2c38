"""One job's ETA and the explanation of its place in the queue, from the capacity tracker."""

from __future__ import annotations

import time
from dataclasses import dataclass

from api.video.capacity import CapacityTracker
from api.video.eta import JobCosts, QueuedJob, shape_of
from api.video.memo import JobMemo
from workflows.video.models import VideoModelSpec


@dataclass(frozen=True)
class QueueStatus:
    """Why a job is still queued: where it stands and what serves its model."""

    position: int
    ahead: int
    workers_serving: int
    completion_rate_per_min: float
    reason: str


@dataclass(frozen=True)
class Estimate:
    """Seconds until done and the expected start/finish times (epoch seconds), or why not."""

    eta_seconds: float | None
    estimated_start_at: float | None = None
    estimated_completion_at: float | None = None
    reason: str | None = None
    queue: QueueStatus | None = None


def estimate_running(
    tracker: CapacityTracker | None, spec: VideoModelSpec, memo: JobMemo, progress: int, started_at: float | None
) -> Estimate:
    """A generating job: its measured remaining run time."""
    costs = tracker.costs[spec.name] if tracker is not None and spec.name in tracker.costs else JobCosts(spec)
    shape = shape_of(spec, memo.steps, memo.seconds, memo.width, memo.height)
    step = int(shape.steps * progress / 100)
    remaining = costs.remaining_seconds(shape, step)
    now = time.time()
    return Estimate(
        eta_seconds=round(remaining, 1),
        estimated_start_at=started_at,
        estimated_completion_at=now + remaining,
    )


def estimate_queued(
    tracker: CapacityTracker | None,
    spec: VideoModelSpec,
    job_id: str,
    memo: JobMemo,
    tenant_id: str,
    user_id: str,
    tier: str,
) -> Estimate:
    """A waiting job: its expected queue wait plus its run time."""
    shape = shape_of(spec, memo.steps, memo.seconds, memo.width, memo.height)
    now = time.time()
    if tracker is None or spec.name not in tracker.specs:
        run = JobCosts(spec).run_seconds(shape)
        return Estimate(eta_seconds=round(run, 1), reason="queue wait not measured")
    costs = tracker.costs[spec.name]
    planned = tracker.plan(spec.name)
    if planned is not None and job_id not in planned.starts:
        # Submitted after the last refresh: place it as the server will, behind what waits now.
        planned = tracker.plan_with(
            spec.name,
            QueuedJob(
                job_id=job_id,
                tenant_id=tenant_id,
                user_id=user_id,
                tier=tier,
                created_at=memo.created_at,
                shape=shape,
                fairness_key=memo.fairness_key or tier,
                fairness_weight=memo.fairness_weight or 1.0,
            ),
        )
    snapshot = tracker.snapshots[spec.name]
    rate = round(snapshot.completions_per_minute, 2)
    if planned is None:
        reason = f"no worker is serving {spec.name} right now; the job waits until one starts"
        return Estimate(
            eta_seconds=None,
            reason=reason,
            queue=QueueStatus(
                position=len(snapshot.queued) + 1,
                ahead=len(snapshot.queued),
                workers_serving=0,
                completion_rate_per_min=rate,
                reason=reason,
            ),
        )
    position, wait = planned.starts[job_id]
    run = costs.run_seconds(shape)
    ahead = position - 1
    busy = sum(1 for r in snapshot.running if r.alive)
    if ahead == 0 and busy < planned.workers:
        reason = "next in line; a worker is free and will pick it up in a moment"
    elif ahead == 0:
        reason = f"next in line; all {planned.workers} worker(s) serving {spec.name} are busy"
    else:
        reason = (
            f"{ahead} job(s) ahead for {spec.name}, shared by {planned.workers} worker(s); "
            f"paid and free jobs take turns at {_ratio(tracker)} while both wait"
        )
    return Estimate(
        eta_seconds=round(wait + run, 1),
        estimated_start_at=now + wait,
        estimated_completion_at=now + wait + run,
        queue=QueueStatus(
            position=position,
            ahead=ahead,
            workers_serving=planned.workers,
            completion_rate_per_min=rate,
            reason=reason,
        ),
    )


def _ratio(tracker: CapacityTracker) -> str:
    paid = tracker.settings.video_paid_weight
    free = tracker.settings.video_free_weight
    return f"{paid:g}:{free:g}"
