"""The lifecycle schedules, created (or brought up to date) when the orchestration worker starts.

Four Temporal Schedules, each starting one small workflow per tick on the orchestration queue:
video expiry, video orphan sweeps, CI log compaction and CI retention. Overlap SKIP: a tick
that finds the previous one still running does nothing, so a slow batch never piles up.
Schedule ids take the settings' ``queue_prefix``, so deployments (and tests) sharing a
namespace keep apart. Workflows never read configuration: each schedule's action carries its
``LifecycleInput`` from settings, and a worker that starts with other settings updates the
schedule to them (every worker of a deployment runs with the same settings, so the last one to
start changes nothing).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.client import Client, Schedule

from leasehold.settings import Settings
from leasehold.temporal import ensure_schedule, interval_schedule
from workflows.lifecycle.ci.workflows import CILogCompactionWorkflow, CIRetentionWorkflow
from workflows.lifecycle.types import LifecycleInput
from workflows.lifecycle.video.workflows import VideoExpiryWorkflow, VideoOrphanSweepWorkflow
from workflows.queues import orchestration_queue

log = logging.getLogger(__name__)

VIDEO_EXPIRY = "lifecycle-video-expiry"
VIDEO_ORPHANS = "lifecycle-video-orphans"
CI_LOG_COMPACTION = "lifecycle-ci-log-compaction"
CI_RETENTION = "lifecycle-ci-retention"


@dataclass(frozen=True)
class LifecycleSchedule:
    """One schedule: its id (without the prefix), workflow, interval and input."""

    name: str
    workflow: Any
    every: timedelta
    input: LifecycleInput


def lifecycle_schedules(settings: Settings) -> list[LifecycleSchedule]:
    """The schedules this deployment runs, from its settings."""
    base = LifecycleInput(batch_size=settings.lifecycle_batch_size, max_batches=settings.lifecycle_max_batches)
    orphans = {
        "grace_seconds": settings.video_orphan_grace_seconds,
        "window_seconds": settings.video_orphan_window_seconds,
    }
    retention = {
        "retention_days": settings.ci_log_retention_days,
        # A finished run accepts job retries this long: it is not over before then.
        "min_retention_seconds": settings.ci_retry_window_seconds,
    }
    # (name, workflow, interval in seconds, what its input has beyond the batch limits)
    table: list[tuple[str, Any, float, dict[str, Any]]] = [
        (VIDEO_EXPIRY, VideoExpiryWorkflow.run, settings.video_expiry_interval_seconds, {}),
        (VIDEO_ORPHANS, VideoOrphanSweepWorkflow.run, settings.video_orphan_sweep_interval_seconds, orphans),
        (CI_LOG_COMPACTION, CILogCompactionWorkflow.run, settings.ci_log_compaction_interval_seconds, {}),
        (CI_RETENTION, CIRetentionWorkflow.run, settings.ci_retention_interval_seconds, retention),
    ]
    return [
        LifecycleSchedule(name, workflow, timedelta(seconds=seconds), base.model_copy(update=extra))
        for name, workflow, seconds, extra in table
    ]


def schedule_id(settings: Settings, name: str) -> str:
    """The schedule's id in the namespace: ``<queue_prefix><name>``."""
    return f"{settings.queue_prefix}{name}"


def _schedule(settings: Settings, item: LifecycleSchedule) -> Schedule:
    # The server appends the tick's time to the id, so each tick is its own execution.
    sid = schedule_id(settings, item.name)
    return interval_schedule(item.workflow, item.input, sid, orchestration_queue(settings.queue_prefix), item.every)


async def ensure_lifecycle_schedules(client: Client, settings: Settings) -> list[str]:
    """Create the lifecycle schedules, or update existing ones to these settings; their ids."""
    ids = []
    for item in lifecycle_schedules(settings):
        sid = schedule_id(settings, item.name)
        schedule = _schedule(settings, item)
        created = await ensure_schedule(client, sid, schedule)
        log.info("%s lifecycle schedule %s (every %s)", "created" if created else "updated", sid, item.every)
        ids.append(sid)
    return ids
