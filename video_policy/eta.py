"""The cost model of video jobs: their shapes, the measured snapshot of one model version's
queue and workers, per-job costs, and each fairness key's arrival rate.

Pure computation over a measured snapshot (``api/video/capacity.py`` takes the snapshots;
``video_policy.queue_plan`` plans from them):

* Run time of a job = the model's measured per-job overhead + its steps x the measured time
  per step for its length and size (frames x pixels), scaled from other sizes until that size
  has been seen, and from the catalogue's rough cost until anything has been measured. Part of
  the overhead is the tail after generation (clean-up, the read-model write of the outcome,
  webhooks) until the job closes: the caller waits for it, but the worker is free for the next
  job, so the plan occupies a worker for a job's run time less that tail (``worker_seconds``).
"""

from __future__ import annotations

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
# Arrival rates are measured over this window. They are projected over the whole queue wait
# (minutes in a backlog), and submits come in bursts: over one minute a rate is a sample of
# two or three bursts, which told free jobs behind a paid backlog twice their wait whenever
# those happened to be paid-heavy. Five minutes spans many bursts and still follows a change
# of load within a few minutes.
ARRIVAL_WINDOW_SECONDS = 300.0
MIN_ARRIVAL_SPAN_SECONDS = 15.0


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
    # With capacity types: the workers serving, by type (``reserved``, ``preemptible``).
    workers_by_capacity: dict[str, int] = field(default_factory=dict)
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

    def by_tier(self, costs: JobCosts, now: float, window: float | None = None) -> dict[str, tuple[float, float]]:
        """Each tier's arrivals per second over the window (or the last ``window`` seconds of
        it) and the worker-seconds of its mean job: what the fleet controller sizes from."""
        window = self.window if window is None else min(window, self.window)
        arrivals = [a for a in self._arrivals.values() if now - a[0] <= window]
        if self._since is None or not arrivals:
            return {}
        span = max(MIN_ARRIVAL_SPAN_SECONDS, min(window, now - self._since))
        tiers: dict[str, list[JobShape]] = {}
        for arrival in arrivals:
            tiers.setdefault(arrival[3], []).append(arrival[4])
        return {
            tier: (len(shapes) / span, sum(costs.worker_seconds(s) for s in shapes) / len(shapes))
            for tier, shapes in tiers.items()
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
