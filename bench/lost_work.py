"""Lost GPU work per preemption, warned (SIGTERM) and unwarned (kill -9), on the embedded stack.

One long job runs; the GPU worker is preempted at seeded random moments and the supervisor
restarts it. Lost work = steps the preempted attempt computed that the next attempt had to
compute again, in seconds at the measured step time (from the worker's checkpoint log).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time

from temporalio.client import Client, WorkflowExecutionStatus

from bench.report import Table, mean, percentile
from testing.checker import History
from testing.stack import EmbeddedStack, VideoClient, lost_work_of_kill, read_gpu_logs, running_generation
from workflows.video.job import VideoJobWorkflow

GPU = "worker gpu"
# The model's most steps, on a 4-second video: long jobs; when one ends, the next starts.
STEPS = 1000


async def _preempt(
    stack: EmbeddedStack,
    client: Client,
    job_id: str,
    sig: int,
    rng: random.Random,
    interval: float,
    step_times: list[float],
) -> tuple[int, float, float, int] | None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        now = await running_generation(client, [job_id], min_step=1)
        if now is not None:
            break
        await asyncio.sleep(0.1)
    else:
        return None
    first = now
    await asyncio.sleep(rng.uniform(0.5, interval + 0.5))
    now = await running_generation(client, [job_id], min_step=0)
    if now is None or now.started_at is None or now.progress is None:
        return None
    # Step time from two heartbeats of this attempt (the worker's clock).
    assert first.progress is not None
    if now.attempt == first.attempt and now.progress.sent_at > first.progress.sent_at:
        steps = now.progress.step - first.progress.step
        if steps > 0:
            step_times.append((now.progress.sent_at - first.progress.sent_at) / steps)
    pid = stack.child_pid(GPU)
    at = time.time()
    os.kill(pid, sig)
    await asyncio.to_thread(stack.wait_child_healthy, GPU, pid)
    return now.attempt, at, now.started_at, now.progress.step


async def run(stack: EmbeddedStack, client: Client, api_key: str, seed: int, per_kind: int, interval: float) -> Table:
    rng = random.Random(f"{seed}/lost-work")
    video = VideoClient(stack.api_url, api_key, History(), "bench", seconds=4)
    jobs: list[str] = []

    async def current_job() -> str:
        if jobs:
            desc = await client.get_workflow_handle(f"video-{jobs[-1]}").describe()
            if desc.status == WorkflowExecutionStatus.RUNNING:
                return jobs[-1]
        job_id = await asyncio.to_thread(video.submit, f"lost-{seed}-{time.time_ns()}", STEPS)
        assert job_id is not None, "the lost-work job was refused"
        jobs.append(job_id)
        return job_id

    events: list[tuple[str, str, int, float, float, int]] = []
    step_times: list[float] = []
    for n in range(per_kind * 2):
        kind = "unwarned" if n % 2 == 0 else "warned"
        job_id = await current_job()
        sig = signal.SIGKILL if kind == "unwarned" else signal.SIGTERM
        got = await _preempt(stack, client, job_id, sig, rng, interval, step_times)
        if got is not None:
            events.append((kind, job_id, *got))
    # Let the last attempt start (so its resume is logged), then end the job.
    job_id = await current_job()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if await running_generation(client, [job_id], min_step=1) is not None:
            break
        await asyncio.sleep(0.2)
    for job_id in jobs:
        try:
            await client.get_workflow_handle_for(VideoJobWorkflow.run, f"video-{job_id}").cancel()
        except Exception:  # already finished
            pass
    record = read_gpu_logs([stack.gpu_log()])
    step_seconds = percentile(step_times, 0.5) if step_times else record.step_seconds()
    lost: dict[str, list[float]] = {"unwarned": [], "warned": []}
    for kind, job_id, attempt, at, started_at, seen_step in events:
        if kind == "unwarned":
            work = lost_work_of_kill(record, job_id, attempt, at, started_at, STEPS, attempt + 1, step_seconds)
            if work is not None:
                lost[kind].append(work.lost_seconds)
        else:
            own = record.checkpoints.get((job_id, attempt), [])
            resumed = record.resumes.get((job_id, attempt + 1))
            if own and resumed:
                lost[kind].append(max(0, max(own[-1][1], seen_step) - resumed[1]) * step_seconds)
    table = Table(
        f"Lost GPU work per preemption (s), checkpoint interval {interval:g} s",
        ["preemption", "n", "min", "p50", "mean", "p90", "max"],
        notes=[
            f"Real kills of the embedded stack's GPU worker during long jobs (180x320, 4 s, {STEPS} steps); "
            f"step time {step_seconds * 1000:.1f} ms (from heartbeats). "
            "Unwarned = kill -9, warned = SIGTERM (checkpoint at the notice)."
        ],
    )
    for kind, values in lost.items():
        table.rows.append(
            [
                kind,
                str(len(values)),
                *(
                    f"{v:.2f}"
                    for v in (
                        min(values, default=float("nan")),
                        percentile(values, 0.5),
                        mean(values),
                        percentile(values, 0.9),
                        max(values, default=float("nan")),
                    )
                ),
            ]
        )
    return table
