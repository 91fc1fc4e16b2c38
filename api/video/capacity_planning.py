"""The capacity plans of each video pool: per-user counts, the queue plan and placements, the
ETA of each job, and the figures ``/v1/capacity`` shows. ``CapacityTracker`` measures what these
read (``api.video.capacity``)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from api.schemas.video import CapacityFigures, VideoQueue
from api.video.memo import JobMemo
from api.video.views import Estimate, JobView
from leasehold.settings import Settings
from video_policy.eta import ArrivalLog, ArrivalStream, JobCosts, ModelSnapshot, QueuedJob, default_shape, shape_of
from video_policy.pools import Pool, pool_key
from video_policy.queue_plan import PLACE_EXACT_BELOW, FairnessShadow, QueuePlan, place, plan
from workflows.video.models import VideoModelSpec, get_model
from workflows.video.types import VideoStatus

# A submit this process accepted counts (against its user's cap, and as a waiting user of its
# tier) until a refresh has seen the job, or has not seen it though it was accepted this long
# before the refresh began. The refresh reads the read model, which holds a job from the moment
# its submit returned, so only clocks between replicas (a follower plans from the leader's
# snapshot) need a margin; a job it did not see then has ended (a short job between two
# refreshes), and counting it longer put a finished job ahead of new ones.
SNAPSHOT_CLOCK_MARGIN_SECONDS = 0.5
RECENT_SUBMIT_TTL_SECONDS = 15.0


@dataclass
class Recent:
    """A job this process accepted that no refresh has seen yet."""

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


class CapacityPlanning:
    """The planning half of ``CapacityTracker``: everything here reads the measured state the
    tracker's refreshes keep in the attributes below."""

    settings: Settings
    pools: dict[str, Pool]
    costs: dict[str, JobCosts]
    snapshots: dict[str, ModelSnapshot]
    arrivals: dict[str, ArrivalLog]
    shadows: dict[str, FairnessShadow]
    _recent: dict[str, Recent]
    _plans: dict[str, tuple[float, QueuePlan | None]]
    _exact: dict[str, tuple[tuple[float, frozenset[str]], QueuePlan | None]]

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
        self._recent[view.job_id] = Recent(pool.key, time.time(), job)

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

    def _waiting_ahead(self, model: str, job: QueuedJob) -> int:
        """How many jobs wait ahead of ``job`` while no worker serves ``model`` (so no plan orders
        them): those of the snapshot before it in arrival order, and the submits it has not seen
        yet that arrived earlier. The job itself is never counted, whether the snapshot holds it
        or not, so its place moves only when a job ahead of it goes."""
        order = (job.created_at, job.job_id)
        waiting = [*self.snapshots[model].queued, *self._unseen(model)]
        return sum(1 for j in waiting if j.job_id != job.job_id and (j.created_at, j.job_id) < order)

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
            ahead = self._waiting_ahead(key, queued)
            return Estimate(
                eta_seconds=None,
                reason=reason,
                queue=VideoQueue(
                    position=ahead + 1,
                    ahead=ahead,
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
            workers_by_capacity=snapshot.workers_by_capacity or None,
            mean_job_seconds=round(costs.mean_job_seconds, 2) if costs.mean_job_seconds is not None else None,
            target_wait_seconds=target,
            workers_needed=math.ceil(needed - 1e-9),
            expected_wait_seconds={t: (round(w, 1) if w is not None else None) for t, w in waits.items()},
        )
