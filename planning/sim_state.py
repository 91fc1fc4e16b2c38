"""The simulated state of the planner's runs: GPUs, jobs, task queues and the cost model."""

from __future__ import annotations

from dataclasses import dataclass, field

from video_policy.eta import ArrivalLog, JobCosts, ModelSnapshot
from video_policy.eta import JobShape as EtaShape
from workflows.video.models import PROCEDURAL_V1

# Progress is reported to the plan in this many steps (the plan's ``RunningJob.step``).
PLAN_STEPS = 1000

TIERS = ("paid", "free")


@dataclass(eq=False)
class Gpu:
    """One GPU worker: polling its queue, generating, or on its way out."""

    id: int
    pool: int
    queue: str
    joined: float
    job: SimJob | None = None
    leaving: bool = False
    slot: int = -1  # index in its pool's list of GPUs that can still be taken back


@dataclass(eq=False)
class SimJob:
    """One accepted job and what happened to it."""

    id: int
    tier: str
    user: str
    key: str
    weight: float
    shape: int
    gpus: int
    work: float  # GPU-seconds of steps (per GPU of a gang)
    queue: str
    arrived: float
    measured: bool
    penalty: float = 0.0  # seconds of data transfer per attempt (run outside its data's region)
    home: str = ""  # the region holding its data
    done: float = 0.0  # work saved in the newest checkpoint
    started: float | None = None
    ended: float | None = None
    outcome: str = "open"
    attempts: int = 0
    preemptions: int = 0
    predicted_wait: float | None = None
    pass_: float | None = None
    in_backlog: bool = False
    token: int = 0  # the current attempt (a finish event of an older one is stale)
    workers: list[Gpu] = field(default_factory=list)
    attempt_started: float = 0.0
    attempt_end: float = 0.0
    attempt_resumes: bool = False


class SimWaitingUsers:
    """The users of a tier with jobs waiting, as ``admit`` uses them (add one, count them)
    without copying the set per submit."""

    def __init__(self, base: dict[tuple[str, str], int]) -> None:
        self._base = base
        self._extra: set[tuple[str, str]] = set()

    def add(self, user: tuple[str, str]) -> None:
        if user not in self._base:
            self._extra.add(user)

    def __len__(self) -> int:
        return len(self._base) + len(self._extra)


class KnownCosts(JobCosts):
    """The plan's cost model where run times are known: each scenario shape's mean."""

    def __init__(self, means: list[float]) -> None:
        super().__init__(PROCEDURAL_V1)
        self._means = means

    def run_seconds(self, shape: EtaShape) -> float:
        return self._means[shape.frames]

    def remaining_seconds(self, shape: EtaShape, step: int) -> float:
        return self._means[shape.frames] * max(0, PLAN_STEPS - step) / PLAN_STEPS


class SimQueue:
    """One task queue: a GPU class in a region (a model's queue in the engine today)."""

    def __init__(self, name: str, gpu_class: str, region: str) -> None:
        self.name = name
        self.gpu_class = gpu_class
        self.region = region
        self.ack = 0.0
        self.counters: dict[str, float] = {}
        self.backlog: list[tuple[float, int, SimJob]] = []
        self.waiting = 0  # live backlog entries
        self.waiting_tier: dict[str, int] = {t: 0 for t in TIERS}
        self.idle: dict[int, Gpu] = {}
        self.alive = 0  # GPUs serving (not leaving)
        self.running: set[SimJob] = set()
        # Users with never-started jobs waiting, per tier (what admission counts).
        self.waiting_users: dict[str, dict[tuple[str, str], int]] = {t: {} for t in TIERS}
        self.arrivals = ArrivalLog()
        self.expected: dict[str, float | None] = {}
        self.snapshot = ModelSnapshot(model=name, taken_at=0.0)
