"""What a capacity refresh makes of what it reads: each open job as waiting or running (with
its step, worker and liveness), and the idle pollers of a pool's queue."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

from activities.video.definitions import GENERATE_VIDEO, PROJECT_VIDEO_JOB
from api.video.open_jobs import OpenJob
from api.video.views import PendingGeneration
from video_policy.eta import JobCosts, JobShape, QueuedJob, RunningJob

# What a running job keeps of the job as it waited: whose it is, and its shape.
_RUNNING_FROM_QUEUED = ("job_id", "tenant_id", "user_id", "tier", "shape")
# An idle worker long-polls for up to a minute between polls the server records.
POLLER_FRESH_SECONDS = 75.0


@dataclass
class Observed:
    """What the last refresh saw of a running job (to time its steps and its run)."""

    attempt: int
    step: int
    sent_at: float
    started_at: float
    shape: JobShape


@dataclass
class Walk:
    """What one refresh saw of a pool's open jobs (``CapacityTracker._walk``)."""

    queued: list[QueuedJob] = field(default_factory=list)
    running: list[RunningJob] = field(default_factory=list)
    # (job id, submit time, fairness key, weight) of every open job, for the fairness replay
    arrived: list[tuple[str, float, str, float]] = field(default_factory=list)
    starts: list[tuple[str, float]] = field(default_factory=list)
    # Running jobs as seen now, for the next refresh to time their steps
    seen: dict[str, Observed] = field(default_factory=dict)

    def add_running(self, job: QueuedJob, step: int, worker: str, alive: bool, attempt: int) -> None:
        """``job`` (as its row has it) is generating: at ``step`` on ``worker``."""
        kept = {name: getattr(job, name) for name in _RUNNING_FROM_QUEUED}
        self.running.append(RunningJob(**kept, step=step, worker=worker, alive=alive, attempt=attempt))


@dataclass(frozen=True)
class QueueStats:
    """What ``DescribeTaskQueue`` told of a pool's queue."""

    pollers: list[str]
    backlog: int = 0
    age: float = 0.0
    add_rate: float = 0.0
    dispatch_rate: float = 0.0


def walk_undescribed(walk: Walk, row: OpenJob, previous: Observed | None, now: float) -> None:
    """A generating job not described (past the budget, or the describe failed): generating, as
    its row says, at the step last seen."""
    job = row.job
    walk.starts.append((job.job_id, row.started_at or now))
    walk.add_running(
        job,
        step=previous.step if previous is not None else 0,
        worker="",
        alive=True,
        attempt=previous.attempt if previous is not None else max(1, row.attempts_started),
    )
    if previous is not None:
        walk.seen[job.job_id] = previous


def walk_generating(
    walk: Walk,
    costs: JobCosts,
    last_busy: dict[str, float],
    row: OpenJob,
    pending: PendingGeneration,
    previous: Observed | None,
    now: float,
    heartbeat_fresh: float,
) -> None:
    """A job whose generation runs: its step, worker and liveness (a sign of life within
    ``heartbeat_fresh`` of ``now``), and the time of the steps it took since the last refresh."""
    job = row.job
    progress = pending.progress
    started_at = pending.started_at or 0.0
    walk.starts.append((job.job_id, started_at))
    last_sign = max(started_at, pending.heartbeat_at or 0.0)
    worker = pending.worker
    alive = now - last_sign <= heartbeat_fresh
    if alive and worker:
        last_busy[worker] = max(last_busy.get(worker, 0.0), last_sign)
    step = 0
    if progress is not None and progress.attempt == pending.attempt:
        step = progress.step
    walk.add_running(job, step=step, worker=worker, alive=alive, attempt=pending.attempt)
    sent_at = progress.sent_at if progress is not None else 0.0
    if (
        previous is not None
        and previous.attempt == pending.attempt
        and step > previous.step
        and sent_at > previous.sent_at > 0
    ):
        costs.observe_step(job.shape, (sent_at - previous.sent_at) / (step - previous.step))
    if previous is not None and previous.attempt == pending.attempt and step <= previous.step:
        walk.seen[job.job_id] = previous  # keep the older mark: the next step times from it
    else:
        walk.seen[job.job_id] = Observed(pending.attempt, step, sent_at, started_at, job.shape)


def queue_stats(queue_desc: Any, now: float, last_busy: dict[str, float]) -> QueueStats:
    """The idle pollers and the server's figures of a pool's queue (none when undescribed)."""
    if queue_desc is None:
        return QueueStats(pollers=[])
    pollers = []
    for poller in queue_desc.pollers:
        last = poller.last_access_time.ToDatetime(UTC).timestamp()
        if now - last <= POLLER_FRESH_SECONDS and last >= last_busy.get(poller.identity, 0.0):
            pollers.append(poller.identity)
    if not queue_desc.HasField("stats"):
        return QueueStats(pollers=pollers)
    stats = queue_desc.stats
    return QueueStats(
        pollers=pollers,
        backlog=stats.approximate_backlog_count,
        age=stats.approximate_backlog_age.ToTimedelta().total_seconds(),
        add_rate=stats.tasks_add_rate,
        dispatch_rate=stats.tasks_dispatch_rate,
    )


def merged_stats(parts: list[QueueStats]) -> QueueStats:
    """One pool's figures from its queues (reserved and preemptible): counts and rates add up,
    the age is the oldest waiting task's."""
    return QueueStats(
        pollers=[p for part in parts for p in part.pollers],
        backlog=sum(part.backlog for part in parts),
        age=max((part.age for part in parts), default=0.0),
        add_rate=sum(part.add_rate for part in parts),
        dispatch_rate=sum(part.dispatch_rate for part in parts),
    )


def workers_by_capacity(per_type: dict[str, QueueStats], busy: set[str]) -> dict[str, int]:
    """Live workers of each capacity type: its queue's idle pollers, and the busy workers whose
    identity names the type (``worker_gpu.main.worker_name``: a busy worker does not poll)."""
    return {
        capacity: len(set(stats.pollers) | {w for w in busy if f"-{capacity}-" in w})
        for capacity, stats in per_type.items()
    }


def has_other_activity(desc: Any) -> bool:
    """Whether the workflow runs its clean-up (any activity but generation and its read-model
    writes: a job next in line writes its first one before its generation is scheduled)."""
    return any(
        p.activity_type.name not in (GENERATE_VIDEO, PROJECT_VIDEO_JOB) for p in desc.raw_description.pending_activities
    )
