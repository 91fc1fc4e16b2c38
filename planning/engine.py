"""A discrete-event simulation of the video scheduler, on the policies the deployment runs.

What is simulated, and where its rule comes from (imported, not restated):

* **Admission**: every submit goes through ``video_policy.admission.admit`` (the free tier's
  wait threshold, the tier weight split among the tier's waiting users, the refusal (503) when
  no worker serves) and ``check_queued_cap`` (the per-user cap, 429), in that order as
  ``api.video.submit`` calls them, with ``Settings`` for every number. ``admit`` reads its
  capacity from ``SimulatedCapacity``, which answers the same questions the
  ``CapacityTracker`` answers (``video_policy.admission.CapacityView``), from the simulated state.
* **The ETA** a submit is told and the free tier's expected wait are ``video_policy.queue_plan.plan`` /
  ``place`` over a ``ModelSnapshot`` of the simulated queue, taken every refresh as the
  capacity leader does (``PLACE_EXACT_BELOW`` decides between an exact re-plan and a placement).
* **Dispatch order** is Temporal's fairness as ``video_policy.queue_plan`` models it: a task that finds a
  worker polling is matched at once; one that waits gets ``next_pass`` of its key and waiting
  tasks go out in pass order (ties by arrival).
* **Preemption and retry**: a warned worker checkpoints at the notice and fails its attempt at
  once (``worker_gpu.main``); a killed one is noticed after ``video_heartbeat_timeout_seconds``;
  either attempt is retried after ``VIDEO_GENERATE_RETRY``'s backoff, up to its maximum
  attempts, and resumes from the last checkpoint written every ``checkpoint_interval_seconds``.

What is the simulator's own: arrivals (Poisson per tier, users uniform, bursts), run times
(gamma around each shape's mean), GPU pools with preemption notices (Poisson per GPU-hour),
replacements and reclaim waves, prices, and the two things the engine does not do today,
on paper: gangs (N GPUs of a class at once, all or nothing, with EASY backfilling) and regions
(a queue per GPU class and region, jobs routed by expected wait plus the cost of moving their
data, or kept home by residency). Everything random draws from one seeded generator, so a run
is reproducible and two runs of a sweep see the same arrivals (common random numbers).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterable
from typing import ParamSpec, cast

from leasehold.records.api_keys import Principal
from leasehold.settings import Settings
from planning.results import Attempt, RunResult, TierFigures
from planning.scenario import Scenario, ScheduledPreemption
from planning.sim_capacity import SimulatedCapacity
from planning.sim_events import (
    ARRIVAL,
    FINISH,
    GONE,
    JOIN,
    PREEMPT,
    RECLAIM,
    REFRESH,
    RELEASE,
    RESTORE,
    RETRY,
    SCHEDULED,
)
from planning.sim_fleet import (
    gone,
    held,
    join,
    next_preemption,
    preempt_random,
    queue_name,
    reclaim,
    restore,
    scheduled_preemption,
    start_pools,
)
from planning.sim_snapshot import idle_snapshot, observe, probe_wait
from planning.sim_state import PLAN_STEPS, TIERS, Gpu, KnownCosts, SimJob, SimQueue
from video_policy.admission import Admission, TooManyQueued, admit, check_queued_cap, queued_limit
from video_policy.eta import JobShape as EtaShape
from video_policy.queue_plan import next_pass, plan

# Backfill looks this far down the backlog for jobs that fit before a waiting gang.
BACKFILL_LOOKAHEAD = 64


P = ParamSpec("P")


class Simulation:
    """One run of a scenario under a deployment's settings."""

    def __init__(
        self,
        scenario: Scenario,
        settings: Settings,
        checkpoint_interval: float | None = None,
        record_attempts: bool = False,
        trace: Iterable[tuple[float, str, str]] | None = None,
    ) -> None:
        self.sc = scenario
        # Submits to replay instead of drawing them: (seconds from the start, tier, user).
        self.trace = sorted(trace) if trace is not None else None
        self.settings = settings
        self.ckpt = checkpoint_interval or scenario.checkpoint_interval_seconds or settings.checkpoint_interval_seconds
        self.refresh = scenario.refresh_seconds or settings.video_capacity_refresh_seconds
        self.record_attempts = record_attempts
        self.rng = random.Random(scenario.seed)
        # Arrivals and run times draw from their own generator, so changing the fleet or the
        # checkpoint interval does not change the workload.
        self.load_rng = random.Random(scenario.seed * 7919 + 1)
        self.now = 0.0
        self.events: list[tuple[float, int, int, object, object]] = []
        self._seq = 0
        self.queues: dict[str, SimQueue] = {}
        for pool in scenario.pools:
            name = queue_name(pool.gpu_class, pool.region)
            if name not in self.queues:
                self.queues[name] = SimQueue(name, pool.gpu_class, pool.region)
        self.pool_gpus: list[list[Gpu]] = [[] for _ in scenario.pools]
        self.pool_target: list[int] = [p.gpus for p in scenario.pools]
        self.gpu_ids = 0
        self._job_ids = 0
        self.capacity = SimulatedCapacity(self)
        self.user_waiting: dict[str, int] = {}
        self.costs = KnownCosts([s.gpu_seconds for s in scenario.shapes])
        # The plan's shape of each scenario shape (``KnownCosts`` keys its means by ``frames``).
        self.eta_shapes = [EtaShape(steps=PLAN_STEPS, frames=i, width=1, height=1) for i in range(len(scenario.shapes))]
        share_total = sum(s.share for s in scenario.shapes)
        self.shape_cdf = list(_cumulative([s.share / share_total for s in scenario.shapes]))
        self.probe_shape = max(range(len(scenario.shapes)), key=lambda i: scenario.shapes[i].share)
        regions = scenario.regions
        self.region_cdf = list(_cumulative([r.data_share for r in regions])) if regions else []
        self.window_start = scenario.warmup_seconds
        self.window_end = scenario.horizon_seconds
        self.result = RunResult(
            scenario=scenario,
            checkpoint_interval=self.ckpt,
            window=self.window_end - self.window_start,
            tiers={t.tier: TierFigures() for t in scenario.tiers},
            held_gpu_seconds={i: 0.0 for i in range(len(scenario.pools))},
        )
        self._waiting_area = 0.0
        self._waiting_now = 0
        self._waiting_since = 0.0
        self._accepted_in_window = 0
        self._work_in_window = 0.0
        self.jobs: list[SimJob] = []

    # Event plumbing ------------------------------------------------------------------------

    def at(self, at: float, kind: int, a: object = None, b: object = None) -> None:
        """Schedule an event of ``kind`` (``planning.sim_events``) at ``at``."""
        self._seq += 1
        heapq.heappush(self.events, (at, kind, self._seq, a, b))

    def run(self) -> RunResult:
        """Run to the horizon, then drain; return the figures."""
        start_pools(self)
        if self.trace is not None:
            for at, tier, user in self.trace:
                self.at(at, ARRIVAL, -1, (tier, user))
        else:
            for index, load in enumerate(self.sc.tiers):
                if load.per_second > 0:
                    self.at(self.load_rng.expovariate(load.per_second), ARRIVAL, index, None)
        self.at(0.0, REFRESH)
        end = self.sc.horizon_seconds + self.sc.drain_seconds
        while self.events:
            at, kind, _seq, a, b = heapq.heappop(self.events)
            if at > end:
                break
            self.now = at
            if kind == ARRIVAL:
                if b is not None:
                    self._submit(*cast(tuple[str, str], b))
                else:
                    self._arrival(cast(int, a))
            elif kind == FINISH:
                self._finish(cast(SimJob, a), cast(int, b))
            elif kind == RELEASE:
                self._release(cast(list[Gpu], a))
            elif kind == RETRY:
                self._enqueue(cast(SimJob, a))
            elif kind == PREEMPT:
                preempt_random(self, cast(int, a), replace=True)
                next_preemption(self, cast(int, a))
            elif kind == SCHEDULED:
                scheduled_preemption(self, cast(int, a), cast(ScheduledPreemption, b))
            elif kind == RECLAIM:
                reclaim(self, cast(int, a))
            elif kind == RESTORE:
                restore(self, cast(int, a), cast(int, b))
            elif kind == JOIN:
                gpu = join(self, cast(int, a))
                self._dispatch(self.queues[gpu.queue])
            elif kind == GONE:
                gone(self, cast(Gpu, a))
            elif kind == REFRESH:
                self._refresh()
                if self.now < self.sc.horizon_seconds or self._open_jobs():
                    self.at(self.now + self.refresh, REFRESH)
        return self._finish_run(min(self.now, end))

    def _open_jobs(self) -> bool:
        return self.result.accepted_total > self.result.completed_total + self.result.failed_total

    # Jobs ----------------------------------------------------------------------------------

    def _arrival(self, tier_index: int) -> None:
        load = self.sc.tiers[tier_index]
        if self.now < self.sc.horizon_seconds:
            self.at(self.now + self.load_rng.expovariate(load.per_second), ARRIVAL, tier_index, None)
        else:
            return
        count = load.burst.jobs if self.load_rng.random() < load.burst.share else 1
        user = f"{load.tier}-{self.load_rng.randrange(load.users)}"
        for _ in range(count):
            self._submit(load.tier, user)

    def _draw_shape(self) -> int:
        x = self.load_rng.random()
        for i, edge in enumerate(self.shape_cdf):
            if x < edge:
                return i
        return len(self.shape_cdf) - 1

    def _draw_work(self, shape_index: int) -> float:
        shape = self.sc.shapes[shape_index]
        if shape.cv <= 0:
            return shape.gpu_seconds
        k = 1.0 / (shape.cv * shape.cv)
        return self.load_rng.gammavariate(k, shape.gpu_seconds / k)

    def _route(self, shape_index: int, tier: str) -> tuple[SimQueue, float, str]:
        """The queue a job goes to: its class, in the region with the least expected wait plus
        the time to move its data there (or its data's own region when it may not leave)."""
        gpu_class = self.sc.shape_class(self.sc.shapes[shape_index])
        if not self.sc.regions:
            only = self.sc.region_names[0]
            return self.queues[queue_name(gpu_class, only)], 0.0, only
        x = self.load_rng.random()
        home_index = next((i for i, edge in enumerate(self.region_cdf) if x < edge), len(self.region_cdf) - 1)
        home = self.sc.regions[home_index]
        if self.sc.routing == "home":
            return self.queues[queue_name(gpu_class, home.name)], 0.0, home.name
        candidates: list[tuple[float, SimQueue, float]] = []
        for region in self.sc.regions:
            queue = self.queues.get(queue_name(gpu_class, region.name))
            if queue is None:
                continue
            if region.name != home.name and home.remote_penalty_seconds is None:
                continue
            penalty = 0.0 if region.name == home.name else cast(float, home.remote_penalty_seconds)
            wait = queue.expected.get(tier)
            score = (wait if wait is not None else math.inf) + penalty
            candidates.append((score, queue, penalty))
        if not candidates:
            return self.queues[queue_name(gpu_class, home.name)], 0.0, home.name
        # Ties (nothing measured yet, or everywhere idle) stay home.
        best = min(candidates, key=lambda c: (c[0], c[2]))
        return best[1], best[2], home.name

    def _submit(self, tier: str, user: str) -> None:
        measured = self.window_start <= self.now < self.window_end
        figures = self.result.tier(tier)
        if measured:
            figures.submitted += 1
        shape_index = self._draw_shape()
        work = self._draw_work(shape_index)
        queue, penalty, home = self._route(shape_index, tier)
        principal = Principal(tenant_id="sim", user_id=user, tier=tier, key_id="sim")  # type: ignore[arg-type]
        admission = admit(self.capacity, self.settings, principal, queue.name)
        decision = (
            check_queued_cap(self.user_waiting.get(user, 0), queued_limit(self.settings, tier))
            if isinstance(admission, Admission)
            else admission
        )
        if not isinstance(admission, Admission) or decision is not None:
            if measured:
                if isinstance(decision, TooManyQueued):
                    figures.refused_429 += 1
                else:
                    figures.refused_503 += 1
            return
        self._job_ids += 1
        shape = self.sc.shapes[shape_index]
        job = SimJob(
            id=self._job_ids,
            tier=tier,
            user=user,
            key=admission.fairness_key,
            weight=admission.fairness_weight,
            shape=shape_index,
            gpus=shape.gpus,
            work=work,
            queue=queue.name,
            arrived=self.now,
            measured=measured,
            penalty=penalty,
            home=home,
            predicted_wait=queue.expected.get(tier),
        )
        self.jobs.append(job)
        self.result.accepted_total += 1
        if penalty > 0:
            self.result.remote_jobs += 1
        if measured:
            figures.accepted += 1
            self._accepted_in_window += 1
            self._work_in_window += work * job.gpus
        self.user_waiting[user] = self.user_waiting.get(user, 0) + 1
        users = queue.waiting_users[tier]
        users[("sim", user)] = users.get(("sim", user), 0) + 1
        queue.arrivals.observe(str(job.id), self.now, job.key, job.weight, tier, self._eta_shape(job), self.now)
        self._enqueue(job)

    def _eta_shape(self, job: SimJob) -> EtaShape:
        return self.eta_shapes[job.shape]

    def _waiting_changed(self, delta: int) -> None:
        self._waiting_area += self._waiting_now * self.overlap(self._waiting_since, self.now)
        self._waiting_since = self.now
        self._waiting_now += delta

    def _enqueue(self, job: SimJob) -> None:
        """A task of ``job`` reaches its queue (a new job, or the retry of one)."""
        queue = self.queues[job.queue]
        if queue.waiting == 0 and len(queue.idle) >= job.gpus:
            # A worker is polling: matched at once, no fairness pass.
            self._start(queue, job, direct=True)
            return
        pass_ = next_pass(queue.counters.get(job.key, 0.0), queue.ack, job.weight)
        queue.counters[job.key] = pass_
        job.pass_ = pass_
        job.in_backlog = True
        queue.waiting += 1
        queue.waiting_tier[job.tier] += 1
        self._waiting_changed(1)
        heapq.heappush(queue.backlog, (pass_, job.id, job))
        self._dispatch(queue)

    def _dispatch(self, queue: SimQueue) -> None:
        """Hand waiting tasks to polling workers, lowest pass first (gangs: all or nothing)."""
        while queue.idle and queue.waiting:
            pass_, _id, job = queue.backlog[0]
            if not job.in_backlog:
                heapq.heappop(queue.backlog)
                continue
            if job.gpus <= len(queue.idle):
                heapq.heappop(queue.backlog)
                queue.ack = max(queue.ack, pass_)
                self._take_from_backlog(queue, job)
                continue
            if self.sc.backfill:
                self._backfill(queue, job)
            break

    def _take_from_backlog(self, queue: SimQueue, job: SimJob) -> None:
        job.in_backlog = False
        queue.waiting -= 1
        queue.waiting_tier[job.tier] -= 1
        self._waiting_changed(-1)
        if self.window_start <= self.now < self.window_end:
            figures = self.result.tier(job.tier)
            figures.dispatched += 1
            if any(count for tier, count in queue.waiting_tier.items() if tier != job.tier):
                figures.contended += 1
        self._start(queue, job, direct=False)

    def _backfill(self, queue: SimQueue, gang: SimJob) -> None:
        """EASY backfilling: while ``gang`` waits for GPUs, start later jobs that fit on the
        idle ones and end before the gang could start anyway (so they never delay it)."""
        ends = sorted(j.attempt_end for j in queue.running for _ in range(j.gpus))
        need = gang.gpus - len(queue.idle)
        shadow = ends[need - 1] if 0 < need <= len(ends) else math.inf
        for _pass, _id, job in heapq.nsmallest(BACKFILL_LOOKAHEAD, queue.backlog):
            if not queue.idle:
                break
            if job is gang or not job.in_backlog or job.gpus > len(queue.idle):
                continue
            if self.now + self._attempt_seconds(job) <= shadow:
                self.result.backfilled += 1
                self._take_from_backlog(queue, job)

    def _attempt_seconds(self, job: SimJob) -> float:
        """Wall time of an attempt that runs to the end from the newest checkpoint."""
        left = max(0.0, job.work - job.done)
        writes = max(0, math.ceil(left / self.ckpt) - 1) if self.sc.checkpoint_write_seconds else 0
        resume = self.sc.resume_seconds if job.done > 0 else 0.0
        return job.penalty + resume + left + writes * self.sc.checkpoint_write_seconds

    def _start(self, queue: SimQueue, job: SimJob, direct: bool) -> None:
        job.workers = [queue.idle.popitem()[1] for _ in range(job.gpus)]
        for gpu in job.workers:
            gpu.job = job
        job.attempts += 1
        job.token += 1
        job.attempt_started = self.now
        job.attempt_resumes = job.done > 0
        job.attempt_end = self.now + self._attempt_seconds(job)
        queue.running.add(job)
        if job.started is None:
            job.started = self.now
            self.user_waiting[job.user] -= 1
            users = queue.waiting_users[job.tier]
            user_key = ("sim", job.user)
            users[user_key] -= 1
            if users[user_key] == 0:
                del users[user_key]
            if job.measured:
                figures = self.result.tier(job.tier)
                wait = self.now - job.arrived
                figures.waits.append(wait)
                if job.predicted_wait is not None:
                    figures.predicted.append(job.predicted_wait)
                    figures.eta_errors.append(job.predicted_wait - wait)
        self.at(job.attempt_end, FINISH, job, job.token)

    def progress(self, job: SimJob) -> tuple[float, float]:
        """(work done in this attempt, of which saved in a checkpoint) at ``now``."""
        elapsed = self.now - job.attempt_started - job.penalty
        if job.attempt_resumes:
            elapsed -= self.sc.resume_seconds
        if elapsed <= 0:
            return 0.0, 0.0
        left = job.work - job.done
        cycle = self.ckpt + self.sc.checkpoint_write_seconds
        cycles = int(elapsed // cycle)
        saved = min(left, cycles * self.ckpt)
        done = min(left, saved + min(elapsed - cycles * cycle, self.ckpt))
        return done, saved

    def account(self, job: SimJob, until: float, useful: float, lost: float) -> None:
        """Book an attempt's GPU time: useful steps, thrown-away steps, the rest overhead."""
        span = until - job.attempt_started
        if span <= 0:
            return
        share = self.overlap(job.attempt_started, until) / span
        gpus = job.gpus
        result = self.result
        result.busy_gpu_seconds += span * share * gpus
        result.useful_gpu_seconds += useful * share * gpus
        result.lost_gpu_seconds += lost * share * gpus
        result.overhead_gpu_seconds += max(0.0, span - useful - lost) * share * gpus

    def _finish(self, job: SimJob, token: int) -> None:
        if token != job.token or job.outcome != "open":
            return  # a stale attempt's end: it was preempted
        left = job.work - job.done
        self.account(job, self.now, left, 0.0)
        self.record_attempt(job, "completed", 0.0)
        job.done = job.work
        self.close(job, "completed")
        self._release(job.workers)

    def record_attempt(self, job: SimJob, outcome: str, lost: float) -> None:
        """Keep the attempt that ends now, when the run records attempts."""
        if self.record_attempts:
            self.result.attempts.append(
                Attempt(job.id, job.gpus, len(job.workers), job.attempt_started, self.now, outcome, lost, self.ckpt)
            )

    def close(self, job: SimJob, outcome: str) -> None:
        """``job`` ends now (``completed`` or ``failed``); count it."""
        job.outcome = outcome
        job.ended = self.now
        self.queues[job.queue].running.discard(job)
        if outcome == "completed":
            self.result.completed_total += 1
            if self.window_start <= self.now < self.window_end:
                self.result.completed_in_window += 1
        else:
            self.result.failed_total += 1
        if job.measured:
            figures = self.result.tier(job.tier)
            if outcome == "completed":
                figures.completed += 1
            else:
                figures.failed += 1

    def _release(self, gpus: Iterable[Gpu]) -> None:
        """Workers that ended an attempt poll again (or are gone)."""
        queues = set()
        for gpu in gpus:
            if gpu.leaving:
                continue
            gpu.job = None
            queue = self.queues[gpu.queue]
            queue.idle[gpu.id] = gpu
            queues.add(queue.name)
        for name in sorted(queues):
            self._dispatch(self.queues[name])

    # Refresh: what the capacity leader measures, and the plan behind ETAs and admission ----

    def _refresh(self) -> None:
        waiting = {t: 0 for t in TIERS}
        busy = 0
        alive = 0
        free_eta: float | None = None
        for queue in self.queues.values():
            self._snapshot(queue)
            for job in queue.backlog:
                if job[2].in_backlog:
                    waiting[job[2].tier] = waiting.get(job[2].tier, 0) + 1
            busy += sum(j.gpus for j in queue.running)
            alive += queue.alive
            eta = queue.expected.get("free")
            if eta is not None:
                free_eta = eta if free_eta is None else min(free_eta, eta)
        self.result.series.append((self.now, waiting["paid"], waiting["free"], busy, alive, free_eta))

    def _snapshot(self, queue: SimQueue) -> None:
        if queue.waiting == 0 and queue.idle:
            # A worker is polling and nothing waits: a new job is matched at once, which is
            # what the plan would say (its direct match), without simulating the fleet.
            queue.snapshot = idle_snapshot(queue, self.now)
            queue.expected = {tier: 0.0 for tier in TIERS}
            return
        snapshot, shadow = observe(queue, self.now, self.progress, self._eta_shape)
        queue.snapshot = snapshot
        caps = {"paid": self.settings.video_paid_max_queued, "free": self.settings.video_free_max_queued}
        streams = queue.arrivals.streams(self.costs, caps, self.now)
        planned = plan(snapshot, self.costs, arrivals=streams, shadow=shadow)
        probe_shape = self.eta_shapes[self.probe_shape]
        for tier in TIERS:
            users = len(queue.waiting_users[tier]) + 1
            weight = self.capacity.tier_weight(tier) / users
            queue.expected[tier] = probe_wait(
                planned, snapshot, shadow, streams, self.costs, probe_shape, self.now, tier, weight
            )

    # The end -------------------------------------------------------------------------------

    def overlap(self, start: float, end: float) -> float:
        """Seconds of ``start``..``end`` inside the measured window."""
        return max(0.0, min(end, self.window_end) - max(start, self.window_start))

    def _finish_run(self, end: float) -> RunResult:
        result = self.result
        for members in self.pool_gpus:
            for gpu in members:
                held(self, gpu, self.window_end)
        # GPUs on their way out whose GONE is still pending were counted by their event, or
        # (past the end) are counted here up to the window's end.
        for _at, kind, _seq, a, _b in self.events:
            if kind == GONE:
                held(self, cast(Gpu, a), self.window_end)
        for job in self.jobs:
            if job.outcome == "open":
                result.open_at_end += 1
                if job.measured:
                    figures = result.tier(job.tier)
                    figures.open += 1
                    if job.started is None:
                        # Still waiting: its wait so far is a lower bound, counted as such.
                        figures.waits.append(end - job.arrived)
        self._waiting_changed(0)
        result.mean_waiting = self._waiting_area / result.window
        result.mean_busy = result.busy_gpu_seconds / result.window
        result.accepted_per_second = self._accepted_in_window / result.window
        result.mean_work_per_job = self._work_in_window / max(1, self._accepted_in_window)
        result.cost_usd = sum(
            seconds / 3600.0 * self.sc.pools[i].usd_per_gpu_hour for i, seconds in result.held_gpu_seconds.items()
        )
        return result


def _cumulative(shares: list[float]) -> Iterable[float]:
    total = 0.0
    for share in shares:
        total += share
        yield total


def _run_of(simulation: Callable[P, Simulation]) -> Callable[P, RunResult]:
    def run(*args: P.args, **kwargs: P.kwargs) -> RunResult:
        return simulation(*args, **kwargs).run()

    return run


# Run ``scenario`` once under ``settings`` (``checkpoint_interval`` overrides both's); ``trace``
# replays recorded submits instead of the scenario's arrivals. Takes what ``Simulation`` takes.
simulate = _run_of(Simulation)
