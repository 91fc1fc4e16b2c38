"""Image affinity on the real dev server, with the real ``CIRunWorkflow`` and the worker side's
real ``ImageQueues`` (its image-queue workers, their slot check and refusal): only the job's own
work is a stand-in, which records the queue it was taken from. Four ``container:`` jobs:

* ``hot``: its image is held by a worker, which takes it from the image queue;
* ``cold``: nobody holds its image: the probe says so and the job goes straight to the labels'
  queue, never scheduled on an image queue (no affinity wait);
* ``full``: its image is held by a worker with no free slot: that worker refuses it at once,
  before it counts as an attempt, and the labels' queue runs it as attempt 1;
* ``gone``: the worker that held its image stopped (the engine still lists it as a poller for
  minutes): the job waits the affinity time on the image queue, then goes to the labels' queue;

and ``plain`` (no ``container:``), which never touches an image queue.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from temporalio import activity
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.ci.probe import CIProbeActivities
from testing.ci_runs import attempt_grant, run_input, succeeded
from worker_ci.image_queues import ImageQueues
from worker_ci.job_slots import SharedSlots
from workflows.ci.ids import run_workflow_id
from workflows.ci.run import CIRunWorkflow
from workflows.ci.types.job import (
    ACTIVITY_RUN_JOB,
    AttemptStatus,
    JobActivityInput,
    JobResult,
)
from workflows.ci.types.projection import ACTIVITY_PROJECT_RUN, CIRunSnapshot
from workflows.ci.types.run import RunStatus
from workflows.ci.types.spec import ContainerSpec, JobSpec, StepSpec
from workflows.queues import ci_image_queue, ci_probe_queue, ci_queue, orchestration_queue

LABEL = "affinity"
AFFINITY_SECONDS = 2.0


def digest(name: str) -> str:
    return "sha256:" + (name.encode().hex() * 64)[:64]


def job(job_id: str, image: str | None) -> JobSpec:
    container = ContainerSpec(image=f"{image}:1", digest=digest(image)) if image else None
    return JobSpec(
        id=job_id, name=job_id, runs_on=[LABEL], container=container, steps=[StepSpec(index=0, name="s", run="true")]
    )


class StandIn:
    """The job's work: asks for its attempt with the Update (nothing is pre-granted on the
    affinity path) and records the queue each job was taken from."""

    def __init__(self, client: Client, loop: asyncio.AbstractEventLoop) -> None:
        self.client = client
        self.loop = loop
        self.taken: dict[str, str] = {}
        self.lock = threading.Lock()

    def run_job(self, inp: JobActivityInput) -> JobResult:
        info = activity.info()
        started = datetime.now(UTC)
        grant = attempt_grant(self.client, self.loop, inp, "w")
        with self.lock:
            self.taken[inp.job.id] = info.task_queue
        return succeeded(inp, grant, started, f"w-{info.task_queue}")


@activity.defn(name=ACTIVITY_PROJECT_RUN)
async def project_ci_run(inp: CIRunSnapshot) -> bool:
    return True


def _queues(client: Client, prefix: str, held: list[str], slots: SharedSlots, stand_in: StandIn) -> ImageQueues:
    return ImageQueues(
        client,
        [(LABEL,)],
        prefix,
        "bubblewrap",
        lambda: list(held),
        4,
        stand_in.run_job,
        slots,
        ThreadPoolExecutor(max_workers=2),
        None,
    )


async def test_container_jobs_prefer_a_worker_holding_their_image_and_never_wait_for_one(
    temporal_env: WorkflowEnvironment,
) -> None:
    client = temporal_env.client
    prefix = f"affinity-{uuid.uuid4().hex[:6]}-"
    stand_in = StandIn(client, asyncio.get_running_loop())
    # A worker that held ``gone``'s image and stopped: the engine lists its poller a while yet.
    leaving = _queues(client, prefix, [digest("gone")], SharedSlots(1), stand_in)
    await leaving.sync()
    assert leaving.polled == [ci_image_queue([LABEL], digest("gone"), prefix)]
    await asyncio.sleep(1.0)
    await leaving.close()
    # The hot worker holds ``hot``'s image with a free slot; the full one holds ``full``'s with
    # its only slot taken (by a job of another queue).
    hot = _queues(client, prefix, [digest("hot")], SharedSlots(2), stand_in)
    busy_slots = SharedSlots(1)
    assert busy_slots.take()
    full = _queues(client, prefix, [digest("full")], busy_slots, stand_in)
    await hot.sync()
    await full.sync()
    jobs = [job("hot", "hot"), job("cold", "cold"), job("full", "full"), job("gone", "gone"), job("plain", None)]
    inp = run_input(prefix, jobs, image_affinity_seconds=AFFINITY_SECONDS)
    orchestration = Worker(
        client, task_queue=orchestration_queue(prefix), workflows=[CIRunWorkflow], activities=[project_ci_run]
    )

    @activity.defn(name=ACTIVITY_RUN_JOB)
    def label_job(inp: JobActivityInput) -> JobResult:
        return stand_in.run_job(inp)

    executor = ThreadPoolExecutor(max_workers=4)
    labels = Worker(client, task_queue=ci_queue([LABEL], prefix), activities=[label_job], activity_executor=executor)
    probe = Worker(client, task_queue=ci_probe_queue(prefix), activities=[CIProbeActivities(client).served_queues])
    try:
        async with orchestration, labels, probe:
            handle = await client.start_workflow(
                CIRunWorkflow.run, inp, id=run_workflow_id(inp.run_id), task_queue=orchestration_queue(prefix)
            )
            final = await asyncio.wait_for(handle.result(), 90)
            history = await handle.fetch_history()
    finally:
        await hot.close()
        await full.close()

    assert final.status == RunStatus.SUCCESS, final
    label_queue = ci_queue([LABEL], prefix)
    assert stand_in.taken == {
        "hot": ci_image_queue([LABEL], digest("hot"), prefix),
        "cold": label_queue,
        "full": label_queue,
        "gone": label_queue,
        "plain": label_queue,
    }, stand_in.taken
    # Each job ran once, as attempt 1: a refusal or an unclaimed try is no attempt.
    for j in final.jobs:
        assert [(a.attempt, a.status) for a in j.attempts] == [(1, AttemptStatus.SUCCESS)], j
    # What the run scheduled where: the cold and plain jobs never went to an image queue; the
    # full one was refused by the worker holding its image; the gone one waited on its queue.
    scheduled = {
        a.activity_id: a.task_queue.name
        for a in (e.activity_task_scheduled_event_attributes for e in history.events)
        if a.activity_id
    }
    assert scheduled["hot#0@image"] == ci_image_queue([LABEL], digest("hot"), prefix)
    assert "hot#0" not in scheduled
    assert "cold#0@image" not in scheduled and scheduled["cold#0"] == label_queue
    assert scheduled["full#0@image"] == ci_image_queue([LABEL], digest("full"), prefix)
    assert scheduled["full#0"] == label_queue
    assert scheduled["gone#0@image"] == ci_image_queue([LABEL], digest("gone"), prefix)
    assert scheduled["gone#0"] == label_queue
    assert "plain#0@image" not in scheduled
    failures = [
        e.activity_task_failed_event_attributes.failure.application_failure_info.type
        for e in history.events
        if e.HasField("activity_task_failed_event_attributes")
    ]
    assert failures == ["CIImageWorkerFull"], failures
    timeouts = [
        e.activity_task_timed_out_event_attributes.failure.timeout_failure_info.timeout_type
        for e in history.events
        if e.HasField("activity_task_timed_out_event_attributes")
    ]
    assert len(timeouts) == 1, timeouts
    # The full worker's slot is still the one job's: the refusal gave nothing back it did not take.
    assert busy_slots.used == 1 and busy_slots.out == 1
