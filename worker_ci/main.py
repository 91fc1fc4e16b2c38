"""``leasehold worker ci --labels linux``: runs CI jobs in sandboxes."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from leasehold.settings import Settings
from leasehold.worker_process import run_worker
from workflows.queues import ci_queue


@activity.defn(name="ci_worker_info")
def ci_worker_info() -> str:
    """Placeholder until the CI job activity lands."""
    return "placeholder"


def build_worker(client: Client, settings: Settings) -> Worker:
    return Worker(
        client,
        task_queue=ci_queue(settings.ci_labels, settings.queue_prefix),
        activities=[ci_worker_info],
        activity_executor=ThreadPoolExecutor(max_workers=4),
    )


def main(settings: Settings) -> None:
    asyncio.run(run_worker(settings, "ci", lambda c: build_worker(c, settings)))
