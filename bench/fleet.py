"""The fleet controller against a fixed fleet of the same cost, on one replayed burst.

``python -m bench.fleet [--seed N]``. A discrete-time replay (1 s steps) of a seeded trace: a
steady trickle of paid and free jobs, then a ten-minute burst, then the trickle again. Both
fleets serve it with the routing the job workflow does (paid jobs on reserved capacity first,
free jobs on preemptible, each handed to the other type after 30 s without a free worker,
doubling, priority by tier then age). The controller fleet is sized every tick by
``workflows.fleet.sizing.decide``, the rule ``FleetWorkflow`` runs, on observations made the way
``observe_fleet`` makes them (jobs waiting and running by tier, their remaining work, arrivals
per tier over the window); its drained workers hand their job back at once (checkpoint) and
the job resumes elsewhere after a resume overhead. The fixed fleet has the reserved minimum
and as many preemptible workers as the controller's GPU-hours paid buy, held all the time.

What it does not measure: real model loads and checkpoint uploads (a constant boot time and
resume overhead stand in for them), preemptions by the cloud, and the engine's dispatch
latency (tests and the other benchmarks measure those on real processes).
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.report import Table, percentile
from workflows.fleet.sizing import decide
from workflows.fleet.types import FleetObservation, FleetPool, FleetSpec, GroupDemand

GROUP = "wan-t2v"
RESERVED, PREEMPTIBLE = f"{GROUP}@reserved", f"{GROUP}@preemptible"
JOB_SECONDS = 240.0  # the seed's 4 GPU-minutes per video
BOOT_SECONDS = 120.0  # a new worker loads weights before it polls
RESUME_SECONDS = 15.0  # a drained job's next attempt loads its checkpoint
FALLBACK_SECONDS = 30.0
FALLBACK_MAX_SECONDS = 600.0
HORIZON_SECONDS = 2 * 3600
# Jobs per minute: (paid, free) before and after the burst, and during it.
TRICKLE = (1.0, 2.0)
BURST = (4.0, 20.0)
BURST_FROM, BURST_UNTIL = 10 * 60, 20 * 60

SPEC = FleetSpec(
    pools=[
        FleetPool(model=GROUP, capacity_type="reserved", min_workers=4, max_workers=8, gpu_hour_cost=1.0),
        FleetPool(model=GROUP, capacity_type="preemptible", min_workers=0, max_workers=40, gpu_hour_cost=0.4),
    ],
    target_wait_seconds=300.0,
    tick_seconds=15.0,
    scale_down_after_ticks=4,
)


@dataclass
class Job:
    tier: str
    arrived: float
    left: float = JOB_SECONDS
    queue: str = ""
    queued_at: float = 0.0
    wait: float = FALLBACK_SECONDS
    started: float | None = None


@dataclass
class Worker:
    pool: str
    ready_at: float
    job: Job | None = None


@dataclass
class Replay:
    """One fleet serving the trace; ``size`` (``None``: fixed) resizes it every tick."""

    fixed: dict[str, int] | None
    workers: list[Worker] = field(default_factory=list)
    waiting: list[Job] = field(default_factory=list)
    done: list[Job] = field(default_factory=list)
    paid_seconds: dict[str, float] = field(default_factory=lambda: {RESERVED: 0.0, PREEMPTIBLE: 0.0})
    arrivals: list[Job] = field(default_factory=list)
    shrinking: dict[str, list[int]] = field(default_factory=dict)
    drained: int = 0

    def run(self, trace: list[Job]) -> Replay:
        if self.fixed is not None:
            for pool, n in self.fixed.items():
                self.workers += [Worker(pool, 0.0) for _ in range(n)]
        pending = sorted(trace, key=lambda j: j.arrived)
        t = 0.0
        while t < HORIZON_SECONDS and (pending or self.waiting or any(w.job for w in self.workers) or t < BURST_UNTIL):
            while pending and pending[0].arrived <= t:
                job = pending.pop(0)
                job.queue, job.queued_at = (RESERVED if job.tier == "paid" else PREEMPTIBLE), t
                self.waiting.append(job)
                self.arrivals.append(job)
            if self.fixed is None and t % SPEC.tick_seconds == 0:
                self._resize(t)
            self._step(t)
            t += 1.0
        return self

    def _step(self, t: float) -> None:
        for job in self.waiting:  # schedule-to-start timeouts: hand over to the other type
            if t - job.queued_at >= job.wait:
                job.queue = PREEMPTIBLE if job.queue == RESERVED else RESERVED
                job.queued_at, job.wait = t, min(job.wait * 2, FALLBACK_MAX_SECONDS)
        for worker in self.workers:
            self.paid_seconds[worker.pool] += 1.0
            if worker.ready_at > t:
                continue
            if worker.job is None:
                mine = [j for j in self.waiting if j.queue == worker.pool]
                if mine:
                    job = min(mine, key=lambda j: (j.tier != "paid", j.arrived))
                    self.waiting.remove(job)
                    job.started = t if job.started is None else job.started
                    worker.job = job
            if worker.job is not None:
                worker.job.left -= 1.0
                if worker.job.left <= 0:
                    self.done.append(worker.job)
                    worker.job = None

    def _resize(self, t: float) -> None:
        observation = observe(self, t)
        current = {pool: sum(1 for w in self.workers if w.pool == pool) for pool in (RESERVED, PREEMPTIBLE)}
        decisions, self.shrinking = decide(SPEC, observation, current, self.shrinking)
        for d in decisions:
            mine = [w for w in self.workers if w.pool == d.key]
            for _ in range(d.desired - len(mine)):
                self.workers.append(Worker(d.key, t + BOOT_SECONDS))
            # Drain before retire: idle (or booting) workers first, then busy ones, whose job goes back.
            for worker in sorted(mine, key=lambda w: w.job is not None)[: max(0, len(mine) - d.desired)]:
                if worker.job is not None:
                    job, worker.job = worker.job, None
                    job.left += RESUME_SECONDS
                    job.queued_at, job.wait = t, FALLBACK_SECONDS
                    self.waiting.append(job)
                    self.drained += 1
                self.workers.remove(worker)


def observe(replay: Replay, t: float) -> FleetObservation:
    """What ``observe_fleet`` would read from the capacity tracker's publication at ``t``."""
    demand = GroupDemand(group=GROUP, measured=True, mean_job_seconds=JOB_SECONDS)
    for job in replay.waiting:
        demand.queued[job.tier] = demand.queued.get(job.tier, 0) + 1
        demand.work_seconds[job.tier] = demand.work_seconds.get(job.tier, 0.0) + job.left
    for worker in replay.workers:
        if worker.job is not None:
            tier = worker.job.tier
            demand.running[tier] = demand.running.get(tier, 0) + 1
            demand.work_seconds[tier] = demand.work_seconds.get(tier, 0.0) + worker.job.left
    window = SPEC.arrival_window_seconds
    recent = [j for j in replay.arrivals if t - j.arrived <= window]
    span = max(15.0, min(window, t))
    for tier in ("paid", "free"):
        demand.arrivals_per_second[tier] = sum(1 for j in recent if j.tier == tier) / span
        demand.job_seconds[tier] = JOB_SECONDS
    return FleetObservation(taken_at=t, demand={GROUP: demand})


