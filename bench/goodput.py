"""Checkpoint overhead (measured) and goodput under preemption (a seeded simulation fed with
costs measured here: step time, checkpoint commit, restore).

Overhead: the same job run twice in this process through the real generation activity and
the real model, once checkpointing at the default interval and once never (the baseline).
Goodput = useful GPU-seconds / worker-busy seconds over many simulated jobs whose
preemptions arrive as a Poisson process; "p % preemption" means a job-long stretch of work
is interrupted with probability p. Policies: checkpoint at the default interval (unwarned
preemptions lose the work since the last checkpoint), the same with a warning (checkpoint
at the notice, lose nothing), and restart-from-zero (checkpointing off: the baseline).
"""

from __future__ import annotations

import dataclasses
import math
import random
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from activities.video_checkpoints import JobCheckpoints
from activities.video_generation import VideoGenerationActivities, job_fingerprint, resolve_job
from bench.report import Table
from leasehold.settings import Settings
from leasehold.storage import LocalObjectStore
from worker_gpu.encoding import H264Encoder
from worker_gpu.models.procedural import ProceduralVideoModel
from workflows.video_types import GenerateInput, GenerateResult, VideoRequest


@dataclasses.dataclass
class Costs:
    step_seconds: float
    checkpoint_seconds: float
    restore_seconds: float
    interval: float


def _generate(
    model: ProceduralVideoModel, store: LocalObjectStore, request: VideoRequest, job: str, interval: float
) -> GenerateResult:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=600))
    activities = VideoGenerationActivities(model, H264Encoder(), store)
    result: GenerateResult = env.run(
        activities.generate_video,
        GenerateInput(job_id=job, request=request, object_prefix=job, checkpoint_interval_seconds=interval),
    )
    return result


def measure(steps: int) -> tuple[Table, Costs]:
    interval = Settings().checkpoint_interval_seconds
    model = ProceduralVideoModel(device="cpu", threads=1)
    model.load()
    request = VideoRequest(
        prompt="a blue kite over a green forest",
        model="procedural-v1",
        seconds=2,
        width=256,
        height=256,
        seed=3,
        steps=steps,
    )
    with tempfile.TemporaryDirectory(prefix="leasehold-bench-") as tmp:
        store = LocalObjectStore(Path(tmp), b"bench", "http://127.0.0.1:1")
        plain = _generate(model, store, request, "plain", 1e9)
        checkpointed = _generate(model, store, request, "ckpt", interval)
        # Restore cost: find, verify and load the newest checkpoint, as a new attempt does.
        job = resolve_job(
            model.name, GenerateInput(job_id="x", request=request, object_prefix="x", checkpoint_interval_seconds=1)
        )
        checkpoints = JobCheckpoints(store, "ckpt-restore", 1)
        state = model.init_state(job)
        model.step(state)
        checkpoints.commit(state.step, steps, job_fingerprint(model, job), model.save_state(state))
        started = time.perf_counter()
        JobCheckpoints(store, "ckpt-restore", 2).newest_valid(
            job_fingerprint(model, job), lambda d: model.load_state(job, d)
        )
        restore = time.perf_counter() - started
    count = max(1, math.floor(plain.gpu_seconds / interval))
    costs = Costs(plain.gpu_seconds / steps, checkpointed.checkpoint_seconds / count, restore, interval)
    share = checkpointed.checkpoint_seconds / checkpointed.gpu_seconds
    table = Table(
        f"Checkpoint overhead at the default interval ({interval:g} s)",
        ["run", "job seconds", "checkpoint seconds", "share"],
        [
            ["no checkpoints (baseline)", f"{plain.gpu_seconds:.2f}", "0", "0 %"],
            [
                f"every {interval:g} s",
                f"{checkpointed.gpu_seconds:.2f}",
                f"{checkpointed.checkpoint_seconds:.3f}",
                f"{share * 100:.2f} %",
            ],
        ],
        [
            f"256x256, 16 frames, {steps} steps on this CPU; step {costs.step_seconds * 1000:.1f} ms, "
            f"checkpoint commit {costs.checkpoint_seconds * 1000:.1f} ms, restore {restore * 1000:.1f} ms."
        ],
    )
    return table, costs


def _simulate(costs: Costs, work: float, rate: float, policy: str, jobs: int, rng: random.Random) -> float:
    hazard = -math.log(1 - rate) / work if rate > 0 else 0.0
    busy = 0.0
    for _ in range(jobs):
        done = 0.0  # useful work committed (seconds of steps)
        progress = 0.0  # work since the last commit
        restarted = False
        while done + progress < work:
            if restarted and policy != "restart":
                busy += costs.restore_seconds
            restarted = False
            until_preempt = rng.expovariate(hazard) if hazard else math.inf
            # Run until the job ends or the worker is preempted, checkpointing on the way.
            while True:
                remaining = work - done - progress
                to_checkpoint = costs.interval - progress if policy != "restart" else math.inf
                step = min(remaining, to_checkpoint, until_preempt)
                busy += step
                progress += step
                until_preempt -= step
                if done + progress >= work:
                    break
                if step == to_checkpoint:
                    busy += costs.checkpoint_seconds
                    done += progress
                    progress = 0.0
                    continue
                # Preempted.
                if policy == "warned":
                    busy += costs.checkpoint_seconds
                    done += progress
                progress = 0.0
                if policy == "restart":
                    done = 0.0
                restarted = True
                break
            if not restarted:
                break
    return work * jobs / busy


def goodput(costs: Costs, seed: int, jobs: int, work: float) -> Table:
    table = Table(
        f"Goodput under preemption (job of {work:g} s of GPU work, {jobs} simulated jobs per cell)",
        [
            "preemption",
            "restart-from-zero (baseline)",
            f"checkpoint every {costs.interval:g} s",
            "checkpoint + warning",
        ],
        notes=[
            "Seeded simulation with the costs measured above (step, checkpoint commit, restore); "
            "useful GPU-seconds / worker-busy seconds.",
        ],
    )
    for rate in (0.05, 0.20):
        cells = []
        for policy in ("restart", "unwarned", "warned"):
            value = _simulate(costs, work, rate, policy, jobs, random.Random(f"{seed}/{rate}"))
            cells.append(f"{value * 100:.1f} %")
        table.rows.append([f"{rate * 100:.0f} %", *cells])
    return table
