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
of the methods take that key.

Per-step times come from consecutive heartbeats of running jobs; per-job overhead (decode,
encode, upload, hand-over, clean-up until the job closes) from completed jobs. Both feed
``JobCosts``. Every job seen for the first time feeds its fairness key's arrival rate
(``ArrivalLog``), and jobs this process accepted since the last snapshot join the plan at
once, so each job of a burst is placed behind the burst's earlier submits.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import sessionmaker
from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from activities.video.projection import close_lost_job
from api.schemas.video import CapacityFigures, VideoQueue
from api.video.capacity_gauges import export_figures
from api.video.capacity_observation import (
    Observed,
    Walk,
    has_other_activity,
    queue_stats,
    walk_generating,
    walk_undescribed,
)
from api.video.memo import WORKFLOW_TYPE, JobMemo
from api.video.open_jobs import JobFacts, OpenJob, open_jobs
from api.video.views import Estimate, JobView, pending_generation
from leasehold.gpu_classes import GpuClass
from leasehold.records.video.capacity import completed_since, publish, published, try_lead
from leasehold.settings import Settings
from video_policy.eta import (
    PRIOR_SECONDS_PER_STEP_FRAME_MEGAPIXEL,
    ArrivalLog,
    ArrivalStream,
    JobCosts,
    ModelSnapshot,
    QueuedJob,
    default_shape,
    shape_of,
    snapshot_from_json,
    snapshot_to_json,
)
from video_policy.pools import Pool, pool_key
from video_policy.queue_plan import PLACE_EXACT_BELOW, FairnessShadow, QueuePlan, place, plan
from workflows.queues import orchestration_queue, video_queue
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
# A submit this process accepted counts (against its user's cap, and as a waiting user of its
# tier) until a refresh has seen the job, or has not seen it though it was accepted this long
# before the refresh began. The refresh reads the read model, which holds a job from the moment
# its submit returned, so only clocks between replicas (a follower plans from the leader's
# snapshot) need a margin; a job it did not see then has ended (a short job between two
# refreshes), and counting it longer put a finished job ahead of new ones.
SNAPSHOT_CLOCK_MARGIN_SECONDS = 0.5
RECENT_SUBMIT_TTL_SECONDS = 15.0
# Slack past the heartbeat timeout before a running job counts as stalled (its worker gone).
HEARTBEAT_GRACE_SECONDS = 2.0
# The first admission decision of a fresh process waits this long for a first measurement.
FIRST_REFRESH_WAIT_SECONDS = 5.0


@dataclass
class _Recent:
    model: str
    at: float
    # What the job is: until a refresh sees it, plans place it from this.
    job: QueuedJob


def queued_job(spec: VideoModelSpec, job_id: str, tenant_id: str, user_id: str, tier: str, memo: JobMemo) -> QueuedJob:
    """A job as the plans see it: its owner, arrival, fairness and cost shape (from its memo)."""
    return QueuedJob(
        job_id=job_id,
        tenant_id=tenant_id,
        user_id=user_id,
        tier=tier,
        created_at=memo.created_at,
        shape=shape_of(spec, memo),
        fairness_key=memo.fairness_key or tier,
        fairness_weight=memo.fairness_weight or 1.0,
    )


