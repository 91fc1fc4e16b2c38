"""Checkpoint overhead: the same job run twice in this process through the real generation
activity and the real model, once checkpointing at the default interval and once never (the
baseline), and the cost of restoring the newest checkpoint as a new attempt does. The goodput
under real preemptions that this overhead buys is ``bench.goodput``'s.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from activities.video.checkpoints import JobCheckpoints
from activities.video.generation import VideoGenerationActivities, job_fingerprint, resolve_job
from bench.report import Table
from leasehold.settings import Settings
from leasehold.storage import LocalObjectStore
from worker_gpu.encoding import H264Encoder
from worker_gpu.models.procedural import ProceduralVideoModel
from workflows.video.types import GenerateInput, GenerateResult, VideoRequest


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


def measure(steps: int) -> Table:
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
    step_seconds = plain.gpu_seconds / steps
    commit_seconds = checkpointed.checkpoint_seconds / count
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
            f"256x256, 16 frames, {steps} steps on this CPU; step {step_seconds * 1000:.1f} ms, "
            f"checkpoint commit {commit_seconds * 1000:.1f} ms, restore {restore * 1000:.1f} ms."
        ],
    )
    return table
