"""Video jobs end to end below the API: real dev server, real GPU and orchestration worker processes."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from leasehold.settings import Settings
from tests.video_core.jobs import job_keys, probe_mp4, request, start_gpu, start_job, start_orchestration, store_of
from workflows.video_job import VideoJobWorkflow
from workflows.video_types import VideoStatus


async def test_job_completes_with_h264_of_requested_size(
    temporal_client: Client, settings: Settings, logs_dir: Path
) -> None:
    orchestration = start_orchestration(settings, logs_dir)
    gpu = start_gpu(settings, logs_dir)
    try:
        handle = await start_job(temporal_client, settings, request(seconds=3, width=320, height=180, steps=10))
        state = await handle.result()
        assert state.status == VideoStatus.COMPLETED
        assert state.result is not None
        store = store_of(settings)
        codec, width, height, frames = probe_mp4(store.get(state.result.video_key))
        assert (codec, width, height, frames) == ("h264", 320, 180, 24)
        assert store.get(state.result.thumbnail_key)[:4] == b"RIFF"
        # Only the final assets remain: checkpoints are gone.
        assert job_keys(settings, state.job_id) == sorted([state.result.video_key, state.result.thumbnail_key])
        queried = await handle.query(VideoJobWorkflow.state)
        assert queried.result == state.result
    finally:
        gpu.stop()
        orchestration.stop()
