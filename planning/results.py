"""What one run of the planner's simulation measured."""

from __future__ import annotations

from dataclasses import dataclass, field

from planning.scenario import Scenario


@dataclass
class Attempt:
    """One attempt of a job, as a test inspects it (recorded on request only)."""

    job: int
    gpus_needed: int
    gpus_held: int
    started: float
    ended: float
    outcome: str  # completed | preempted | killed
    lost_work: float  # per GPU
    checkpoint_interval: float


@dataclass
class TierFigures:
    """One tier's submits, refusals and waits (jobs submitted in the measured window)."""

    submitted: int = 0
    accepted: int = 0
    refused_429: int = 0
    refused_503: int = 0
    completed: int = 0
    failed: int = 0
    open: int = 0
    dispatched: int = 0  # hand-outs from the backlog (by pass) in the window
    contended: int = 0  # of those, made while the other tier had jobs waiting too
    waits: list[float] = field(default_factory=list)
    predicted: list[float] = field(default_factory=list)
    eta_errors: list[float] = field(default_factory=list)


@dataclass
class RunResult:
    """Everything one run measured over its window ``[warmup, horizon]`` (each count from 0)."""

    scenario: Scenario
    checkpoint_interval: float
    window: float
    tiers: dict[str, TierFigures]
    held_gpu_seconds: dict[int, float]  # by pool index
    busy_gpu_seconds: float = 0.0
    useful_gpu_seconds: float = 0.0
    lost_gpu_seconds: float = 0.0  # computed then thrown away (since the last checkpoint)
    overhead_gpu_seconds: float = 0.0  # checkpoint writes, resumes, data transfer, gang members idling
    preemptions: int = 0  # attempts ended by a preemption or reclaim
    jobs_preempted: int = 0
    lost_per_preemption: list[float] = field(default_factory=list)
    cost_usd: float = 0.0
    completed_in_window: int = 0
    accepted_total: int = 0
    completed_total: int = 0
    failed_total: int = 0
    open_at_end: int = 0
    mean_waiting: float = 0.0  # time-average of jobs waiting for a worker
    mean_busy: float = 0.0  # time-average of GPUs generating
    accepted_per_second: float = 0.0
    mean_work_per_job: float = 0.0  # measured mean GPU-seconds of steps per accepted job
    remote_jobs: int = 0
    backfilled: int = 0  # jobs started ahead of a waiting gang
    # t, waiting paid, free, busy, alive, free ETA
    series: list[tuple[float, int, int, int, int, float | None]] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)

    def tier(self, name: str) -> TierFigures:
        return self.tiers.setdefault(name, TierFigures())
