"""Capacity of each video model version, measured once per deployment, and the ETA of each
job (``CapacityTracker.estimate``) that follows from it.

Every API process has a tracker, created in the app's lifespan (``start_capacity``) and handed
to requests as a dependency (``api.deps.CapacityDep``); one of them measures. The replica
holding the deployment's lease (a row in ``video_capacity_snapshots``, renewed each refresh,
taken over once it lapses) refreshes every ``video_capacity_refresh_seconds`` and publishes
what it measured there; the others load each publication and plan from it. Per model version:

* ``DescribeTaskQueue(report_stats=True)`` on the model's activity queue: backlog count and
  age, add and dispatch rates, and the pollers with their last access time;
* the deployment's open jobs of that model from the read model (``api.video.open_jobs``: one
  indexed query, every job however many), and for each generating one its pending generation
  activity (DescribeWorkflowExecution): on which worker, its last heartbeat
  (``GenerateProgress``: step, total, send time). Waiting jobs are not described;
* completions over the last five minutes (visibility count).

Workers serving a model are the union of workers generating with live heartbeats and workers
that polled since their last job (a busy worker does not poll; a reclaimed one neither polls
nor heartbeats, so it drops out within seconds instead of the server's poller TTL).

With GPU classes (``leasehold.gpu_classes``) each model version has one generation queue per
class, ``video.<model>.<class>``, and everything above is measured and planned per queue: a
*pool* (``Pool``), keyed ``<model>.<class>``. Without classes the one pool of a model is keyed
by the model's name and measures ``video.<model>``, as before classes existed. The per-pool
dicts below (snapshots, costs, arrivals, fairness shadows, plans) and the ``model`` arguments
of the methods take that key. With capacity types (``video_capacity_types``) a pool has two
queues, ``@reserved`` and ``@preemptible``: both are described, their figures add up in the
pool's, and ``workers_by_capacity`` says how many of its workers are of each type. The plan
counts every worker of the pool for every job, in priority order, so a reclaim of preemptible
workers moves the ETAs of free jobs (the lowest priority) first.

Per-step times come from consecutive heartbeats of running jobs; per-job overhead (decode,
encode, upload, hand-over, clean-up until the job closes) from completed jobs. Both feed
``JobCosts``. Every job seen for the first time feeds its fairness key's arrival rate
(``ArrivalLog``), and jobs this process accepted since the last snapshot join the plan at
once, so each job of a burst is placed behind the burst's earlier submits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import sessionmaker
from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from activities.video.projection import close_lost_job
from api.video.capacity_gauges import export_figures
from api.video.capacity_observation import (
    Observed,
    Walk,
    has_other_activity,
    merged_stats,
    queue_stats,
    walk_generating,
    walk_undescribed,
    workers_by_capacity,
)
from api.video.capacity_planning import CapacityPlanning, Recent
from api.video.memo import WORKFLOW_TYPE
from api.video.open_jobs import JobFacts, OpenJob, open_jobs
from api.video.views import pending_generation
from leasehold.gpu_classes import GpuClass
from leasehold.records.video.capacity import completed_since, publish, published, try_lead
from leasehold.settings import Settings
from video_policy.eta import (
    PRIOR_SECONDS_PER_STEP_FRAME_MEGAPIXEL,
    ArrivalLog,
    JobCosts,
    ModelSnapshot,
    snapshot_from_json,
    snapshot_to_json,
)
from video_policy.pools import Pool
from video_policy.queue_plan import FairnessShadow, QueuePlan, plan
from workflows.queues import CAPACITY_TYPES, orchestration_queue, video_queue
from workflows.video.ids import workflow_id
from workflows.video.models import VideoModelSpec, get_model
from workflows.video.types import VideoJobState, VideoStatus

log = logging.getLogger(__name__)

RPC_TIMEOUT = timedelta(seconds=5)
# Generating jobs described concurrently per refresh, and at most this many per model (past
# it, a generating job is planned at the step last seen: a fleet that large has samples enough).
DESCRIBE_CONCURRENCY = 8
MAX_DESCRIBED_RUNNING = 256
# Waiting jobs described per refresh because the plan put them next (see ``_next_up``).
MAX_DESCRIBED_NEXT = 64
# Executions closed without their workflow's last snapshot, and the row's error code for each.
LOST_EXECUTION_CODES = {
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed_out",
}
# The refresh yields to the event loop this often while it walks the open jobs.
YIELD_EVERY_ROWS = 256
# Completion rate window.
COMPLETION_WINDOW_SECONDS = 300.0
# Slack past the heartbeat timeout before a running job counts as stalled (its worker gone).
HEARTBEAT_GRACE_SECONDS = 2.0
# The first admission decision of a fresh process waits this long for a first measurement.
FIRST_REFRESH_WAIT_SECONDS = 5.0


class CapacityTracker(CapacityPlanning):
    """Measured queues, workers and job costs of every model version this API serves."""

    def __init__(self, client: Client, settings: Settings, db: sessionmaker) -> None:
        self.client = client
        self.settings = settings
        self.db = db
        self.specs: dict[str, VideoModelSpec] = {
            name: spec for name in settings.models if (spec := get_model(name)) is not None
        }
        # One pool per model and GPU class (one per model without classes), smallest class first.
        classes: tuple[GpuClass | None, ...] = settings.gpu_classes or (None,)
        self.pools: dict[str, Pool] = {
            pool.key: pool for spec in self.specs.values() for pool in (Pool(spec, c) for c in classes)
        }
        # Until a job of a model is measured, its steps cost the catalogue's rough figure, or
        # the deployment's step pace where workers are configured slower than that.
        prior = max(PRIOR_SECONDS_PER_STEP_FRAME_MEGAPIXEL, settings.video_step_pace_seconds_per_frame_megapixel)
        self.costs = {key: JobCosts(pool.spec, prior) for key, pool in self.pools.items()}
        self.snapshots: dict[str, ModelSnapshot] = {key: ModelSnapshot(model=key, taken_at=0.0) for key in self.pools}
        self._observed: dict[str, dict[str, Observed]] = {key: {} for key in self.pools}
        self.arrivals = {key: ArrivalLog() for key in self.pools}
        self.shadows = {key: FairnessShadow() for key in self.pools}
        # Server time of each worker's last heartbeat: a poll older than that is from before
        # its last job and says nothing about whether it is still there.
        self._last_busy: dict[str, float] = {}
        self._recent: dict[str, Recent] = {}
        # What each pool's refreshes learnt of its open jobs' states (``open_jobs``).
        self._facts: dict[str, dict[str, JobFacts]] = {}
        self._plans: dict[str, tuple[float, QueuePlan | None]] = {}
        self._exact: dict[str, tuple[tuple[float, frozenset[str]], QueuePlan | None]] = {}
        self._refreshed = asyncio.Event()
        # Reads of ended jobs' results, running beside the refreshes (``_observe_end``).
        self._ending: set[asyncio.Task[Callable[[], None] | None]] = set()
        # Who this replica is to the lease, and when the publication it plans from was made.
        self.identity = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._published_at: datetime | None = None

    # Lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Lead or follow, forever (until cancelled): the replica holding the deployment's lease
        measures and publishes; the others load what it published."""
        deployment = orchestration_queue(self.settings.queue_prefix)
        leading = False
        try:
            while True:
                try:
                    lead = await asyncio.to_thread(
                        try_lead, self.db, deployment, self.identity, self.settings.video_capacity_lease_seconds
                    )
                    if lead and not leading:
                        # Take over where the last leader stopped (its costs, arrivals, passes).
                        log.info("capacity: %s leads the measurement of %s", self.identity, deployment)
                        await self.follow(deployment)
                    leading = lead
                    if lead:
                        await self.refresh()
                        await asyncio.to_thread(publish, self.db, deployment, self.identity, self.to_json())
                    else:
                        await self.follow(deployment)
                except Exception:
                    log.exception("capacity refresh failed")
                await asyncio.sleep(self.settings.video_capacity_refresh_seconds)
        finally:
            for task in self._ending:
                task.cancel()

    async def follow(self, deployment: str) -> bool:
        """Load the leader's latest publication if it is newer than what this replica has."""
        latest = await asyncio.to_thread(published, self.db, deployment)
        if latest is None:
            return False
        at, data = latest
        if self._published_at is not None and at <= self._published_at:
            return False
        for model, snapshot in self.load_json(data).items():
            await self._install(model, snapshot)
            if snapshot.measured:
                export_figures(model, self.figures(model))
        self._published_at = at
        self._refreshed.set()
        return True

    def to_json(self) -> dict[str, Any]:
        """Everything a plan needs of every model, as the leader publishes it."""
        return {
            model: {
                "snapshot": snapshot_to_json(self.snapshots[model]),
                "costs": self.costs[model].to_json(),
                "arrivals": self.arrivals[model].to_json(),
                "shadow": self.shadows[model].to_json(),
            }
            for model in self.pools
        }

    def load_json(self, data: dict[str, Any]) -> dict[str, ModelSnapshot]:
        """Take the costs, arrivals and fairness state of a publication of ``to_json``, and
        return its snapshots by model for ``_install`` (models this replica does not serve are
        skipped)."""
        snapshots: dict[str, ModelSnapshot] = {}
        for model, published_model in data.items():
            if model not in self.pools:
                continue
            snapshot = snapshot_from_json(published_model["snapshot"])
            self.costs[model].load_json(published_model["costs"])
            self.arrivals[model].load_json(published_model["arrivals"])
            self.shadows[model].load_json(published_model["shadow"])
            open_ids = {j.job_id for j in snapshot.queued} | {j.job_id for j in snapshot.running}
            self._prune_recent(model, snapshot.taken_at, open_ids)
            snapshots[model] = snapshot
        return snapshots

    async def ready(self) -> None:
        """Wait (briefly) for the first measurement of a freshly started process."""
        if not self._refreshed.is_set():
            try:
                await asyncio.wait_for(self._refreshed.wait(), FIRST_REFRESH_WAIT_SECONDS)
            except TimeoutError:
                log.warning("no capacity measurement yet; deciding on an empty snapshot")

    async def refresh(self) -> None:
        for model in self.pools:
            try:
                await self._refresh_model(model)
            except RPCError as exc:
                log.warning("capacity of %s not measured: %s", model, exc.status)
        self._refreshed.set()

    # Measurement -------------------------------------------------------------------------

    async def _refresh_model(self, model: str) -> None:
        self._learn_ended()
        now = time.time()
        tq_task = asyncio.create_task(self._describe_queues(model))
        count_task = asyncio.create_task(self._completions(model, now))
        rows = await self._pool_rows(model)
        open_ids = {row.job.job_id for row in rows}
        described = await self._describe_generating(model, rows)
        lost = await self._close_lost(described)
        if lost:
            rows = [row for row in rows if row.job.job_id not in lost]
            open_ids -= lost
        per_type = {t: queue_stats(desc, now, self._last_busy) for t, desc in await tq_task}
        completions = await count_task

        costs = self.costs[model]
        walk = await self._walk(model, rows, described, now)
        self._note_ended(model, walk.seen)
        stats = merged_stats(list(per_type.values()))
        busy = {r.worker for r in walk.running if r.alive and r.worker}
        serving = busy | set(stats.pollers)
        by_capacity = workers_by_capacity({t: v for t, v in per_type.items() if t is not None}, busy)
        snapshot = ModelSnapshot(
            model=model,
            taken_at=now,
            queued=walk.queued,
            running=walk.running,
            workers_serving=len(serving),
            workers_polling=len(set(stats.pollers) - busy),
            workers_by_capacity=by_capacity,
            backlog=stats.backlog,
            oldest_queued_age_seconds=stats.age,
            add_rate_per_second=stats.add_rate,
            dispatch_rate_per_second=stats.dispatch_rate,
            completions_per_minute=completions,
            mean_job_seconds=costs.mean_job_seconds,
            measured=True,
        )
        shadow = self.shadows[model]
        shadow.update(walk.arrived, walk.starts, open_ids, now)
        if log.isEnabledFor(logging.DEBUG):
            waiting = sorted((p, j) for j, p in shadow.passes.items())
            log.debug("fairness replay of %s: ack %.3f, waiting %s", model, shadow.ack, waiting)
        await self._install(model, snapshot)
        self._prune_recent(model, now, open_ids)
        export_figures(model, self.figures(model))

    async def _pool_rows(self, model: str) -> list[OpenJob]:
        """The model's open jobs on this pool's queue."""
        pool = self.pools[model]
        # Jobs of a deployment that had no classes when they were submitted (no class) wait on
        # ``video.<model>``, which no pool of a classed deployment measures.
        return [
            row
            for row in await asyncio.to_thread(open_jobs, self.db, pool.spec, self._facts.setdefault(model, {}))
            if row.gpu_class == pool.class_name
        ]

    async def _describe_generating(self, model: str, rows: list[OpenJob]) -> dict[str, Any]:
        """The executions of the generating jobs (and of those next up), by job id (``None``
        where the describe failed)."""
        # Only generating jobs are described (their progress, worker and heartbeat are in the
        # engine alone): as many as there are workers, not as many as wait.
        generating = [row for row in rows if row.generating][:MAX_DESCRIBED_RUNNING]
        # A job a worker just took still reads ``queued`` until the workflow's snapshot lands
        # (a second or so): the waiting jobs the last plan put first are described too, so the
        # worker counts as busy and the job as started as soon as the engine knows.
        generating += self._next_up([row for row in rows if not row.generating], model)
        gate = asyncio.Semaphore(DESCRIBE_CONCURRENCY)

        async def describe(row: OpenJob) -> tuple[str, Any]:
            async with gate:
                try:
                    handle = self.client.get_workflow_handle(workflow_id(row.job.job_id))
                    return row.job.job_id, await handle.describe(rpc_timeout=RPC_TIMEOUT)
                except RPCError:
                    return row.job.job_id, None

        return dict(await asyncio.gather(*(describe(row) for row in generating)))

    async def _walk(self, model: str, rows: list[OpenJob], described: dict[str, Any], now: float) -> Walk:
        """Sort the open jobs into waiting and running, timing steps on the way."""
        walk = Walk()
        observed = self._observed[model]
        # The server times an attempt out only after a full heartbeat timeout of silence, and
        # the SDK sends throttled heartbeats up to 0.8 of that apart (later on a busy host);
        # calling a job stalled any sooner would flap live workers in and out of the count.
        heartbeat_fresh = self.settings.video_heartbeat_timeout_seconds + max(
            HEARTBEAT_GRACE_SECONDS, self.settings.video_capacity_refresh_seconds
        )
        for index, row in enumerate(rows):
            if index and index % YIELD_EVERY_ROWS == 0:
                await asyncio.sleep(0)  # thousands of rows: let requests in between
            job = row.job
            self.arrivals[model].observe(
                job.job_id, job.created_at, job.fairness_key, job.fairness_weight, job.tier, job.shape, now
            )
            walk.arrived.append((job.job_id, job.created_at, job.fairness_key, job.fairness_weight))
            desc = described.get(job.job_id)
            if not row.generating and desc is None:
                walk.queued.append(job)
                continue
            if desc is None:
                walk_undescribed(walk, row, observed.get(job.job_id), now)
                continue
            pending = await pending_generation(self.client.data_converter, desc)
            if pending is None and (row.generating or has_other_activity(desc)):
                # Generation ended: the workflow is cleaning up, or writing the outcome to the
                # read model (its row reads ``in_progress`` until that write lands, and a retry
                # would still show the generation pending). Planned as waiting, a finished job
                # took a worker's next turn from the jobs really waiting.
                walk.starts.append((job.job_id, now))  # it ran (between two refreshes if never seen running)
                continue
            if pending is not None and pending.started:
                walk_generating(
                    walk,
                    self.costs[model],
                    self._last_busy,
                    row,
                    pending,
                    observed.get(job.job_id),
                    now,
                    heartbeat_fresh,
                )
                continue
            # Waiting for a worker: its first attempt (scheduled or about to be), or the next one
            # after an attempt failed.
            walk.queued.append(job)
        return walk

    def _note_ended(self, model: str, seen: dict[str, Observed]) -> None:
        """Learn from the jobs running at the last refresh and gone now (they have ended)."""
        observed = self._observed[model]
        ended = [(job_id, obs) for job_id, obs in observed.items() if job_id not in seen]
        # What each learns arrives once its job has closed, after its clean-up and outcome
        # writes: awaited here, that tail (seconds on a loaded host) delayed every snapshot.
        for job_id, obs in ended[:16]:
            task = asyncio.create_task(self._observe_end(model, job_id, obs), name=f"video-ended-{job_id}")
            self._ending.add(task)
        self._observed[model] = seen

    async def _install(self, model: str, snapshot: ModelSnapshot) -> None:
        """Make ``snapshot`` current with its queue plan computed beforehand, in a thread.

        The plan of thousands of waiting jobs takes tens of milliseconds; computed lazily, the
        first request after each refresh paid for it on the event loop, and every request in
        flight waited with it (the status reads' p99). The thread only reads: the costs and the
        fairness shadow change in this task alone, which awaits it.
        """
        streams = self._streams(model, snapshot.taken_at)
        computed = await asyncio.to_thread(
            plan, snapshot, self.costs[model], arrivals=streams, shadow=self.shadows[model]
        )
        self.snapshots[model] = snapshot
        self._plans[model] = (snapshot.taken_at, computed)

    async def _close_lost(self, described: dict[str, Any]) -> set[str]:
        """Close the rows of described jobs whose execution was terminated or timed out.

        Such a workflow never writes its last snapshot, so its row would stay open, counting
        against its owner's cap and taking a turn in every plan. Every generating job is
        described at each refresh and every waiting one once it is next in line, so each is
        found in time, at no extra engine call.
        """
        lost: set[str] = set()
        for job_id, desc in described.items():
            if desc is None or desc.status not in LOST_EXECUTION_CODES:
                continue
            code = LOST_EXECUTION_CODES[desc.status]
            closed = await asyncio.to_thread(
                close_lost_job, self.db, job_id, desc.history_length, desc.close_time, code
            )
            if closed:
                log.warning("video job %s: its execution was %s outside leasehold; row closed", job_id, code)
            lost.add(job_id)
        return lost

    def _next_up(self, waiting: list[OpenJob], model: str) -> list[OpenJob]:
        """The waiting jobs most likely handed to a worker since the last plan: those it put
        first, and jobs it had not seen (an idle worker takes a new job at once)."""
        planned = self._plans.get(model)
        starts = planned[1].starts if planned is not None and planned[1] is not None else {}
        count = min(MAX_DESCRIBED_NEXT, 2 * self.snapshots[model].workers_serving + 4)
        order = sorted(waiting, key=lambda row: (starts.get(row.job.job_id, (0, 0.0))[1], row.job.created_at))
        return order[:count]

    async def _describe_queues(self, model: str) -> list[tuple[str | None, Any]]:
        """The pool's queue, or its reserved and preemptible queues, each with its capacity type."""
        types: tuple[str | None, ...] = CAPACITY_TYPES if self.settings.video_capacity_types else (None,)
        described = await asyncio.gather(*(self._describe_queue(model, t) for t in types))
        return list(zip(types, described, strict=True))

    async def _describe_queue(self, model: str, capacity_type: str | None = None) -> Any:
        pool = self.pools[model]
        request = DescribeTaskQueueRequest(
            namespace=self.client.namespace,
            task_queue=TaskQueue(
                name=video_queue(pool.spec.name, self.settings.queue_prefix, pool.class_name, capacity_type),
                kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL,
            ),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            report_stats=True,
            report_pollers=True,
        )
        try:
            return await self.client.workflow_service.describe_task_queue(request, retry=True, timeout=RPC_TIMEOUT)
        except RPCError as exc:
            log.warning("describe of %s's queue failed: %s", model, exc.status)
            return None

    def _deployment_query(self, model: str) -> str:
        # The orchestration queue names the deployment: several share a namespace (and tests a server).
        return (
            f'WorkflowType = "{WORKFLOW_TYPE}" AND TaskQueue = "{orchestration_queue(self.settings.queue_prefix)}" '
            f'AND ModelVersion = "{self.pools[model].spec.name}"'
        )

    async def _completions(self, model: str, now: float) -> float:
        pool = self.pools[model]
        if pool.class_name is not None:
            # Visibility knows no class (no search attribute for it): the read model does.
            since_at = datetime.fromtimestamp(now - COMPLETION_WINDOW_SECONDS, UTC)
            done = await asyncio.to_thread(completed_since, self.db, pool.spec.name, pool.class_name, since_at)
            return done * 60.0 / COMPLETION_WINDOW_SECONDS
        since = datetime.fromtimestamp(now - COMPLETION_WINDOW_SECONDS, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        query = self._deployment_query(model) + f' AND ExecutionStatus = "Completed" AND CloseTime > "{since}"'
        try:
            counted = await self.client.count_workflows(query, rpc_timeout=RPC_TIMEOUT)
        except RPCError as exc:
            log.warning("completion count of %s failed: %s", model, exc.status)
            return self.snapshots[model].completions_per_minute
        return counted.count * 60.0 / COMPLETION_WINDOW_SECONDS

    def _learn_ended(self) -> None:
        """Apply what the ended jobs' background reads (``_observe_end``) have learnt so far.

        Applied here, in the refresh's own task, because the plans computed in a thread read
        the costs while no refresh runs (``_install``).
        """
        for task in [t for t in self._ending if t.done()]:
            self._ending.discard(task)
            if task.cancelled() or task.exception() is not None:
                continue
            learn = task.result()
            if learn is not None:
                learn()

    async def _observe_end(self, model: str, job_id: str, observed: Observed) -> Callable[[], None] | None:
        """A job we saw running has ended: what its result teaches of its costs (applied by
        ``_learn_ended``), or ``None``."""
        handle = self.client.get_workflow_handle(workflow_id(job_id), result_type=VideoJobState)
        try:
            state = await asyncio.wait_for(handle.result(rpc_timeout=RPC_TIMEOUT), RPC_TIMEOUT.total_seconds())
        except Exception:
            return None  # cancelled, failed, deleted or not closed after all: nothing to learn
        result = state.result
        if state.status is not VideoStatus.COMPLETED or result is None or state.completed_at is None:
            return None
        costs = self.costs[model]
        stepped = max(1, result.total_steps - result.resumed_from_step)
        per_step = result.gpu_seconds / stepped
        if result.attempt != observed.attempt:
            return lambda: costs.observe_step(observed.shape, per_step)
        # The caller's wait ends when the job closes, after the post-generation clean-up and
        # outcome writes, so that is part of a job's overhead; but its worker was free from the
        # end of generation (when the workflow recorded the result), so that tail is kept apart.
        generated_at = state.completed_at.timestamp()
        ended_at = generated_at
        try:
            closed = (await handle.describe(rpc_timeout=RPC_TIMEOUT)).close_time
        except RPCError:
            closed = None
        if closed is not None:
            ended_at = max(ended_at, closed.timestamp())

        def learn() -> None:
            costs.observe_step(observed.shape, per_step)
            costs.observe_job(ended_at - observed.started_at, result.gpu_seconds, ended_at - generated_at)

        return learn
