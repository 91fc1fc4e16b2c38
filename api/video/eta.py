"""ETAs of video jobs: the model of one model version's queue and its workers.

Pure computation over a measured snapshot (``api/video/capacity.py`` takes the snapshots):

* Run time of a job = the model's measured per-job overhead + its steps x the measured time
  per step for its length and size (frames x pixels), scaled from other sizes until that size
  has been seen, and from the catalogue's rough cost until anything has been measured. Part of
  the overhead is the tail after generation (clean-up, the read-model write of the outcome,
  webhooks) until the job closes: the caller waits for it, but the worker is free for the next
  job, so the plan occupies a worker for a job's run time less that tail (``worker_seconds``).
* Dispatch order = what Temporal's fairness does with the waiting jobs' fairness keys and
  weights: stride scheduling. The server gives a task that has to wait the pass
  ``max(the queue's ack level, its key's last pass + 1 / weight)`` and hands waiting tasks
  out in pass order; the ack level is the pass of the last task handed out, so a key that
  fell behind (no task waiting for a while) is served next. A task that
  finds a worker polling is matched at once and takes no pass. ``FairnessShadow`` replays
  exactly that from what the refreshes see (arrivals, starts), so a free job that arrived
  late behind a paid backlog holds the pass the server gave it then, not the one it would
  get if everything waiting now had arrived together.
* Queue wait = a simulation of the next dispatches onto the workers that serve the model
  now, each free once its running job's remaining work is done, taking the jobs waiting now
  and the jobs each fairness key is expected to add meanwhile (its measured arrival rate).
  With equal jobs and no arrivals this is exactly "jobs ahead / completion rate"; with mixed
  lengths it weighs each job by its own run time; it follows the live worker count at once
  (a completion rate measured over a window would lag a reclaimed third of the fleet by that
  window); and a free job behind a paid backlog waits, as it will, for the paid work that
  keeps arriving with earlier passes (its tier's share of dispatches, not the queue's order
  at submit, sets its wait).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from workflows.video.models import VideoModelSpec, parse_size
from workflows.video.types import VideoRequest

# Until anything is measured: the stand-in model's cost per step x frame x megapixel on one
# core of the 2-core dev host (40 ms a step at 180x320 x 32 frames), or the deployment's
# configured step pace where that is slower, and a per-job overhead (encode, upload, dispatch).
PRIOR_SECONDS_PER_STEP_FRAME_MEGAPIXEL = 0.022
PRIOR_OVERHEAD_SECONDS = 1.0
# Weight of a new sample in the running averages (recent jobs count more: capacity changes).
EWMA_ALPHA = 0.3
# Temporal's fairness weights live in this range; weights outside it are clamped by the server.
MIN_FAIRNESS_WEIGHT = 0.001
# Arrival rates are measured over this window. They are projected over the whole queue wait
# (minutes in a backlog), and submits come in bursts: over one minute a rate is a sample of
# two or three bursts, which told free jobs behind a paid backlog twice their wait whenever
# those happened to be paid-heavy. Five minutes spans many bursts and still follows a change
# of load within a few minutes.
ARRIVAL_WINDOW_SECONDS = 300.0
MIN_ARRIVAL_SPAN_SECONDS = 15.0
# Bound on the simulated dispatches of one plan.
MAX_SIMULATED_DISPATCHES = 5000
# Expected arrivals simulated past the last job waiting now (plus two per worker).
PLACE_BEYOND_DISPATCHES = 16
# Fairness keys (users) whose last pass the replay remembers.
MAX_FAIRNESS_KEYS = 10_000
# A job whose generation started this soon after its submit found a worker polling: the server
# matched it without writing it to the backlog, so it took no fairness pass.
DIRECT_MATCH_SECONDS = 1.0


@dataclass(frozen=True)
class JobShape:
    """What a job's cost depends on."""

    steps: int
    frames: int
    width: int
    height: int

    @property
    def frame_megapixels(self) -> float:
        return self.frames * self.width * self.height / 1e6


