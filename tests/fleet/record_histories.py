"""Record FleetWorkflow histories for the replay test: ``python -m tests.fleet.record_histories [DIR]``.

One run of the controller, recorded by a worker that runs as this build's deployment version,
into ``histories/<BUILD_ID>/`` (``docs/versioning.md``): a burst seen on the first tick (the
pool grows), a provider that fails on the second (the decision records the error, the
controller goes on), the backlog gone on the third (the pool shrinks), then continue-as-new.
The provider and the observation are stand-ins: only the workflow's commands are recorded, and
those depend on what the activities answer, not on how. Existing files are never overwritten.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.fleet.definitions import APPLY_FLEET, OBSERVE_FLEET
from leasehold.settings import Settings
from leasehold.worker_versioning import deployment_config, promote
from testing.temporal import start_local_environment
from workflows.fleet.controller import FleetWorkflow, fleet_workflow_id
from workflows.fleet.types import (
    ApplyFleetInput,
    ApplyFleetResult,
    FleetInput,
    FleetObservation,
    FleetPool,
    FleetSpec,
    GroupDemand,
    PoolWorkers,
)
from workflows.queues import fleet_queue
from workflows.version import BUILD_ID

HISTORIES = Path(__file__).parent / "histories"
MODEL = "procedural-v1"
POOL = FleetPool(model=MODEL, capacity_type="preemptible", min_workers=0, max_workers=2)
SPEC = FleetSpec(pools=[POOL], tick_seconds=0.5, ticks_per_run=3, scale_down_after_ticks=1, target_wait_seconds=60)


class ScriptedFleet:
    """Answers a burst, then nothing; fails the second apply as a provider outage would."""

    def __init__(self) -> None:
        self.observed = 0
        self.applied = 0
        self.running = 0

    @activity.defn(name=OBSERVE_FLEET)
    async def observe_fleet(self, spec: FleetSpec) -> FleetObservation:
        self.observed += 1
        burst = self.observed == 1
        demand = GroupDemand(
            group=POOL.group,
            measured=True,
            queued={"free": 6 if burst else 0},
            work_seconds={"free": 600.0 if burst else 0.0},
            mean_job_seconds=100.0,
        )
        idle = [f"gpu-{i}" for i in range(self.running)]
        return FleetObservation(
            taken_at=time.time(), demand={POOL.group: demand}, workers={POOL.key: PoolWorkers(key=POOL.key, idle=idle)}
        )

    @activity.defn(name=APPLY_FLEET)
    async def apply_fleet(self, input: ApplyFleetInput) -> ApplyFleetResult:
        self.applied += 1
        if self.applied == 2:
            raise ApplicationError("the provider is unreachable", non_retryable=True)
        want = input.desired.get(POOL.key, 0)
        started = {POOL.key: want - self.running} if want > self.running else {}
        retired = {POOL.key: input.idle.get(POOL.key, [])[: self.running - want]} if want < self.running else {}
        self.running = want
        return ApplyFleetResult(started=started, retired=retired, running={POOL.key: want})


async def first_run_history(handle: WorkflowHandle, within: float = 60.0) -> str:
    """The history of the controller's first run, once it has continued as new."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        history = await handle.fetch_history()
        if history.events and history.events[-1].HasField("workflow_execution_continued_as_new_event_attributes"):
            return history.to_json()
        await asyncio.sleep(0.5)
    raise TimeoutError("the controller did not continue as new in time")


async def record(client: Client, settings: Settings, out: Path) -> None:
    fleet = ScriptedFleet()
    config = deployment_config(settings, BUILD_ID, routed=True)
    worker = Worker(
        client,
        task_queue=fleet_queue(settings.queue_prefix),
        workflows=[FleetWorkflow],
        activities=[fleet.observe_fleet, fleet.apply_fleet],
        deployment_config=config,
    )
    async with worker:
        await promote(client, config.version, "record")
        handle = await client.start_workflow(
            FleetWorkflow.run,
            FleetInput(spec=SPEC),
            id=fleet_workflow_id(settings.queue_prefix),
            task_queue=fleet_queue(settings.queue_prefix),
        )
        # The first run's own handle: the workflow id's latest run is the next one.
        text = await first_run_history(client.get_workflow_handle(handle.id, run_id=handle.result_run_id))
        await handle.terminate("recorded")
    path = out / "burst_outage_shrink.json"
    if not path.exists():
        path.write_text(text)


async def main(out: Path) -> None:
    env = await start_local_environment()
    async with env:
        await record(env.client, Settings(queue_prefix="record."), out)


if __name__ == "__main__":
    # Another directory (first argument) for a trial run that leaves the recorded files alone.
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HISTORIES / BUILD_ID
    target.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(target))
