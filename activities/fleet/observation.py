"""``observe_fleet``: what the fleet controller decides from.

Demand comes from the capacity tracker's latest publication (``video_capacity_snapshots``):
the same jobs, costs and rates the ETA is planned from, so the controller and the ETA never
disagree about the queue. Workers come from each pool's task queue: its recent pollers are the
idle workers, and the running jobs' workers (their identities name the capacity type) the busy.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, timedelta
from typing import Any

from sqlalchemy.orm import sessionmaker
from temporalio import activity
from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError

from activities.fleet.definitions import FleetObservationDefinition
from leasehold.records.video.capacity import published
from leasehold.settings import Settings
from video_policy.eta import ArrivalLog, JobCosts, default_shape, snapshot_from_json
from workflows.fleet.types import FleetObservation, FleetPool, FleetSpec, GroupDemand, PoolWorkers
from workflows.queues import orchestration_queue, video_queue
from workflows.video.models import get_model

RPC_TIMEOUT = timedelta(seconds=5)
# A poller seen this recently is an idle worker (a worker long-polls about once a minute,
# and the server refreshes its access time on every poll).
POLLER_FRESH_SECONDS = 75.0


class FleetObserver(FleetObservationDefinition):
    """Reads the publication (database) and the queues (Temporal)."""

    def __init__(self, client: Client, db: sessionmaker, settings: Settings) -> None:
        self.client = client
        self.db = db
        self.settings = settings

    @activity.defn(name="observe_fleet")
    async def observe_fleet(self, input: FleetSpec) -> FleetObservation:
        now = time.time()
        latest = await asyncio.to_thread(published, self.db, orchestration_queue(self.settings.queue_prefix))
        data = latest[1] if latest is not None else {}
        demand = {p.group: self._demand(p, data.get(p.group), now, input.arrival_window_seconds) for p in input.pools}
        running_workers = {p.group: _busy_workers(data.get(p.group)) for p in input.pools}
        polled = await asyncio.gather(*(self._pollers(p, now) for p in input.pools))
        workers = {
            pool.key: PoolWorkers(
                key=pool.key,
                idle=[w for w in idle if w not in running_workers[pool.group]],
                busy=[w for w in running_workers[pool.group] if f"-{pool.capacity_type}-" in w],
            )
            for pool, idle in zip(input.pools, polled, strict=True)
        }
        return FleetObservation(taken_at=now, demand=demand, workers=workers)

    def _demand(
        self, pool: FleetPool, published_group: dict[str, Any] | None, now: float, window: float
    ) -> GroupDemand:
        spec = get_model(pool.model)
        if published_group is None or spec is None:
            return GroupDemand(group=pool.group)
        snapshot = snapshot_from_json(published_group["snapshot"])
        costs = JobCosts(spec)
        costs.load_json(published_group["costs"])
        queued: dict[str, int] = {}
        running: dict[str, int] = {}
        work: dict[str, float] = {}
        for job in snapshot.queued:
            queued[job.tier] = queued.get(job.tier, 0) + 1
            work[job.tier] = work.get(job.tier, 0.0) + costs.run_seconds(job.shape)
        for run in snapshot.running:
            running[run.tier] = running.get(run.tier, 0) + 1
            work[run.tier] = work.get(run.tier, 0.0) + costs.remaining_seconds(run.shape, run.step)
        arrivals = ArrivalLog()
        arrivals.load_json(published_group["arrivals"])
        rates = arrivals.by_tier(costs, now, window)
        return GroupDemand(
            group=pool.group,
            measured=snapshot.measured,
            queued=queued,
            running=running,
            work_seconds=work,
            arrivals_per_second={tier: rate for tier, (rate, _) in rates.items()},
            job_seconds={tier: seconds for tier, (_, seconds) in rates.items()},
            completions_per_minute=snapshot.completions_per_minute,
            mean_job_seconds=costs.mean_job_seconds or costs.run_seconds(default_shape(spec)),
        )

    async def _pollers(self, pool: FleetPool, now: float) -> list[str]:
        request = DescribeTaskQueueRequest(
            namespace=self.client.namespace,
            task_queue=TaskQueue(
                name=video_queue(pool.model, self.settings.queue_prefix, pool.gpu_class, pool.capacity_type),
                kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL,
            ),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            report_pollers=True,
        )
        try:
            desc = await self.client.workflow_service.describe_task_queue(request, retry=True, timeout=RPC_TIMEOUT)
        except RPCError:
            return []
        return [
            p.identity
            for p in desc.pollers
            if now - p.last_access_time.ToDatetime(UTC).timestamp() <= POLLER_FRESH_SECONDS
        ]


def _busy_workers(published_group: dict[str, Any] | None) -> list[str]:
    if published_group is None:
        return []
    return [r.worker for r in snapshot_from_json(published_group["snapshot"]).running if r.alive and r.worker]
