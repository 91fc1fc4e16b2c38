"""``video_checkpoints=False``: the restart-from-zero baseline of the goodput benchmark.

A worker with checkpointing off stores no checkpoint (periodically or at the notice) and
never resumes, so a job it loses starts again at step 0; the video is still the same bytes.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.video.generation import VideoGenerationActivities
from leasehold.settings import Settings
from leasehold.storage import LocalObjectStore
from testing.harness import ManagedProcess
from tests.video_core.jobs import (
    job_keys,
    pending_progress,
    request,
    start_gpu,
    start_job,
    start_orchestration,
    store_of,
    wait_for_step,
)
from tests.video_core.reference import reference_video
from worker_gpu.encoding import H264Encoder
from worker_gpu.models.procedural import ProceduralVideoModel
from workflows.video.job import VideoJobWorkflow
from workflows.video.types import GenerateInput, GenerateProgress, VideoErrorType, VideoStatus

# About 8 s of CPU here: several 1 s checkpoint intervals before the kill, some work after it.
LONG = request(prompt="a grey heron in a reed bed", seed=5, seconds=1, width=180, height=320, steps=300)


def test_notice_with_checkpoints_off_stores_nothing(tmp_path: Path) -> None:
    model = ProceduralVideoModel(device="cpu", threads=1)
    model.load()
    store = LocalObjectStore(tmp_path, b"unit-test-key", "http://127.0.0.1:1")
    activities = VideoGenerationActivities(model, H264Encoder(), store, checkpoints=False)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=30))
    seen: list[GenerateProgress] = []

    def on_heartbeat(*details: object) -> None:
        progress = details[0]
        assert isinstance(progress, GenerateProgress)
        seen.append(progress.model_copy())
        if progress.step == 6:
            activities.notify_preemption()

    env.on_heartbeat = on_heartbeat
    small = request(seconds=1, width=180, height=320, steps=20)
    # Interval 0: a checkpointing worker would commit after every step.
    job = GenerateInput(job_id="video_off", request=small, object_prefix="videos/off", checkpoint_interval_seconds=0)
    with pytest.raises(ApplicationError) as raised:
        env.run(activities.generate_video, job)
    # Still handed back at once as Preempted, but with no checkpoint behind it.
    assert raised.value.type == VideoErrorType.PREEMPTED
    assert seen and seen[-1].step >= 6
    assert all(p.checkpoint_key is None for p in seen)
    assert store.list("videos/off/") == []


async def test_kill9_with_checkpoints_off_restarts_from_step_zero(
    temporal_client: Client, settings: Settings, logs_dir: Path
) -> None:
    settings = settings.model_copy(update={"video_checkpoints": False})
    reference = reference_video(LONG)
    orchestration = start_orchestration(settings, logs_dir)
    first = start_gpu(settings, logs_dir, name="gpu-1")
    second: ManagedProcess | None = None
    try:
        handle = await start_job(temporal_client, settings, LONG)
        before = await wait_for_step(handle, 1)
        # More than three checkpoint intervals (1 s in these settings) of work.
        await asyncio.sleep(3.5 * settings.checkpoint_interval_seconds)
        at_kill, attempt, started = await pending_progress(handle)
        assert started and attempt == 1, "the first attempt ended before the kill: make LONG longer"
        assert at_kill is not None and at_kill.step > before.step
        assert at_kill.checkpoint_key is None and at_kill.checkpoint_step == 0
        job_id = handle.id.removeprefix("video-")
        assert job_keys(settings, job_id) == []
        first.kill9()
        second = start_gpu(settings, logs_dir, name="gpu-2")
        state = await asyncio.wait_for(handle.result(), 120)
        assert state.status == VideoStatus.COMPLETED and state.result is not None
        assert state.result.attempt >= 2
        assert state.result.resumed_from_step == 0
        assert store_of(settings).get(state.result.video_key) == reference
        assert "checkpoint at step" not in (logs_dir / "gpu-1.log").read_text()
        assert "resumes from" not in (logs_dir / "gpu-2.log").read_text()
        assert (await handle.query(VideoJobWorkflow.state)).status == VideoStatus.COMPLETED
    finally:
        for proc in (second, first, orchestration):
            if proc is not None:
                proc.stop()
