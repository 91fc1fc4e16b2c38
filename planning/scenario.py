"""What ``leasehold plan`` simulates: load, fleet, prices and the questions to answer.

A scenario is a YAML or JSON document validated here; every field has a unit in its name and
a default, and a bad file is one line naming the field (``ScenarioError``). Policies are not
part of it: tier weights, per-user caps, the free tier's wait threshold, heartbeat timeout and
checkpoint interval come from the deployment's ``Settings`` (the same values the API and the
workers use); a scenario may override the checkpoint interval only, to sweep it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Purchase = Literal["reserved", "preemptible"]

# Bounds on one run (a scenario file is input: it must not ask for a simulation that never ends).
MAX_SIMULATED_JOBS = 2_000_000
MAX_SIMULATED_GPUS = 200_000


class ScenarioError(ValueError):
    """A scenario that cannot be simulated; the message names the field."""


class _Strict(BaseModel):
    # A misspelt field is an error, not a silently ignored default.
    model_config = ConfigDict(extra="forbid")


class Burst(_Strict):
    """Some submits come as a burst of several jobs from one user at once."""

    share: float = Field(default=0.0, ge=0.0, le=1.0, description="share of submit events that are bursts")
    jobs: int = Field(default=5, ge=1, le=1000, description="jobs in one burst")


class TierLoad(_Strict):
    """One tier's arrivals: a Poisson stream of submits spread over its users."""

    tier: Literal["paid", "free"]
    per_second: float = Field(ge=0.0, le=10_000.0)
    users: int = Field(default=1000, ge=1, le=10_000_000)
    burst: Burst = Field(default_factory=lambda: Burst())


class JobShape(_Strict):
    """One kind of job in the mix: its share, GPU time, GPUs at once and GPU class."""

    name: str = Field(min_length=1, max_length=64)
    share: float = Field(gt=0.0)
    gpu_seconds: float = Field(gt=0.0, le=7 * 24 * 3600.0, description="mean GPU time of one job (per GPU)")
    # Coefficient of variation of the run time (gamma distributed); 0 = every job the same.
    cv: float = Field(default=0.0, ge=0.0, le=4.0)
    gpus: int = Field(default=1, ge=1, le=1024, description="GPUs held at once (a gang, all or nothing)")
    gpu_class: str | None = Field(default=None, description="GPU class it needs (default: the first pool's)")


class ReclaimWave(_Strict):
    """A share of one pool's preemptible GPUs taken back over a while (and maybe given back)."""

    at_seconds: float = Field(ge=0.0)
    share: float = Field(gt=0.0, le=1.0)
    over_seconds: float = Field(default=600.0, ge=0.0)
    restore_after_seconds: float | None = Field(default=None, gt=0.0)


class ScheduledPreemption(_Strict):
    """One GPU of the pool taken back at a given time (a calibration replays its kills)."""

    at_seconds: float = Field(ge=0.0)
    warned: bool = False
    replaced: bool = True


class Pool(_Strict):
    """GPUs of one class, region and purchase type."""

    gpu_class: str = Field(min_length=1, max_length=64)
    region: str = Field(default="main", min_length=1, max_length=64)
    purchase: Purchase = "reserved"
    gpus: int = Field(ge=0, le=1_000_000)
    usd_per_gpu_hour: float = Field(ge=0.0)
    # Preemptible pools only: notices per GPU-hour held, the warning's length, the share of
    # preemptions that come with a warning (the rest are a hard kill), and how long a
    # replacement takes to boot and load the model.
    preemptions_per_gpu_hour: float = Field(default=0.0, ge=0.0, le=3600.0)
    warning_seconds: float = Field(default=30.0, ge=0.0)
    warned_share: float = Field(default=1.0, ge=0.0, le=1.0)
    replace_seconds: float = Field(default=180.0, ge=0.0)
    reclaims: list[ReclaimWave] = Field(default_factory=list)
    preemptions: list[ScheduledPreemption] = Field(default_factory=list)

    @model_validator(mode="after")
    def _reserved_is_not_preempted(self) -> Pool:
        if self.purchase == "reserved" and (self.preemptions_per_gpu_hour or self.reclaims or self.preemptions):
            raise ValueError("a reserved pool has no preemptions_per_gpu_hour, reclaims or preemptions")
        return self


class Region(_Strict):
    """Where a share of the jobs' data lives, and what running them elsewhere costs."""

    name: str = Field(min_length=1, max_length=64)
    data_share: float = Field(ge=0.0, le=1.0)
    # Seconds added to a job that runs outside the region holding its data (transfer in and
    # out); ``None``: its data may not leave (residency), it runs only here.
    remote_penalty_seconds: float | None = Field(default=60.0, ge=0.0)


