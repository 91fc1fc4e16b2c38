"""Image affinity on an OCI worker: beside the queues of its labels, the worker polls the image
queue (``workflows.queues.ci_image_queue``) of each of the images it holds, up to
``ci_oci_affinity_images`` of them, most recently used first, for every label set it serves.
A ``container:`` job whose image is pinned tries that queue first for a few seconds
(``workflows.ci.run_scheduling``), so it lands where its image is already pulled; when no
worker holding it takes it in time, it goes to its labels' queue like any job.

What the worker holds changes as jobs pull and the cache evicts: ``ImageQueues.run`` compares
the wanted queues with the polled ones every ``SYNC_SECONDS``, starts a ``Worker`` for each new
one and stops those no longer wanted once no job of theirs runs.

Slots. A poll of a label queue holds one of the worker's job slots (``SharedSlots``: a poll
that gets a task must be able to run it); a poll of an image queue holds none, or idle image
polls would keep label jobs from running. A job an image queue hands over takes a free slot
when it starts (``SharedSlots.take``); with none free it is refused at once, before it counts
as an attempt, and the run gives it to its labels' queue (``IMAGE_WORKER_FULL_ERROR``). So
the worker never runs more than its slots, and a hot worker that is full never delays a job.
Each label queue keeps one poller, whose wait holds one slot (``SharedSlots.idle_per_queue``;
the SDK would otherwise reserve the next poll's ahead, two in all): a worker takes image-queue
jobs into the slots beyond those, so it needs more slots than label queues (``worker_ci.main``
polls no image queue otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field

from prometheus_client import Gauge
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import PollerBehaviorSimpleMaximum, Worker, WorkerDeploymentConfig

from worker_ci.job_slots import SharedSlots
from workflows.ci.types.job import ACTIVITY_RUN_JOB, IMAGE_WORKER_FULL_ERROR, JobActivityInput, JobResult
from workflows.queues import ci_image_queue

log = logging.getLogger(__name__)

IMAGES_HELD = Gauge("leasehold_ci_worker_images_held", "Job images this OCI worker holds in its cache")
IMAGE_QUEUES_POLLED = Gauge("leasehold_ci_worker_image_queues_polled", "Image queues this OCI worker polls")

# How often the polled image queues are brought in line with the images held.
SYNC_SECONDS = 2.0


@dataclass
class ImageQueues:
    """The image queues one worker polls, kept in line with ``held()`` (digests, most recently
    used first, at most ``limit`` of them) by ``run``; ``run_job`` is the job activity's
    implementation, run when ``slots`` has a free slot."""

    client: Client
    label_sets: Sequence[tuple[str, ...]]
    prefix: str
    isolation: str
    held: Callable[[], list[str]]
    limit: int
    run_job: Callable[[JobActivityInput], JobResult]
    slots: SharedSlots
    executor: Executor
    deployment_config: WorkerDeploymentConfig | None
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _running: Counter[str] = field(default_factory=Counter, init=False)
    _workers: dict[str, tuple[Worker, asyncio.Task[None]]] = field(default_factory=dict, init=False)

    @property
    def polled(self) -> list[str]:
        """The image queues polled now."""
        return sorted(self._workers)

    def wanted(self, held: list[str]) -> list[str]:
        """The image queues of the most recently used of ``held``, for every label set."""
        return [
            ci_image_queue(labels, digest, self.prefix, self.isolation)
            for digest in held[: self.limit]
            for labels in self.label_sets
        ]

    async def run(self) -> None:
        """Keep the polled queues in line with the images held, until cancelled; then stop them."""
        try:
            while True:
                await self.sync()
                await asyncio.sleep(SYNC_SECONDS)
        finally:
            await asyncio.shield(self.close())

    async def sync(self) -> None:
        held = self.held()
        IMAGES_HELD.set(len(held))
        wanted = set(self.wanted(held))
        for queue in sorted(wanted - set(self._workers)):
            worker = self._worker(queue)
            self._workers[queue] = (worker, asyncio.create_task(worker.run(), name=f"image-queue {queue}"))
            log.info("image affinity: polling %s", queue)
        with self._lock:
            idle = [q for q in self._workers if q not in wanted and not self._running[q]]
        for queue in idle:
            await self._stop(queue)
            log.info("image affinity: no longer polling %s", queue)
        IMAGE_QUEUES_POLLED.set(len(self._workers))

    async def close(self) -> None:
        await asyncio.gather(*(self._stop(queue) for queue in list(self._workers)))

    async def _stop(self, queue: str) -> None:
        worker, task = self._workers.pop(queue)
        await worker.shutdown()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await task

    def _worker(self, queue: str) -> Worker:
        # One poller and one task at a time per image queue, outside the label queues' slots.
        return Worker(
            self.client,
            task_queue=queue,
            activities=[self._activity()],
            activity_executor=self.executor,
            max_concurrent_activities=1,
            activity_task_poller_behavior=PollerBehaviorSimpleMaximum(1),
            deployment_config=self.deployment_config,
        )

    def _activity(self) -> Callable[[JobActivityInput], JobResult]:
        @activity.defn(name=ACTIVITY_RUN_JOB)
        def run_job(inp: JobActivityInput) -> JobResult:
            """The job, if a slot of the worker is free; else refused for the labels' queue."""
            if not self.slots.take():
                raise ApplicationError(
                    "this worker holds the job's image but has no free job slot",
                    type=IMAGE_WORKER_FULL_ERROR,
                    non_retryable=True,
                )
            queue = activity.info().task_queue
            with self._lock:
                self._running[queue] += 1
            try:
                return self.run_job(inp)
            finally:
                with self._lock:
                    self._running[queue] -= 1
                self.slots.give()

        return run_job