@dataclass
class QueuedJob:
    """A job waiting for a worker (its generation activity is scheduled, not started)."""

    job_id: str
    tenant_id: str
    user_id: str
    tier: str
    created_at: float
    shape: JobShape
    fairness_key: str
    fairness_weight: float


@dataclass
class RunningJob:
    """A job whose generation activity has started on a worker."""

    job_id: str
    tenant_id: str
    user_id: str
    tier: str
    shape: JobShape
    step: int
    worker: str
    # False when its heartbeats stopped: the worker is probably gone and the job will be
    # handed to another one once the heartbeat timeout passes.
    alive: bool
    attempt: int = 1


@dataclass
class ModelSnapshot:
    """One model version's queue and workers at ``taken_at`` (epoch seconds)."""

    model: str
    taken_at: float
    queued: list[QueuedJob] = field(default_factory=list)
    running: list[RunningJob] = field(default_factory=list)
    # Workers serving the model now: polling recently, or generating with live heartbeats.
    workers_serving: int = 0
    # Of those, how many are polling (idle) right now.
    workers_polling: int = 0
    # Task-queue statistics (DescribeTaskQueue report_stats): approximate, from the server.
    backlog: int = 0
    oldest_queued_age_seconds: float = 0.0
    add_rate_per_second: float = 0.0
    dispatch_rate_per_second: float = 0.0
    completions_per_minute: float = 0.0
    mean_job_seconds: float | None = None
    # False until the first refresh succeeded.
    measured: bool = False


# The publication's job rows are positional lists (format 2): ``asdict`` of 500 queued jobs took
# 30 ms of the API's event loop at every refresh, which every request then waited behind.
SNAPSHOT_FORMAT = 2


def _shape_row(shape: JobShape) -> list[int]:
    return [shape.steps, shape.frames, shape.width, shape.height]


def snapshot_to_json(snapshot: ModelSnapshot) -> dict[str, Any]:
    """A snapshot as JSON (what the capacity leader publishes): jobs as positional rows."""
    fields = {name: value for name, value in vars(snapshot).items() if name not in ("queued", "running")}
    fields["format"] = SNAPSHOT_FORMAT
    fields["queued"] = [
        [j.job_id, j.tenant_id, j.user_id, j.tier, j.created_at, _shape_row(j.shape), j.fairness_key, j.fairness_weight]
        for j in snapshot.queued
    ]
    fields["running"] = [
        [r.job_id, r.tenant_id, r.user_id, r.tier, _shape_row(r.shape), r.step, r.worker, r.alive, r.attempt]
        for r in snapshot.running
    ]
    return fields


def snapshot_from_json(data: dict[str, Any]) -> ModelSnapshot:
    """The snapshot ``snapshot_to_json`` made (or a format-1 publication of an older leader,
    whose jobs are objects)."""
    fields = {k: v for k, v in data.items() if k != "format"}
    if data.get("format", 1) >= SNAPSHOT_FORMAT:
        fields["queued"] = [
            QueuedJob(job_id, tenant, user, tier, created, JobShape(*shape), key, weight)
            for job_id, tenant, user, tier, created, shape, key, weight in data["queued"]
        ]
        fields["running"] = [
            RunningJob(job_id, tenant, user, tier, JobShape(*shape), step, worker, alive, attempt)
            for job_id, tenant, user, tier, shape, step, worker, alive, attempt in data["running"]
        ]
    else:
        fields["queued"] = [QueuedJob(**{**j, "shape": JobShape(**j["shape"])}) for j in data["queued"]]
        fields["running"] = [RunningJob(**{**j, "shape": JobShape(**j["shape"])}) for j in data["running"]]
    return ModelSnapshot(**fields)


