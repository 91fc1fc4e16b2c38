"""Chaos below the API: GPU workers killed, preempted, frozen; the Temporal server killed.

Every test compares the finished video with an uninterrupted run of the same request made in
the test process: a job that survives a failure must not just finish, it must produce the
same bytes.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle

from leasehold.devserver import dev_server_command, find_temporal_binary, free_port
from leasehold.settings import Settings
from leasehold.temporal import connect
from testing.harness import ManagedProcess, process_env
from tests.video_core.jobs import (
    busy_worker,
    job_keys,
    metric,
    pending_progress,
    request,
    result_keys_of,
    start_gpu,
    start_job,
    start_orchestration,
    store_of,
    wait_for,
    wait_for_step,
)
from tests.video_core.reference import reference_video
from workflows import search_attributes as sa
from workflows.video.job import VideoJobWorkflow
from workflows.video.types import GenerateProgress, VideoStatus

pytestmark = pytest.mark.chaos

# About 6-10 s of CPU per uninterrupted run here; long enough to interrupt mid-job.
CHAOS = request(prompt="a yellow kite over a green forest", seed=11, seconds=4, width=256, height=256, steps=300)


async def wait_for_checkpoint(handle: WorkflowHandle, at_least_step: int = 1) -> GenerateProgress:
    async def committed() -> bool:
        progress, _attempt, _started = await pending_progress(handle)
        return progress is not None and progress.checkpoint_step >= at_least_step

    await wait_for(committed, 60, "a committed checkpoint")
    progress, _attempt, _started = await pending_progress(handle)
    assert progress is not None
    return progress


async def test_kill9_mid_job_resumes_from_checkpoint_with_identical_bytes(
    temporal_client: Client, settings: Settings, logs_dir: Path
) -> None:
    reference = reference_video(CHAOS)
    orchestration = start_orchestration(settings, logs_dir)
    first = start_gpu(settings, logs_dir, name="gpu-1")
    second: ManagedProcess | None = None
    try:
        handle = await start_job(temporal_client, settings, CHAOS)
        await wait_for_step(handle, 40)
        at_kill = await wait_for_checkpoint(handle)
        first.kill9()
        second = start_gpu(settings, logs_dir, name="gpu-2")
        state = await handle.result()
        assert state.status == VideoStatus.COMPLETED and state.result is not None
        assert state.result.attempt >= 2
        # It resumed from a checkpoint at least as new as the one known when the worker died.
        assert state.result.resumed_from_step >= at_kill.checkpoint_step > 0
        assert store_of(settings).get(state.result.video_key) == reference
        assert job_keys(settings, state.job_id) == result_keys_of(state)
    finally:
        for proc in (second, first, orchestration):
            if proc is not None:
                proc.stop()


async def test_sigterm_preemption_checkpoints_at_once_and_the_next_attempt_resumes_there(
    temporal_client: Client, settings: Settings, logs_dir: Path
) -> None:
    reference = reference_video(CHAOS)
    orchestration = start_orchestration(settings, logs_dir)
    workers = [start_gpu(settings, logs_dir, name=f"gpu-{n}") for n in (1, 2)]
    try:
        # A heartbeat timeout far longer than the test may wait: only the Preempted failure
        # (not a timeout) can hand the job over in time.
        handle = await start_job(temporal_client, settings, CHAOS, heartbeat_timeout=600)
        await wait_for_step(handle, 30)
        preempted = await busy_worker(workers)
        progress, _attempt, _started = await pending_progress(handle)
        assert progress is not None
        step_before_notice = progress.step
        preempted.signal(signal.SIGTERM)
        assert preempted.proc is not None
        # The worker checkpoints, hands the job back and exits cleanly.
        assert preempted.proc.wait(timeout=30) == 0

        state = await asyncio.wait_for(handle.result(), 120)
        assert state.status == VideoStatus.COMPLETED and state.result is not None
        assert state.result.attempt == 2
        assert state.result.resumed_from_step >= step_before_notice
        assert store_of(settings).get(state.result.video_key) == reference
    finally:
        for proc in (*workers, orchestration):
            proc.stop()


async def test_stopped_worker_past_heartbeat_timeout_changes_nothing_and_stops(
    temporal_client: Client, settings: Settings, logs_dir: Path
) -> None:
    reference = reference_video(CHAOS)
    orchestration = start_orchestration(settings, logs_dir)
    workers = [start_gpu(settings, logs_dir, name=f"gpu-{n}") for n in (1, 2)]
    try:
        handle = await start_job(temporal_client, settings, CHAOS)
        await wait_for_step(handle, 30)
        await wait_for_checkpoint(handle)
        stale = await busy_worker(workers)
        stale.signal(signal.SIGSTOP)

        async def taken_over() -> bool:
            progress, attempt, _started = await pending_progress(handle)
            return attempt >= 2 and progress is not None and progress.attempt >= 2

        await wait_for(taken_over, 60, "another worker to take the job over")
        stale.signal(signal.SIGCONT)
        # The stale attempt learns from its next heartbeat that the lease is gone, and stops.
        await wait_for(
            lambda: asyncio.sleep(0, metric(stale, "leasehold_gpu_generation_active") == 0.0),
            15,
            "the stale worker to stop",
        )
        assert metric(stale, "leasehold_gpu_generations_total", 'outcome="lease_lost"') == 1.0
        steps = metric(stale, "leasehold_gpu_steps_total")

        state = await handle.result()
        assert state.status == VideoStatus.COMPLETED and state.result is not None
        assert state.result.attempt >= 2
        assert "/attempt-1/" not in state.result.video_key
        assert store_of(settings).get(state.result.video_key) == reference
        # Nothing of the stale attempt survives, and it did no more work after it stopped.
        assert job_keys(settings, state.job_id) == result_keys_of(state)
        assert metric(stale, "leasehold_gpu_steps_total") == steps
        assert stale.alive()
    finally:
        for proc in (*workers, orchestration):
            proc.stop()


async def test_temporal_server_kill9_and_restart_mid_job_loses_nothing(
    settings: Settings, logs_dir: Path, tmp_path: Path
) -> None:
    reference = reference_video(CHAOS)
    port = free_port()
    argv = dev_server_command(find_temporal_binary(), tmp_path / "temporal.db", port, None, sa.ALL)
    own = settings.model_copy(update={"temporal_address": f"127.0.0.1:{port}"})

    def start_server() -> ManagedProcess:
        return ManagedProcess("temporal", argv, process_env(own), logs_dir / "temporal.log").start()

    async def connected() -> Client:
        clients: list[Client] = []

        async def ready() -> bool:
            try:
                clients.append(await connect(own))
                return True
            except RuntimeError:
                return False

        await wait_for(ready, 60, "the Temporal server", interval=0.5)
        return clients[0]

    server = start_server()
    orchestration: ManagedProcess | None = None
    gpu: ManagedProcess | None = None
    try:
        client = await connected()
        orchestration = start_orchestration(own, logs_dir)
        gpu = start_gpu(own, logs_dir)
        handle = await start_job(client, own, CHAOS)
        await wait_for_step(handle, 40)
        await wait_for_checkpoint(handle)
        server.kill9()
        server = start_server()
        client = await connected()
        state = await asyncio.wait_for(client.get_workflow_handle_for(VideoJobWorkflow.run, handle.id).result(), 180)
        assert state.status == VideoStatus.COMPLETED and state.result is not None
        assert store_of(own).get(state.result.video_key) == reference
        assert gpu.alive() and orchestration.alive()
    finally:
        for proc in (gpu, orchestration):
            if proc is not None:
                proc.stop()
        server.stop()