class Scenario(_Strict):
    """Everything one simulation run needs besides the deployment's settings."""

    name: str = "scenario"
    seed: int = 1
    horizon_seconds: float = Field(default=3600.0, gt=0.0, le=30 * 24 * 3600.0)
    # Jobs submitted before this are not measured (the fleet starts empty).
    warmup_seconds: float = Field(default=600.0, ge=0.0)
    # After the horizon no job is submitted; the simulation runs on until every job ended or
    # this much longer (what is still open then is reported, not dropped).
    drain_seconds: float = Field(default=7200.0, ge=0.0)
    tiers: list[TierLoad] = Field(min_length=1)
    shapes: list[JobShape] = Field(min_length=1)
    pools: list[Pool] = Field(min_length=1)
    regions: list[Region] = Field(default_factory=list)
    # The checkpoint interval workers use (default: the deployment's) and what one costs.
    checkpoint_interval_seconds: float | None = Field(default=None, gt=0.0)
    checkpoint_write_seconds: float = Field(default=1.0, ge=0.0)
    # Loading a checkpoint when an attempt resumes one.
    resume_seconds: float = Field(default=2.0, ge=0.0)
    # How often the admission's capacity snapshot is refreshed (default: the deployment's).
    refresh_seconds: float | None = Field(default=None, gt=0.0)
    # Gangs: while one waits for its GPUs, smaller jobs that end before it could start anyway run.
    backfill: bool = True
    # Regions: route each job to the region with the least expected wait plus its data's move
    # ("eta"), or always run it where its data is ("home").
    routing: Literal["eta", "home"] = "eta"
    # The wait the fleet search sizes for, and at which percentile, for every tier.
    target_wait_seconds: float | None = Field(default=None, gt=0.0)
    target_percentile: float = Field(default=90.0, gt=0.0, le=100.0)

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        if self.warmup_seconds >= self.horizon_seconds:
            raise ValueError("warmup_seconds must be shorter than horizon_seconds")
        classes = {p.gpu_class for p in self.pools}
        for i, shape in enumerate(self.shapes):
            if shape.gpu_class is not None and shape.gpu_class not in classes:
                raise ValueError(f"shapes.{i}.gpu_class: no pool has class {shape.gpu_class!r}")
        names = [r.name for r in self.regions]
        if len(set(names)) != len(names):
            raise ValueError("regions: names must be unique")
        if self.regions:
            pool_regions = {p.region for p in self.pools}
            for i, pool in enumerate(self.pools):
                if pool.region not in names:
                    raise ValueError(f"pools.{i}.region: {pool.region!r} is not in regions")
            for i, region in enumerate(self.regions):
                if region.name not in pool_regions:
                    raise ValueError(f"regions.{i}.name: no pool is in region {region.name!r}")
            if abs(sum(r.data_share for r in self.regions) - 1.0) > 1e-6:
                raise ValueError("regions: data_share must add up to 1")
        for i, shape in enumerate(self.shapes):
            cls = shape.gpu_class or self.pools[0].gpu_class
            most = max(
                sum(p.gpus for p in self.pools if p.gpu_class == cls and p.region == r) for r in self.region_names
            )
            if shape.gpus > most and most > 0:
                raise ValueError(f"shapes.{i}.gpus: {shape.gpus} is more than any region's {cls} pools hold ({most})")
        if self.arrivals_per_second() * self.horizon_seconds > MAX_SIMULATED_JOBS:
            raise ValueError(
                f"horizon_seconds: {self.arrivals_per_second():g} jobs/s for {self.horizon_seconds:g} s is more than "
                f"{MAX_SIMULATED_JOBS:,} jobs; shorten the horizon"
            )
        if sum(p.gpus for p in self.pools) > MAX_SIMULATED_GPUS:
            raise ValueError(f"pools: more than {MAX_SIMULATED_GPUS:,} GPUs in all")
        tiers = [t.tier for t in self.tiers]
        if len(set(tiers)) != len(tiers):
            raise ValueError("tiers: each tier at most once")
        return self

    @property
    def region_names(self) -> list[str]:
        return [r.name for r in self.regions] or sorted({p.region for p in self.pools})

    @property
    def gpu_classes(self) -> list[str]:
        return list(dict.fromkeys(p.gpu_class for p in self.pools))

    def shape_class(self, shape: JobShape) -> str:
        return shape.gpu_class or self.pools[0].gpu_class

    def mean_gpu_seconds(self) -> float:
        """GPU-seconds of the mean job (gangs count every GPU)."""
        total = sum(s.share for s in self.shapes)
        return sum(s.share * s.gpu_seconds * s.gpus for s in self.shapes) / total

    def arrivals_per_second(self) -> float:
        """Jobs per second over every tier (a burst counts its jobs)."""
        return sum(t.per_second * (1 - t.burst.share + t.burst.share * t.burst.jobs) for t in self.tiers)


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def parse_scenario(data: Any, source: str = "scenario") -> Scenario:
    """A ``Scenario`` from decoded YAML/JSON; ``ScenarioError`` names the first bad field."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a mapping of fields, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"{source}: {_first_error(exc)}") from None


def load_scenario(path: Path) -> Scenario:
    """Read a scenario file (YAML, of which JSON is a subset)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text) if path.suffix != ".json" else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ScenarioError(f"{path}: not valid YAML/JSON ({str(exc).splitlines()[0]})") from None
    return parse_scenario(data, str(path))
