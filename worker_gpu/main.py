"""``leasehold worker gpu --model M``: one model version, one queue."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from leasehold.settings import Settings
from leasehold.worker_process import run_worker
from workflows.queues import video_queue


@activity.defn(name="gpu_worker_info")
def gpu_worker_info() -> str:
    """Which model this worker serves (replaced by the generation activity)."""
    return "placeholder"


def build_worker(client: Client, settings: Settings) -> Worker:
    return Worker(
        client,
        task_queue=video_queue(settings.gpu_model, settings.queue_prefix),
        activities=[gpu_worker_info],
        activity_executor=ThreadPoolExecutor(max_workers=2),
        max_concurrent_activities=1,
    )


def main(settings: Settings) -> None:
    asyncio.run(run_worker(settings, "gpu", lambda c: build_worker(c, settings)))
