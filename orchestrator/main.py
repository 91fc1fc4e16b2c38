"""``leasehold worker orchestration``: the workflow worker."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from temporalio.client import Client
from temporalio.worker import Worker

from leasehold.settings import Settings
from leasehold.worker_process import run_worker
from orchestrator import registry
from workflows.queues import orchestration_queue


def build_worker(client: Client, settings: Settings) -> Worker:
    activities = [fn for factory in registry.ACTIVITY_FACTORIES for fn in factory(settings)]
    return Worker(
        client,
        task_queue=orchestration_queue(settings.queue_prefix),
        workflows=registry.WORKFLOWS,
        activities=activities,
        activity_executor=ThreadPoolExecutor(max_workers=16),
    )


def main(settings: Settings) -> None:
    asyncio.run(run_worker(settings, "orchestration", lambda c: build_worker(c, settings)))