class CapacityTracker:
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
        self._recent: dict[str, _Recent] = {}
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
        tq_task = asyncio.create_task(self._describe_queue(model))
        count_task = asyncio.create_task(self._completions(model, now))
        rows = await self._pool_rows(model)
        open_ids = {row.job.job_id for row in rows}
        described = await self._describe_generating(model, rows)
        lost = await self._close_lost(described)
        if lost:
            rows = [row for row in rows if row.job.job_id not in lost]
            open_ids -= lost
        queue_desc = await tq_task
        completions = await count_task

        costs = self.costs[model]
        walk = await self._walk(model, rows, described, now)
        self._note_ended(model, walk.seen)
        stats = queue_stats(queue_desc, now, self._last_busy)
        busy = {r.worker for r in walk.running if r.alive and r.worker}
        serving = busy | set(stats.pollers)
        snapshot = ModelSnapshot(
            model=model,
            taken_at=now,
            queued=walk.queued,
            running=walk.running,
            workers_serving=len(serving),
            workers_polling=len(set(stats.pollers) - busy),
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

    async def _describe_queue(self, model: str) -> Any:
        request = DescribeTaskQueueRequest(
            namespace=self.client.namespace,
            task_queue=TaskQueue(
                name=video_queue(self.pools[model].spec.name, self.settings.queue_prefix, self.pools[model].class_name),
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

    # Per-user counts and submissions -----------------------------------------------------

    def pool_of(self, job: JobView) -> Pool | None:
        """The pool whose queue generates ``job`` (``None``: one this API does not measure)."""
        gpu_class = job.state.gpu_class if job.state is not None else None
        return self.pools.get(pool_key(job.memo.model, gpu_class))

    def workers_serving(self, model: str, gpu_class: str | None) -> int:
        """Live workers of ``model`` on ``gpu_class`` at the last refresh (0 for an unknown pool)."""
        snapshot = self.snapshots.get(pool_key(model, gpu_class))
        return snapshot.workers_serving if snapshot is not None else 0

    def record_submit(self, view: JobView) -> None:
        """A job this process just accepted: count it and plan with it until a refresh sees it."""
        pool = self.pool_of(view)
        if pool is None:
            return
        owner = view.owner
        job = queued_job(pool.spec, view.job_id, owner.tenant_id, owner.user_id, owner.tier, view.memo)
        self._recent[view.job_id] = _Recent(pool.key, time.time(), job)

    def _unseen(self, model: str) -> list[QueuedJob]:
        """Jobs this process accepted that the snapshot does not hold yet (a burst's earlier submits).

        Left out, every job of a burst would be told the queue it found at the last refresh.
        """
        snapshot = self.snapshots[model]
        known = {j.job_id for j in snapshot.queued} | {j.job_id for j in snapshot.running}
        now = time.time()
        return [
            recent.job
            for recent in self._recent.values()
            if recent.model == model and recent.job.job_id not in known and now - recent.at <= RECENT_SUBMIT_TTL_SECONDS
        ]

    def _prune_recent(self, model: str, taken_at: float, open_ids: set[str]) -> None:
        """Forget submits the refresh taken at ``taken_at`` accounts for (seen, or seen to be gone)."""
        for job_id, recent in list(self._recent.items()):
            if recent.model != model:
                continue
            if job_id in open_ids or taken_at - recent.at > SNAPSHOT_CLOCK_MARGIN_SECONDS:
                del self._recent[job_id]

    def _known(self) -> tuple[set[str], set[str]]:
        queued = {j.job_id for s in self.snapshots.values() for j in s.queued}
        running = {j.job_id for s in self.snapshots.values() for j in s.running}
        return queued, running

    def active_users(self, model: str, tier: str) -> set[tuple[str, str]]:
        """Users with jobs waiting for ``model`` in ``tier`` (their fairness keys share the tier's weight)."""
        snapshot = self.snapshots.get(model)
        users = {(j.tenant_id, j.user_id) for j in snapshot.queued if j.tier == tier} if snapshot else set()
        now = time.time()
        _queued, running = self._known()
        for recent in self._recent.values():
            if (
                recent.model == model
                and recent.job.tier == tier
                and now - recent.at <= RECENT_SUBMIT_TTL_SECONDS
                and recent.job.job_id not in running
            ):
                users.add((recent.job.tenant_id, recent.job.user_id))
        return users

    # Estimates ---------------------------------------------------------------------------

    def plan(self, model: str) -> QueuePlan | None:
        """The queue plan of the current snapshot: simulated once per snapshot, not per submit."""
        snapshot = self.snapshots[model]
        cached = self._plans.get(model)
        if cached is not None and cached[0] == snapshot.taken_at:
            return cached[1]
        computed = plan(snapshot, self.costs[model], arrivals=self._streams(model), shadow=self.shadows[model])
        self._plans[model] = (snapshot.taken_at, computed)
        return computed

    def placement(self, model: str, job: QueuedJob) -> tuple[int, float] | None:
        """Position and expected start of ``job`` (``None`` with no worker serving): from the
        snapshot's plan, updated for the submits it has not seen yet (``video_policy.queue_plan.place``)."""
        planned = self.plan(model)
        if planned is None:
            return None
        unseen = [j for j in self._unseen(model) if j.job_id != job.job_id]
        extra = unseen if job.job_id in planned.starts else [*unseen, job]
        if len(planned.starts) + len(extra) < PLACE_EXACT_BELOW:
            # A small queue re-plans in about a millisecond: exact beats placed there.
            key = (self.snapshots[model].taken_at, frozenset(j.job_id for j in extra))
            cached = self._exact.get(model)
            if cached is None or cached[0] != key:
                exact = plan(
                    self.snapshots[model],
                    self.costs[model],
                    extra=extra,
                    arrivals=self._streams(model),
                    shadow=self.shadows[model],
                )
                cached = (key, exact)
                self._exact[model] = cached
            if cached[1] is not None and job.job_id in cached[1].starts:
                return cached[1].starts[job.job_id]
        if job.job_id in planned.starts:
            return planned.starts[job.job_id]
        order = (job.created_at, job.job_id)
        earlier = sorted(
            (j for j in unseen if (j.created_at, j.job_id) < order), key=lambda j: (j.created_at, j.job_id)
        )
        return place(planned, job, earlier, self.costs[model])

    def _streams(self, model: str, taken_at: float | None = None) -> list[ArrivalStream]:
        caps = {"paid": self.settings.video_paid_max_queued, "free": self.settings.video_free_max_queued}
        # Rates as of the snapshot the plan starts from: the plan's clock starts there too.
        at = self.snapshots[model].taken_at if taken_at is None else taken_at
        return self.arrivals[model].streams(self.costs[model], caps, at)

    def expected_wait(self, model: str, tier: str, weight: float) -> float | None:
        """Queue wait of a new job of ``tier`` from a new user; ``None`` with no worker serving."""
        spec = self.pools[model].spec
        probe = QueuedJob(
            job_id="~probe",
            tenant_id="~probe",
            user_id="~probe",
            tier=tier,
            created_at=time.time(),
            shape=default_shape(spec),
            fairness_key=f"{tier}/~probe",
            fairness_weight=weight,
        )
        placed = self.placement(model, probe)
        return placed[1] if placed is not None else None

    def estimate(self, job: JobView) -> Estimate | None:
        """The ETA of ``job`` and, while it waits, where it stands and why; ``None`` once it
        ended (or for a model the catalogue no longer lists)."""
        spec = get_model(job.memo.model)
        if job.terminal or spec is None:
            return None
        gpu_class = job.state.gpu_class if job.state is not None else None
        pool = self.pools.get(pool_key(spec.name, gpu_class))
        if job.status is VideoStatus.IN_PROGRESS:
            return self._estimate_running(spec, pool, job)
        return self._estimate_queued(spec, pool, job)

    def _estimate_running(self, spec: VideoModelSpec, pool: Pool | None, job: JobView) -> Estimate:
        """A generating job: its measured remaining run time."""
        costs = (self.costs.get(pool.key) if pool is not None else None) or JobCosts(spec)
        shape = shape_of(spec, job.memo)
        step = int(shape.steps * job.progress / 100)
        remaining = costs.remaining_seconds(shape, step)
        return Estimate(
            eta_seconds=round(remaining, 1),
            estimated_start_at=job.attempt_started_at,
            estimated_completion_at=time.time() + remaining,
        )

    def _estimate_queued(self, spec: VideoModelSpec, pool: Pool | None, job: JobView) -> Estimate:
        """A waiting job: its expected queue wait plus its run time."""
        owner = job.owner
        queued = queued_job(spec, job.job_id, owner.tenant_id, owner.user_id, owner.tier, job.memo)
        now = time.time()
        if pool is None:
            run = JobCosts(spec).run_seconds(queued.shape)
            return Estimate(eta_seconds=round(run, 1), reason="queue wait not measured")
        key, label = pool.key, pool.label
        planned = self.plan(key)
        # Submitted after the last snapshot: placed as the server will, behind what waits now.
        placed = self.placement(key, queued)
        snapshot = self.snapshots[key]
        rate = round(snapshot.completions_per_minute, 2)
        if planned is None or placed is None:
            reason = f"no worker is serving {label} right now; the job waits until one starts"
            return Estimate(
                eta_seconds=None,
                reason=reason,
                queue=VideoQueue(
                    position=len(snapshot.queued) + 1,
                    ahead=len(snapshot.queued),
                    workers_serving=0,
                    completion_rate_per_min=rate,
                    reason=reason,
                ),
            )
        position, wait = placed
        run = self.costs[key].run_seconds(queued.shape)
        ahead = position - 1
        busy = sum(1 for r in snapshot.running if r.alive)
        if ahead == 0 and busy < planned.workers:
            reason = "next in line; a worker is free and will pick it up in a moment"
        elif ahead == 0:
            reason = f"next in line; all {planned.workers} worker(s) serving {label} are busy"
        else:
            ratio = f"{self.settings.video_paid_weight:g}:{self.settings.video_free_weight:g}"
            reason = (
                f"{ahead} job(s) ahead for {label}, shared by {planned.workers} worker(s); "
                f"paid and free jobs take turns at {ratio} while both wait"
            )
        return Estimate(
            eta_seconds=round(wait + run, 1),
            estimated_start_at=now + wait,
            estimated_completion_at=now + wait + run,
            queue=VideoQueue(
                position=position,
                ahead=ahead,
                workers_serving=planned.workers,
                completion_rate_per_min=rate,
                reason=reason,
            ),
        )

    def tier_weight(self, tier: str) -> float:
        return self.settings.video_paid_weight if tier == "paid" else self.settings.video_free_weight

    def figures(self, model: str) -> CapacityFigures:
        pool = self.pools[model]
        snapshot = self.snapshots[model]
        costs = self.costs[model]
        target = self.settings.video_target_wait_seconds
        mean = costs.mean_job_seconds or costs.run_seconds(default_shape(costs.spec))
        # Little's law: arrivals x time in service keep that many workers busy; the work already
        # waiting or running must also be done within the target wait.
        work = sum(costs.run_seconds(j.shape) for j in snapshot.queued) + sum(
            costs.remaining_seconds(r.shape, r.step) for r in snapshot.running
        )
        needed = snapshot.add_rate_per_second * mean + work / target
        waits = {
            tier: self.expected_wait(model, tier, self.tier_weight(tier) / (len(self.active_users(model, tier)) + 1))
            for tier in ("paid", "free")
        }
        return CapacityFigures(
            model=pool.spec.name,
            gpu_class=pool.class_name,
            gpu_memory_gib=pool.gpu_class.memory_gib if pool.gpu_class is not None else None,
            measured=snapshot.measured,
            backlog=snapshot.backlog,
            queued=len(snapshot.queued),
            running=len(snapshot.running),
            oldest_queued_age_seconds=round(snapshot.oldest_queued_age_seconds, 1),
            add_rate_per_minute=round(snapshot.add_rate_per_second * 60, 2),
            dispatch_rate_per_minute=round(snapshot.dispatch_rate_per_second * 60, 2),
            completion_rate_per_minute=round(snapshot.completions_per_minute, 2),
            workers_serving=snapshot.workers_serving,
            workers_polling=snapshot.workers_polling,
            mean_job_seconds=round(costs.mean_job_seconds, 2) if costs.mean_job_seconds is not None else None,
            target_wait_seconds=target,
            workers_needed=math.ceil(needed - 1e-9),
            expected_wait_seconds={t: (round(w, 1) if w is not None else None) for t, w in waits.items()},
        )
