"""Typed payloads of the fleet controller, shared by its workflow, its activities and the CLI.

Light on purpose (stdlib + pydantic). Fields are only ever added, with defaults.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, model_validator

CapacityType = Literal["reserved", "preemptible"]


class FleetPool(BaseModel):
    """Bounds of one pool the controller sizes: a model version on a GPU class (or none) and a
    capacity type."""

    model: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    gpu_class: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")
    capacity_type: CapacityType
    min_workers: int = Field(default=0, ge=0, le=10_000)
    max_workers: int = Field(default=1, ge=0, le=10_000)
    # What one worker of this pool costs per hour (any currency; the ceiling is in the same one).
    gpu_hour_cost: float = Field(default=1.0, ge=0)
    # Local provider: the memory a CPU worker declares (``--memory-gib``), where classes are on.
    memory_gib: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _bounds(self) -> FleetPool:
        if self.min_workers > self.max_workers:
            raise ValueError(f"pool {self.key}: min_workers {self.min_workers} > max_workers {self.max_workers}")
        return self

    @property
    def group(self) -> str:
        """The capacity tracker's pool key (``<model>[.<class>]``), whose jobs this pool serves."""
        return self.model if self.gpu_class is None else f"{self.model}.{self.gpu_class}"

    @property
    def key(self) -> str:
        return f"{self.group}@{self.capacity_type}"


class FleetSpec(BaseModel):
    """What the controller sizes and how (``leasehold fleet run --config``)."""

    pools: list[FleetPool] = Field(min_length=1, max_length=256)
    # Most the whole fleet may cost per hour (``None``: no ceiling beyond the pools' maximums).
    cost_ceiling_per_hour: float | None = Field(default=None, ge=0)
    # The wait the fleet is sized for: the work waiting and running must be done within it.
    target_wait_seconds: float = Field(default=300.0, gt=0)
    tick_seconds: float = Field(default=15.0, ge=0.5, le=3600)
    # How far back arrivals count towards the rate (at most the capacity tracker's window, 5
    # minutes): shorter forgets a burst sooner once it is over.
    arrival_window_seconds: float = Field(default=300.0, ge=1.0)
    # A pool shrinks only after this many ticks in a row wanted fewer workers (bursts come in waves).
    scale_down_after_ticks: int = Field(default=4, ge=1, le=1000)
    # Ticks per workflow run before it continues as new (bounds the history).
    ticks_per_run: int = Field(default=200, ge=1, le=10_000)

    @model_validator(mode="after")
    def _unique(self) -> FleetSpec:
        keys = [p.key for p in self.pools]
        if len(set(keys)) != len(keys):
            raise ValueError("each pool (model, gpu_class, capacity_type) may be listed once")
        return self


class GroupDemand(BaseModel):
    """What the capacity tracker measured of one ``<model>[.<class>]`` (its latest publication)."""

    group: str
    measured: bool = False
    # Jobs waiting and running by tier, and the seconds of GPU work they still need.
    queued: dict[str, int] = Field(default_factory=dict)
    running: dict[str, int] = Field(default_factory=dict)
    work_seconds: dict[str, float] = Field(default_factory=dict)
    # New jobs per second by tier, and how long a worker takes for each tier's mean new job
    # (the capacity tracker's arrival log: the rates the ETA plans with).
    arrivals_per_second: dict[str, float] = Field(default_factory=dict)
    job_seconds: dict[str, float] = Field(default_factory=dict)
    completions_per_minute: float = 0.0
    mean_job_seconds: float = 60.0


class PoolWorkers(BaseModel):
    """The live workers of one pool, as its queue's pollers and the running jobs tell."""

    key: str
    idle: list[str] = Field(default_factory=list)
    busy: list[str] = Field(default_factory=list)


class FleetObservation(BaseModel):
    """Input of a decision: demand per group and workers per pool."""

    taken_at: float
    demand: dict[str, GroupDemand] = Field(default_factory=dict)
    workers: dict[str, PoolWorkers] = Field(default_factory=dict)


class PoolDecision(BaseModel):
    """The controller's decision for one pool, with the inputs it came from."""

    key: str
    current: int
    wanted: int
    desired: int
    reason: str
    inputs: dict[str, float] = Field(default_factory=dict)


class Decision(BaseModel):
    """One tick: every pool's decision and what the provider then did."""

    at: datetime
    pools: list[PoolDecision]
    cost_per_hour: float
    started: dict[str, int] = Field(default_factory=dict)
    retired: dict[str, list[str]] = Field(default_factory=dict)
    error: str | None = None


class ApplyFleetInput(BaseModel):
    """Input of the provider activity: how many workers each pool should have, and which
    workers are idle (retired first)."""

    spec: FleetSpec
    desired: dict[str, int]
    idle: dict[str, list[str]] = Field(default_factory=dict)


class ApplyFleetResult(BaseModel):
    started: dict[str, int] = Field(default_factory=dict)
    retired: dict[str, list[str]] = Field(default_factory=dict)
    # Workers each pool has after the change (the provider's own count).
    running: dict[str, int] = Field(default_factory=dict)


class FleetInput(BaseModel):
    """Start input of ``FleetWorkflow`` (and of each run it continues as)."""

    spec: FleetSpec
    # Ticks in a row each pool wanted fewer workers, and the most it wanted meanwhile.
    shrinking: dict[str, list[int]] = Field(default_factory=dict)
    # The latest decisions that changed the fleet.
    decisions: list[Decision] = Field(default_factory=list)
    ticks: int = 0


class FleetState(BaseModel):
    """What ``FleetWorkflow.state`` answers: the spec, the latest decisions that changed the
    fleet (newest last), and the latest tick whatever it decided."""

    spec: FleetSpec
    decisions: list[Decision]
    ticks: int
    last: Decision | None = None