class JobCosts:
    """Measured run times of one model version: per-step time by shape, and per-job overhead."""

    def __init__(self, spec: VideoModelSpec, prior_per_unit: float = PRIOR_SECONDS_PER_STEP_FRAME_MEGAPIXEL) -> None:
        self.spec = spec
        # Seconds per step per frame-megapixel until anything is measured.
        self._prior_per_unit = prior_per_unit
        # Seconds per step keyed by frame-megapixels (one entry per length x size seen).
        self._step_seconds: dict[float, float] = {}
        # Seconds per step per frame-megapixel across all shapes: scales to unseen shapes.
        self._per_unit: float | None = None
        self._overhead: float | None = None
        # Part of the overhead after generation ended (the worker free, the job not closed).
        self._tail: float | None = None
        self._job_seconds: float | None = None
        self.samples = 0

    @staticmethod
    def _blend(old: float | None, new: float) -> float:
        return new if old is None else old + EWMA_ALPHA * (new - old)

    def observe_step(self, shape: JobShape, seconds_per_step: float) -> None:
        """A measured time per step of a job of ``shape``."""
        if seconds_per_step <= 0:
            return
        key = round(shape.frame_megapixels, 6)
        self._step_seconds[key] = self._blend(self._step_seconds.get(key), seconds_per_step)
        if shape.frame_megapixels > 0:
            self._per_unit = self._blend(self._per_unit, seconds_per_step / shape.frame_megapixels)
        self.samples += 1

    def observe_job(self, run_seconds: float, step_seconds_total: float, tail_seconds: float = 0.0) -> None:
        """A completed attempt: its wall time from start to the job's close, the part spent in
        steps, and the part after generation ended (its worker already free)."""
        if run_seconds <= 0:
            return
        overhead = max(0.0, run_seconds - step_seconds_total)
        self._overhead = self._blend(self._overhead, overhead)
        self._tail = self._blend(self._tail, min(overhead, max(0.0, tail_seconds)))
        self._job_seconds = self._blend(self._job_seconds, run_seconds)

    def to_json(self) -> dict[str, Any]:
        """What was measured, for the replicas that do not measure (``load_json``)."""
        return {
            "step_seconds": [[k, v] for k, v in self._step_seconds.items()],
            "per_unit": self._per_unit,
            "overhead": self._overhead,
            "tail": self._tail,
            "job_seconds": self._job_seconds,
            "samples": self.samples,
        }

    def load_json(self, data: dict[str, Any]) -> None:
        """Replace what was measured here by what ``to_json`` published."""
        self._step_seconds = {float(k): float(v) for k, v in data["step_seconds"]}
        self._per_unit = data["per_unit"]
        self._overhead = data["overhead"]
        self._tail = data.get("tail")  # absent from an older leader's publication
        self._job_seconds = data["job_seconds"]
        self.samples = int(data["samples"])

    @property
    def mean_job_seconds(self) -> float | None:
        return self._job_seconds

    @property
    def measured(self) -> bool:
        return self.samples > 0

    def seconds_per_step(self, shape: JobShape) -> float:
        key = round(shape.frame_megapixels, 6)
        if key in self._step_seconds:
            return self._step_seconds[key]
        if self._step_seconds:
            # Cost is not linear in pixels for small frames (fixed per-step costs dominate), so
            # scale from the nearest measured shape rather than from the global ratio alone.
            nearest = min(self._step_seconds, key=lambda k: abs(k - key))
            if nearest > 0:
                return self._step_seconds[nearest] * key / nearest
        if self._per_unit is not None:
            return self._per_unit * shape.frame_megapixels
        return self._prior_per_unit * shape.frame_megapixels

    def overhead_seconds(self) -> float:
        return PRIOR_OVERHEAD_SECONDS if self._overhead is None else self._overhead

    def run_seconds(self, shape: JobShape) -> float:
        """Expected wall time of a whole job of ``shape`` on one worker."""
        return self.overhead_seconds() + shape.steps * self.seconds_per_step(shape)

    def remaining_seconds(self, shape: JobShape, step: int) -> float:
        """Expected wall time left for a job of ``shape`` that has done ``step`` steps."""
        left = max(0, shape.steps - step)
        return self.overhead_seconds() + left * self.seconds_per_step(shape)

    def tail_seconds(self) -> float:
        """Measured time from the end of a job's generation to its close (worker already free)."""
        return 0.0 if self._tail is None else min(self._tail, self.overhead_seconds())

    def worker_seconds(self, shape: JobShape) -> float:
        """Expected time a job of ``shape`` keeps its worker: its run time less the tail."""
        return self.run_seconds(shape) - self.tail_seconds()

    def worker_remaining_seconds(self, shape: JobShape, step: int) -> float:
        """Expected time a job of ``shape`` that has done ``step`` steps keeps its worker."""
        return self.remaining_seconds(shape, step) - self.tail_seconds()


