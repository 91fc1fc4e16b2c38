"""What the end-to-end tests of the tiny models share: keys, the uninterrupted reference run,
and kill -9 of the worker running a job once it has checkpointed."""

from __future__ import annotations

import dataclasses
import secrets
import tempfile
from datetime import timedelta
from pathlib import Path

from temporalio.client import WorkflowHandle
from temporalio.testing import ActivityEnvironment

from activities.video.generation import VideoGenerationActivities
from leasehold.database import init_database
from leasehold.records.api_keys import create_key
from leasehold.storage import LocalObjectStore
from testing.harness import ManagedProcess
from tests.video_core.jobs import busy_worker, pending_progress, wait_for
from tests.video_models.conftest import Catalogue, ModelStack
from worker_gpu.encoding import H264Encoder
from worker_gpu.models import load_model
from workflows.video.types import GenerateInput, VideoRequest


def key_for(stack: ModelStack) -> str:
    return create_key(init_database(stack.settings.resolved_database_url), f"t-{secrets.token_hex(4)}", "u", "paid")


def reference_video(catalogue: Catalogue, request: VideoRequest, objects: dict[str, bytes] | None = None) -> bytes:
    """An uninterrupted run in this process, through the same activity and encoder; ``objects``
    are in its store first (an image-to-video job's image)."""
    model = load_model(catalogue.models[request.model], "cpu", 1)
    with tempfile.TemporaryDirectory(prefix="leasehold-reference-") as tmp:
        store = LocalObjectStore(Path(tmp), b"reference", "http://127.0.0.1:1")
        for key, data in (objects or {}).items():
            store.put(key, data)
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=60))
        result = env.run(
            VideoGenerationActivities(model, H264Encoder(), store).generate_video,
            GenerateInput(job_id="reference", request=request, object_prefix="ref", checkpoint_interval_seconds=1e9),
        )
        return store.get(result.video_key)


async def checkpointed(handle: WorkflowHandle, attempt: int, after_step: int = 0) -> bool:
    """Whether attempt ``attempt`` (or a later one) has checkpointed past ``after_step``."""
    progress, _attempt, _started = await pending_progress(handle)
    return progress is not None and progress.attempt >= attempt and progress.checkpoint_step > after_step


async def kill9_after_first_checkpoint(
    handle: WorkflowHandle, workers: list[ManagedProcess]
) -> tuple[int, ManagedProcess]:
    """kill -9 the worker running the job once it checkpointed; (that checkpoint's step, the
    worker left), which takes the job over after the heartbeat timeout."""
    await wait_for(lambda: checkpointed(handle, 1), 60, "a first checkpoint")
    victim = await busy_worker(workers)
    progress, _attempt, _started = await pending_progress(handle)
    assert progress is not None
    victim.kill9()
    return progress.checkpoint_step, next(worker for worker in workers if worker is not victim)