def trace(seed: int) -> list[Job]:
    """Poisson arrivals per tier at the trickle's and the burst's rates."""
    rng = random.Random(seed)
    jobs: list[Job] = []
    for tier, index in (("paid", 0), ("free", 1)):
        t = 0.0
        while True:
            rate = (BURST if BURST_FROM <= t < BURST_UNTIL else TRICKLE)[index] / 60.0
            t += rng.expovariate(rate)
            if t >= 40 * 60:
                break
            jobs.append(Job(tier=tier, arrived=t))
    return jobs


def _fresh(jobs: list[Job]) -> list[Job]:
    return [Job(tier=j.tier, arrived=j.arrived) for j in jobs]


def run(seed: int = 32) -> Table:
    jobs = trace(seed)
    controlled = Replay(fixed=None).run(_fresh(jobs))
    cost = _total(controlled)
    reserved = SPEC.pools[0].min_workers
    # The same cost over the controller's run, held all the time: the reserved minimum and
    # what is left of the money in preemptible workers.
    hours = max(1.0, max(j.started or 0.0 for j in controlled.done)) / 3600
    preemptible = max(0, math.ceil((cost / hours - reserved * _cost(RESERVED)) / _cost(PREEMPTIBLE)))
    # A fixed fleet runs until its own last job is done: the largest one that costs no more.
    while True:
        fixed = Replay(fixed={RESERVED: reserved, PREEMPTIBLE: preemptible}).run(_fresh(jobs))
        if preemptible == 0 or _total(fixed) <= cost:
            break
        preemptible -= 1
    table = Table(
        f"Fleet controller vs a fixed fleet of the same cost ({len(jobs)} jobs, burst {BURST[0]:g} paid + "
        f"{BURST[1]:g} free/min for {(BURST_UNTIL - BURST_FROM) // 60} min, seed {seed})",
        ["fleet", "GPU-min reserved", "GPU-min preemptible", "cost", "p90 wait paid s", "p90 wait free s", "done"],
    )
    for name, replay in (("controller", controlled), (f"fixed {reserved}R+{preemptible}P", fixed)):
        row = _row(replay, _total)
        table.rows.append([name, *row, f"{len(replay.done)}/{len(jobs)}"])
    table.notes += [
        "replay in 1 s steps with the workflow's routing (tier's capacity type first, hand-over after 30 s, "
        "doubling) and the controller's own rule (workflows.fleet.sizing.decide) every 15 s",
        f"boot {BOOT_SECONDS:g} s per new worker, {RESUME_SECONDS:g} s resume per drained job "
        f"({controlled.drained} drained); costs 1.0/h reserved, 0.4/h preemptible",
        "the fixed fleet holds the reserved minimum and the most preemptible workers that cost no more than "
        "the controller over its own run (until its last job is done); wait = arrival to first start",
        "not measured: real model loads, checkpoint uploads, cloud preemptions, engine dispatch latency",
    ]
    return table


def _total(replay: Replay) -> float:
    """What a replay's fleet cost, from its first second until its last job was done."""
    return sum(s / 3600 * _cost(p) for p, s in replay.paid_seconds.items())


def _cost(pool: str) -> float:
    return next(p.gpu_hour_cost for p in SPEC.pools if p.key == pool)


def _row(replay: Replay, cost: Callable[[Replay], float]) -> list[str]:
    waits = {t: [(j.started or 0) - j.arrived for j in replay.done if j.tier == t] for t in ("paid", "free")}
    return [
        f"{replay.paid_seconds[RESERVED] / 60:.0f}",
        f"{replay.paid_seconds[PREEMPTIBLE] / 60:.0f}",
        f"{cost(replay):.2f}",
        f"{percentile(waits['paid'], 0.9):.0f}",
        f"{percentile(waits['free'], 0.9):.0f}",
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=32)
    print(run(parser.parse_args().seed).text())