@dataclass(frozen=True)
class ArrivalStream:
    """Jobs one fairness key is expected to add: its measured rate and typical job."""

    fairness_key: str
    fairness_weight: float
    per_second: float
    # How long its typical job keeps a worker (``JobCosts.worker_seconds``).
    run_seconds: float
    # The key's user cannot have more than this many waiting: further submits are refused.
    cap: int


class ArrivalLog:
    """Accepted jobs per fairness key over a sliding window: the rate each key adds work at.

    A queued job is passed not only by the jobs ahead of it now but by jobs that arrive later
    with an earlier fairness pass: under fair share a free job waiting behind a paid backlog
    waits for the paid work that keeps arriving. The log is what lets the plan count them.
    """

    def __init__(self, window_seconds: float = ARRIVAL_WINDOW_SECONDS) -> None:
        self.window = window_seconds
        self._since: float | None = None
        # job id -> (arrival time, key, weight, tier, shape)
        self._arrivals: dict[str, tuple[float, str, float, str, JobShape]] = {}

    def observe(self, job_id: str, at: float, key: str, weight: float, tier: str, shape: JobShape, now: float) -> None:
        """A job seen waiting or running (seen again: ignored)."""
        if self._since is None:
            self._since = now
        if job_id not in self._arrivals and now - at <= self.window:
            self._arrivals[job_id] = (at, key, weight, tier, shape)

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self._since,
            "arrivals": [
                [job_id, at, key, weight, tier, _shape_row(shape)]
                for job_id, (at, key, weight, tier, shape) in self._arrivals.items()
            ],
        }

    def load_json(self, data: dict[str, Any]) -> None:
        self._since = data["since"]
        self._arrivals = {
            # A list since format 2, an object before.
            job_id: (at, key, weight, tier, JobShape(*shape) if isinstance(shape, list) else JobShape(**shape))
            for job_id, at, key, weight, tier, shape in data["arrivals"]
        }

    def streams(self, costs: JobCosts, caps: dict[str, int], now: float) -> list[ArrivalStream]:
        """Each key's expected arrivals from now on (``caps``: the per-user limit by tier)."""
        for job_id, arrival in list(self._arrivals.items()):
            if now - arrival[0] > self.window:
                del self._arrivals[job_id]
        if self._since is None:
            return []
        # A fresh process has watched for less than a window; a few seconds is too short to
        # tell a burst from a rate.
        span = max(MIN_ARRIVAL_SPAN_SECONDS, min(self.window, now - self._since))
        by_key: dict[str, list[tuple[float, str, float, str, JobShape]]] = {}
        for arrival in self._arrivals.values():
            by_key.setdefault(arrival[1], []).append(arrival)
        streams = []
        for key, arrivals in by_key.items():
            latest = max(arrivals, key=lambda a: a[0])
            run = sum(costs.worker_seconds(a[4]) for a in arrivals) / len(arrivals)
            streams.append(
                ArrivalStream(
                    fairness_key=key,
                    fairness_weight=latest[2],
                    per_second=len(arrivals) / span,
                    run_seconds=run,
                    cap=caps.get(latest[3], 0),
                )
            )
        return streams


