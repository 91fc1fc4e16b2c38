"""``leasehold worker orchestration``: the workflow worker.

It hosts every workflow of both products and the light (non-GPU, non-sandbox) activities;
both are listed here, where the process is composed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities.ci.projection import CIProjectionActivities
from activities.video.housekeeping import VideoHousekeepingActivities
from activities.video.projection import VideoProjectionActivities
from leasehold.database import init_database
from leasehold.settings import Settings
from leasehold.storage import open_store
from leasehold.worker_process import run_worker
from workflows.ci.push import CIPushWorkflow
from workflows.ci.reconcile import CIReconcileWorkflow
from workflows.ci.run import CIRunWorkflow
from workflows.ci.semaphore import CITenantSemaphoreWorkflow
from workflows.queues import orchestration_queue
from workflows.video.job import VideoJobWorkflow

WORKFLOWS: list[type] = [
    VideoJobWorkflow,
    CIPushWorkflow,
    CIRunWorkflow,
    CITenantSemaphoreWorkflow,
    CIReconcileWorkflow,
]


def build_activities(settings: Settings) -> list[Callable[..., Any]]:
    """The activities this worker hosts, built with their dependencies (constructor injection)."""
    db = init_database(settings.resolved_database_url)
    return [
        VideoHousekeepingActivities(open_store(settings)).delete_video_objects,
        VideoProjectionActivities(db).project_video_job,
        CIProjectionActivities(db).project_ci_run,
        CIProjectionActivities(db).project_ci_push,
    ]


def build_worker(client: Client, settings: Settings) -> Worker:
    return Worker(
        client,
        task_queue=orchestration_queue(settings.queue_prefix),
        workflows=WORKFLOWS,
        activities=build_activities(settings),
        activity_executor=ThreadPoolExecutor(max_workers=16),
    )


def main(settings: Settings) -> None:
    asyncio.run(run_worker(settings, "orchestration", lambda c: build_worker(c, settings)))
