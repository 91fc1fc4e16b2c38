"""Video jobs below the API: real dev server, real GPU and orchestration worker processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import CancelledError

from leasehold.settings import Settings
from tests.video_core.jobs import (
    job_keys,
    metric,
    pending_progress,
    probe_mp4,
    request,
    result_keys_of,
    start_gpu,
    start_job,
    start_orchestration,
    store_of,
    wait_for,
    wait_for_step,
)
from workflows import search_attributes as sa
from workflows.video.job import VideoJobWorkflow
from workflows.video.types import VideoErrorType, VideoStatus


async def test_bad_job_fails_then_a_job_completes_as_h264_of_requested_size(
    temporal_client: Client, settings: Settings, logs_dir: Path
) -> None:
    orchestration = start_orchestration(settings, logs_dir)
    gpu = start_gpu(settings, logs_dir)
    try:
        bad = await start_job(temporal_client, settings, request(width=100, height=100))
        failed = await bad.result()
        assert failed.status == VideoStatus.FAILED
        assert failed.error_code == VideoErrorType.INVALID_REQUEST and failed.error_message
        assert gpu.alive()

        handle = await start_job(temporal_client, settings, request(seconds=3, width=320, height=180, steps=10))
        state = await handle.result()
        assert state.status == VideoStatus.COMPLETED
        assert state.result is not None and state.result.attempt == 1
        store = store_of(settings)
        assert probe_mp4(store.get(state.result.video_key)) == ("h264", 320, 180, 24)
        assert store.get(state.result.thumbnail_key)[:4] == b"RIFF"
        # Only the final assets remain: checkpoints are gone.
        assert job_keys(settings, state.job_id) == result_keys_of(state)
        assert await handle.query(VideoJobWorkflow.state) == state
        described = await handle.describe()
        attributes = {k.name: v for k, v in ((p.key, p.value) for p in described.typed_search_attributes)}
        assert attributes["JobState"] == "completed" and attributes["ModelVersion"] == "procedural-v1"
        assert attributes["TenantId"] == "tenant-a" and attributes["Tier"] == "paid"
    finally:
        gpu.stop()
        orchestration.stop()


async def test_cancel_of_a_queued_job_is_immediate(temporal_client: Client, settings: Settings, logs_dir: Path) -> None:
    # No GPU worker: the job can only wait in the queue.
    orchestration = start_orchestration(settings, logs_dir)
    try:
        handle = await start_job(temporal_client, settings, request())
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as raised:
            await handle.result()
        assert isinstance(raised.value.cause, CancelledError)
        state = await handle.query(VideoJobWorkflow.state)
        assert state.status == VideoStatus.CANCELLED and state.result is None
    finally:
        orchestration.stop()


async def test_cancel_of_a_running_job_stops_the_gpu_and_deletes_checkpoints(
    temporal_client: Client, settings: Settings, logs_dir: Path
) -> None:
    orchestration = start_orchestration(settings, logs_dir)
    gpu = start_gpu(settings, logs_dir)
    try:
        handle = await start_job(temporal_client, settings, request(seconds=4, steps=1000))
        job_id = handle.id.removeprefix("video-")

        async def checkpointed() -> bool:
            return any(k.endswith(".json") for k in job_keys(settings, job_id))

        await wait_for_step(handle, 20)
        # The worker's generation_started signal mirrors in_progress for listings and the Web UI.
        running = await handle.query(VideoJobWorkflow.state)
        assert (running.status, running.attempts_started) == (VideoStatus.IN_PROGRESS, 1)
        assert (await handle.describe()).typed_search_attributes.get(sa.JOB_STATE) == "in_progress"
        await wait_for(checkpointed, 30, "a checkpoint")
        await handle.cancel()
        # The bound: the GPU stops within 10 s of the cancel.
        await wait_for(
            lambda: asyncio.sleep(0, metric(gpu, "leasehold_gpu_generation_active") == 0.0), 10, "the GPU to stop"
        )
        with pytest.raises(WorkflowFailureError) as raised:
            await handle.result()
        assert isinstance(raised.value.cause, CancelledError)
        assert metric(gpu, "leasehold_gpu_generations_total", 'outcome="cancelled"') == 1.0
        steps = metric(gpu, "leasehold_gpu_steps_total")
        await asyncio.sleep(1.0)
        assert metric(gpu, "leasehold_gpu_steps_total") == steps
        assert job_keys(settings, job_id) == []
        state = await handle.query(VideoJobWorkflow.state)
        assert state.status == VideoStatus.CANCELLED
        progress, _attempt, _started = await pending_progress(handle)
        assert progress is None
    finally:
        gpu.stop()
        orchestration.stop()