class FairnessShadow:
    """The fairness state of one model's task queue, replayed from what the refreshes saw.

    Temporal keeps, per fairness key, the pass of its last task, and per queue an ack level
    (the pass of the last task handed out). A task that has to wait gets
    ``max(ack level, key's last pass + 1 / weight)`` (the server's map counter); waiting tasks
    go out in pass order, ties in arrival order. The
    server does not report passes, so this replays the rule over the events the API sees: a
    job's arrival (its submit time, from its memo) and its start (its generation activity's
    start time). Events are applied in time order within each refresh; an event seen a refresh
    late (visibility lag) is applied then, which errs by at most one refresh's events. A process
    that starts with a backlog replays it from the oldest waiting job with the ack level at 0:
    relative passes are all a plan needs.
    """

    def __init__(self) -> None:
        self.ack = 0.0
        self.counters: dict[str, float] = {}
        # Waiting jobs' passes (jobs matched directly have none).
        self.passes: dict[str, float] = {}
        self._arrived: set[str] = set()
        self._started: set[str] = set()

    def to_json(self) -> dict[str, Any]:
        return {
            "ack": self.ack,
            "counters": self.counters,
            "passes": self.passes,
            "arrived": sorted(self._arrived),
            "started": sorted(self._started),
        }

    def load_json(self, data: dict[str, Any]) -> None:
        self.ack = data["ack"]
        self.counters = dict(data["counters"])
        self.passes = dict(data["passes"])
        self._arrived = set(data["arrived"])
        self._started = set(data["started"])

    def update(
        self,
        arrivals: Iterable[tuple[str, float, str, float]],
        starts: Iterable[tuple[str, float]],
        open_ids: set[str],
        now: float,
    ) -> None:
        """Apply one refresh: ``arrivals`` (job id, submit time, key, weight) of every open job,
        ``starts`` (job id, start time) of every running job, ``open_ids`` all open jobs."""
        started = {job_id: at for job_id, at in starts}
        events: list[tuple[float, int, str, str, float]] = []
        for job_id, at, key, weight in arrivals:
            if job_id in self._arrived:
                continue
            self._arrived.add(job_id)
            start = started.get(job_id)
            if start is not None and start - at <= DIRECT_MATCH_SECONDS:
                self._started.add(job_id)  # matched at once: no pass
                continue
            events.append((at, 0, job_id, key, weight))
        for job_id, at in started.items():
            if job_id not in self._started:
                events.append((at, 1, job_id, "", 0.0))
        # Jobs that were waiting and are gone without being seen running started (and ended)
        # between two refreshes: handed out by now.
        for job_id in list(self.passes):
            if job_id not in open_ids and job_id not in started:
                events.append((now, 1, job_id, "", 0.0))
        for _at, kind, job_id, key, weight in sorted(events):
            if kind == 0:
                pass_ = next_pass(self.counters.get(key, 0.0), self.ack, weight)
                self.counters[key] = pass_
                self.passes[job_id] = pass_
            else:
                self._started.add(job_id)
                if job_id in self.passes:
                    self.ack = max(self.ack, self.passes.pop(job_id))
        # Forget closed jobs. Keys are kept even once behind the ack level: the next pass is
        # ``max(ack, last + 1/weight)``, so a last pass within one increment of the ack level
        # still counts (forgetting those put a user's next job a whole turn too early). The
        # server keeps its keys too (exactly up to 100, then in a sketch); here the highest
        # ``MAX_FAIRNESS_KEYS`` are kept.
        self._arrived &= open_ids
        self._started &= open_ids
        if len(self.counters) > MAX_FAIRNESS_KEYS:
            kept = sorted(self.counters.items(), key=lambda kv: kv[1])[-MAX_FAIRNESS_KEYS:]
            self.counters = dict(kept)


