"""Typed payloads of the lifecycle workflows and their batch activities.

Light on purpose (stdlib + pydantic): the orchestration worker and the schedule set-up import
it. Workflows never read configuration, so each schedule carries its settings in its action's
``LifecycleInput`` (and the orchestration worker updates the schedules when settings change).
Fields are only ever added, with defaults, so old histories still decode.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

# The batch activities' names (what running executions scheduled; they never change).
ACTIVITY_EXPIRE_VIDEOS = "lifecycle_expire_videos"
ACTIVITY_SWEEP_VIDEO_ORPHANS = "lifecycle_sweep_video_orphans"
ACTIVITY_COMPACT_CI_LOGS = "lifecycle_compact_ci_logs"
ACTIVITY_APPLY_CI_RETENTION = "lifecycle_apply_ci_retention"


class LifecycleInput(BaseModel):
    """Start input of every lifecycle workflow: how much one tick does, and its job's limits."""

    batch_size: int = Field(default=100, ge=1)
    max_batches: int = Field(default=50, ge=1)
    # Video orphan sweep: jobs closed at least ``grace_seconds`` and at most
    # ``grace_seconds + window_seconds`` ago.
    grace_seconds: float = 3600.0
    window_seconds: float = 2 * 24 * 3600.0
    # CI retention: days after a run finished (tenants' plans may say otherwise), and the least
    # time a finished run is kept whatever they say (it accepts job retries that long).
    retention_days: int = 90
    min_retention_seconds: float = 0.0


class LifecycleBatch(BaseModel):
    """Input of one batch activity: the tick's input and where the previous batch stopped."""

    input: LifecycleInput
    # Opaque keyset position of the last row the previous batch looked at (``None``: from the start).
    cursor: str | None = None


class BatchResult(BaseModel):
    """What one batch did."""

    # Rows (jobs, attempts, runs) brought to their end state by this batch.
    processed: int = 0
    # Rows looked at and left alone (a live job, an attempt with nothing to do).
    skipped: int = 0
    # Objects deleted from the store.
    deleted_objects: int = 0
    cursor: str | None = None
    # No more rows are due now; the next tick looks again.
    done: bool = True


class LifecycleResult(BaseModel):
    """What one tick (one workflow run) did, summed over its batches."""

    batches: int = 0
    processed: int = 0
    skipped: int = 0
    deleted_objects: int = 0
    # ``False`` when the tick stopped at ``max_batches`` with rows still due.
    done: bool = True
