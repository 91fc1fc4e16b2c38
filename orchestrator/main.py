"""``leasehold worker orchestration``: the workflow worker.

It hosts every workflow of both products and the light (non-GPU, non-sandbox) activities;
both are listed here, where the process is composed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.ci.lifecycle import CILifecycleActivities
from activities.ci.projection import CIProjectionActivities
from activities.ci.schedules import CIScheduleActivities
from activities.ci.status_report import build_status_activities
from activities.video.housekeeping import VideoHousekeepingActivities
from activities.video.lifecycle import VideoLifecycleActivities
from activities.video.projection import VideoProjectionActivities
from activities.video.webhooks import build_webhook_activities
from leasehold.database import init_database
from leasehold.settings import Settings
from leasehold.storage import open_store
from leasehold.worker_process import run_worker
from leasehold.worker_versioning import deployment_config
from orchestrator.lifecycle_schedules import ensure_lifecycle_schedules
from workflows.ci.concurrency import CIConcurrencyGroupWorkflow
from workflows.ci.push import CIPushWorkflow
from workflows.ci.reconcile import CIReconcileWorkflow
from workflows.ci.run import CIRunWorkflow
from workflows.ci.semaphore import CITenantSemaphoreWorkflow
from workflows.lifecycle.ci.workflows import CILogCompactionWorkflow, CIRetentionWorkflow
from workflows.lifecycle.video.workflows import VideoExpiryWorkflow, VideoOrphanSweepWorkflow
from workflows.queues import orchestration_queue
from workflows.version import BUILD_ID
from workflows.video.job import VideoJobWorkflow

log = logging.getLogger(__name__)

WORKFLOWS: list[type] = [
    VideoJobWorkflow,
    CIPushWorkflow,
    CIRunWorkflow,
    CITenantSemaphoreWorkflow,
    CIConcurrencyGroupWorkflow,
    CIReconcileWorkflow,
    VideoExpiryWorkflow,
    VideoOrphanSweepWorkflow,
    CILogCompactionWorkflow,
    CIRetentionWorkflow,
]


def build_activities(settings: Settings) -> list[Callable[..., Any]]:
    """The activities this worker hosts, built with their dependencies (constructor injection)."""
    db = init_database(settings.resolved_database_url)
    # Every activity here that uses the database waits out a failover this long, in place.
    failover = settings.database_failover_seconds
    video_lifecycle = VideoLifecycleActivities(open_store(settings), db, failover)
    ci_lifecycle = CILifecycleActivities(open_store(settings), db, failover)
    video_webhooks = build_webhook_activities(settings, db)
    ci_projection = CIProjectionActivities(db, failover)
    ci_status = build_status_activities(settings, db)
    return [
        VideoHousekeepingActivities(open_store(settings)).delete_video_objects,
        VideoProjectionActivities(db, failover).project_video_job,
        ci_projection.project_ci_run,
        ci_projection.project_ci_push,
        video_lifecycle.expire_videos,
        video_lifecycle.sweep_video_orphans,
        ci_lifecycle.compact_ci_logs,
        ci_lifecycle.apply_ci_retention,
        video_webhooks.deliver_video_event,
        ci_status.report_status,
        CIScheduleActivities().sync_schedules,
    ]


def build_worker(client: Client, settings: Settings) -> Worker:
    return Worker(
        client,
        task_queue=orchestration_queue(settings.queue_prefix),
        workflows=WORKFLOWS,
        activities=build_activities(settings),
        activity_executor=ThreadPoolExecutor(max_workers=16),
        # Versioned: an execution runs on the build that started it (docs/versioning.md).
        deployment_config=deployment_config(settings, BUILD_ID, routed=True),
        # Bounds the worker's memory: open CI runs would otherwise fill the SDK's default 1000.
        max_cached_workflows=settings.orchestration_max_cached_workflows,
        # The sandbox is a determinism guard the replay tests apply (see ``Settings``).
        workflow_runner=SandboxedWorkflowRunner() if settings.workflow_sandbox else UnsandboxedWorkflowRunner(),
    )


async def start_schedules(client: Client, settings: Settings) -> None:
    """The lifecycle schedules, created or updated before the worker polls (unless turned off)."""
    if not settings.lifecycle_schedules:
        return
    try:
        await ensure_lifecycle_schedules(client, settings)
    except Exception:
        # Housekeeping must not keep jobs from running: the next start tries again.
        log.exception("could not create or update the lifecycle schedules")


def main(settings: Settings) -> None:
    asyncio.run(
        run_worker(
            settings,
            "orchestration",
            lambda c: build_worker(c, settings),
            on_connect=lambda c: start_schedules(c, settings),
        )
    )