def next_pass(last: float, ack: float, weight: float) -> float:
    """The pass Temporal's fairness gives a task of a key whose last pass is ``last``."""
    return max(ack, last + 1.0 / _weight(weight))


@dataclass(frozen=True)
class Dispatch:
    """One simulated hand-out of a waiting task: its pass, when, whose, and which job ("" for an
    expected arrival)."""

    pass_: float
    start: float
    key: str
    job_id: str
    # Not a hand-out: a worker fell idle here (nothing waiting); a new job would start then.
    idle: bool = False


@dataclass(frozen=True)
class QueuePlan:
    """Where each queued job stands: its place in dispatch order and its expected start."""

    # job id -> (position, 1-based, counting jobs whose worker vanished first; seconds from now to start)
    starts: dict[str, tuple[int, float]]
    # job id -> expected seconds each running job (alive or stalled) still keeps its worker
    remaining: dict[str, float]
    workers: int
    # What ``place`` needs to put a job submitted since into this plan without re-simulating:
    # the hand-outs of waiting tasks in order, the workers still idle once the jobs waiting now
    # were matched, the positions taken before the first hand-out, the keys' last passes once
    # every job waiting now has its pass, the ack level then, and when the simulation stopped.
    dispatches: list[Dispatch] = field(default_factory=list)
    idle: int = 0
    positioned: int = 0
    counters: dict[str, float] = field(default_factory=dict)
    ack: float = 0.0
    horizon: float = 0.0


def place(plan: QueuePlan, job: QueuedJob, earlier: Sequence[QueuedJob], costs: JobCosts) -> tuple[int, float]:
    """Position and expected start of ``job``, submitted since ``plan`` was made after the jobs
    ``earlier`` (also unseen by it, in arrival order): the plan updated for it, not re-made.

    Each new job takes the pass the server gives it. A job of a key the plan expected to
    arrive takes the first such expected arrival left (the plan already made room for it);
    any other waits for the first hand-out of a later pass (or a worker falling idle). Each
    earlier new job ahead of it that took no expected arrival's place pushes it one hand-out on.
    Exact while new jobs arrive as their keys' measured rates say; the next snapshot re-plans.
    """
    counters = dict(plan.counters)

    def pass_of(queued: QueuedJob) -> float:
        pass_ = next_pass(counters.get(queued.fairness_key, 0.0), plan.ack, queued.fairness_weight)
        counters[queued.fairness_key] = pass_
        return pass_

    expected_by_key: dict[str, int] = {}
    for dispatch in plan.dispatches:
        if not dispatch.job_id and not dispatch.idle:
            expected_by_key[dispatch.key] = expected_by_key.get(dispatch.key, 0) + 1
    # Earlier new jobs: their passes, and whether each took an expected arrival's place.
    seen_by_key: dict[str, int] = {}
    before: list[tuple[float, float, bool]] = []
    for queued in earlier:
        index = seen_by_key.get(queued.fairness_key, 0)
        seen_by_key[queued.fairness_key] = index + 1
        absorbed = index < expected_by_key.get(queued.fairness_key, 0)
        before.append((pass_of(queued), costs.worker_seconds(queued.shape), absorbed))
    pass_ = pass_of(job)
    # Earlier new jobs ahead of it that took no expected arrival's place: each takes the next
    # idle worker, or else delays it by its run time shared among the workers.
    pending = [run for p, run, absorbed in before if p <= pass_ and not absorbed]
    ahead_new = sum(1 for p, _run, _absorbed in before if p <= pass_)
    idle_now = [Dispatch(math.inf, 0.0, "", "", idle=True)] * plan.idle
    own_before = seen_by_key.get(job.fairness_key, 0)
    own_seen = 0
    ahead = 0
    events = [*idle_now, *plan.dispatches]
    slot: int | None = None
    for index, dispatch in enumerate(events):
        if dispatch.idle:
            if pending:
                pending.pop(0)
                continue
            slot = index
            break
        if not dispatch.job_id and dispatch.key == job.fairness_key:
            if own_seen == own_before:
                slot = index
                break
            own_seen += 1
            continue
        if dispatch.pass_ > pass_:
            slot = index
            break
        if dispatch.job_id:
            ahead += 1
    position = plan.positioned + ahead + ahead_new + 1
    # Each earlier new job still ahead takes the hand-out it finds, pushing this one a hand-out on.
    if slot is not None and slot + len(pending) < len(events):
        return position, events[slot + len(pending)].start
    overflow = len(pending) - (len(events) - slot if slot is not None else 0)
    return position, plan.horizon + max(0, overflow) * costs.worker_seconds(job.shape) / max(1, plan.workers)


def plan(
    snapshot: ModelSnapshot,
    costs: JobCosts,
    extra: Iterable[QueuedJob] = (),
    arrivals: Iterable[ArrivalStream] = (),
    shadow: FairnessShadow | None = None,
) -> QueuePlan | None:
    """Expected start of every queued job (and of ``extra``: jobs submitted since the snapshot).

    A simulation of the next dispatches: workers free up as their running jobs' remaining
    work is done; each free worker takes the waiting task with the lowest fairness pass; the
    waiting tasks are those queued now and those the ``arrivals`` streams add meanwhile, each
    given the pass the server gives a new task of its key (its key's last pass plus
    ``1 / weight``, or the pass of the last dispatched task if that is later). Expected arrivals
    take turns but are not counted in positions: they are not ahead of anyone yet.

    ``shadow`` holds the passes the server gave the jobs waiting now and its keys' counters;
    without it (or for jobs it has not seen) passes are replayed in arrival order from 0.

    ``None`` when no worker serves the model: there is no honest number to give.
    """
    alive = [r for r in snapshot.running if r.alive]
    stalled = [r for r in snapshot.running if not r.alive]
    # Until each running job's worker is free again (not until the job closes).
    remaining = {r.job_id: costs.worker_remaining_seconds(r.shape, r.step) for r in snapshot.running}
    workers = max(snapshot.workers_serving, len(alive))
    if workers == 0:
        return None
    free = sorted(remaining[r.job_id] for r in alive)[:workers]
    free += [0.0] * (workers - len(free))
    heapq.heapify(free)
    starts: dict[str, tuple[int, float]] = {}
    # A job whose worker vanished is handed out again before the backlog (its retry is due
    # first); it costs its remaining work, which resumes from its checkpoint.
    position = 0
    for stalled_job in stalled:
        start = heapq.heappop(free)
        heapq.heappush(free, start + remaining[stalled_job.job_id])
        position += 1

    queue = sorted([*snapshot.queued, *extra], key=lambda j: (j.created_at, j.job_id))
    # A task that finds a worker polling is handed to it at once (the server matches it
    # without backlogging it), so while workers are idle jobs start in arrival order: the
    # fairness pass only orders tasks that wait. Without this, a paid job submitted just after
    # a free one in the same burst was told it starts first, and the free one that it waits.
    direct = 0
    while direct < len(queue) and free[0] <= 0.0:
        job = queue[direct]
        heapq.heapreplace(free, costs.worker_seconds(job.shape))
        position += 1
        starts[job.job_id] = (position, 0.0)
        direct += 1
    idle = sum(1 for at in free if at <= 0.0)
    positioned = position
    known = shadow.passes if shadow is not None else {}
    passes: dict[str, float] = dict(shadow.counters) if shadow is not None else {}
    base = shadow.ack if shadow is not None else 0.0
    waiting_by_key: dict[str, int] = {}
    # (pass, arrival, tie-break, job id or "" for an expected arrival, key, run seconds)
    backlog: list[tuple[float, float, int, str, str, float]] = []
    for order, job in enumerate(queue[direct:], start=direct):
        pass_ = known.get(job.job_id)
        if pass_ is None:
            # Not seen by the shadow yet (submitted since the last refresh): the pass the
            # server gives it now.
            pass_ = next_pass(passes.get(job.fairness_key, 0.0), base, job.fairness_weight)
            passes[job.fairness_key] = pass_
        waiting_by_key[job.fairness_key] = waiting_by_key.get(job.fairness_key, 0) + 1
        backlog.append(
            (
                pass_,
                job.created_at,
                order,
                job.job_id,
                job.fairness_key,
                costs.worker_seconds(job.shape),
            )
        )
    heapq.heapify(backlog)
    counters = dict(passes)
    ack = base
    dispatches: list[Dispatch] = []
    # Expected arrivals: evenly spaced at each key's rate, the first one interval from now.
    streams = [s for s in arrivals if s.per_second > 0]
    upcoming = [(1.0 / s.per_second, i) for i, s in enumerate(streams)]
    heapq.heapify(upcoming)
    targets = len(queue)
    tie = len(queue)
    # Past the last job waiting now, a few more expected arrivals are handed out, so that a job
    # submitted later finds its place among them (``place``).
    beyond = 2 * workers + PLACE_BEYOND_DISPATCHES
    for _ in range(MAX_SIMULATED_DISPATCHES):
        if len(starts) == targets:
            if beyond <= 0 or not upcoming:
                break
            beyond -= 1
        now = free[0]
        while upcoming and upcoming[0][0] <= now:
            at, i = heapq.heappop(upcoming)
            stream = streams[i]
            heapq.heappush(upcoming, (at + 1.0 / stream.per_second, i))
            if waiting_by_key.get(stream.fairness_key, 0) >= stream.cap > 0:
                continue  # its user is at the cap: that submit is refused
            pass_ = next_pass(passes.get(stream.fairness_key, 0.0), base, stream.fairness_weight)
            passes[stream.fairness_key] = pass_
            waiting_by_key[stream.fairness_key] = waiting_by_key.get(stream.fairness_key, 0) + 1
            tie += 1
            heapq.heappush(backlog, (pass_, at, tie, "", stream.fairness_key, stream.run_seconds))
        if not backlog:
            if not upcoming:
                break
            # Idle until the next expected arrival.
            if now > 0.0:  # workers idle from the start are counted in ``idle``
                dispatches.append(Dispatch(math.inf, now, "", "", idle=True))
            heapq.heapreplace(free, upcoming[0][0])
            continue
        pass_, _at, _tie, job_id, key, run = heapq.heappop(backlog)
        base = max(base, pass_)
        waiting_by_key[key] -= 1
        start = heapq.heapreplace(free, now + run)
        dispatches.append(Dispatch(pass_, start, key, job_id))
        if job_id:
            position += 1
            starts[job_id] = (position, start)
    else:
        # Out of simulation budget (only under absurd arrival rates): the rest start no
        # earlier than the simulated horizon.
        for job in queue:
            if job.job_id not in starts:
                position += 1
                starts[job.job_id] = (position, free[0])
    return QueuePlan(
        starts=starts,
        remaining=remaining,
        workers=workers,
        dispatches=dispatches,
        idle=idle,
        positioned=positioned,
        counters=counters,
        ack=ack,
        horizon=free[0],
    )


def _weight(weight: float) -> float:
    return max(MIN_FAIRNESS_WEIGHT, weight)


def shape_of(spec: VideoModelSpec, request: VideoRequest) -> JobShape:
    """The cost shape of a request (or a job's memo, which is one) for ``spec``."""
    return JobShape(
        steps=request.steps if request.steps is not None else spec.default_steps,
        frames=spec.frame_count(request.seconds),
        width=request.width,
        height=request.height,
    )


def default_shape(spec: VideoModelSpec) -> JobShape:
    """The cost shape of a request that leaves everything to ``spec``'s defaults."""
    width, height = parse_size(spec.default_size)
    return JobShape(steps=spec.default_steps, frames=spec.frame_count(spec.default_seconds), width=width, height=height)
