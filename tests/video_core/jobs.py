"""Starting and inspecting video jobs directly through Temporal (no API), for video-core tests."""

from __future__ import annotations

import asyncio
import io
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import av
import httpx
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from leasehold.settings import Settings
from leasehold.storage import LocalObjectStore, open_store
from testing.harness import ManagedProcess, start_worker
from workflows.queues import orchestration_queue, video_queue
from workflows.video.job import VideoJobWorkflow
from workflows.video.types import GenerateProgress, VideoJobInput, VideoJobState, VideoRequest, job_object_prefix

MODEL = "procedural-v1"
# Short, so lease loss is detected within seconds in tests.
HEARTBEAT_TIMEOUT = 3.0


def new_job_id() -> str:
    return f"video_{uuid.uuid4().hex}"


def request(prompt: str = "a red balloon over a blue ocean", seed: int = 7, steps: int = 20, **kw: int) -> VideoRequest:
    return VideoRequest(
        prompt=prompt,
        model=MODEL,
        seconds=kw.get("seconds", 2),
        width=kw.get("width", 256),
        height=kw.get("height", 256),
        seed=seed,
        steps=steps,
    )


async def start_job(
    client: Client,
    settings: Settings,
    req: VideoRequest,
    job_id: str | None = None,
    heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
    **fields: Any,
) -> WorkflowHandle[VideoJobWorkflow, VideoJobState]:
    """Start a job of ``req``; ``fields`` replace the input's defaults (its queues, its tier)."""
    job_id = job_id or new_job_id()
    job = VideoJobInput(
        job_id=job_id,
        tenant_id="tenant-a",
        user_id="user-a",
        tier="paid",
        request=req,
        request_hash="test",
        created_at=datetime.now(UTC),
        generate_queue=video_queue(req.model, settings.queue_prefix),
        housekeeping_queue=orchestration_queue(settings.queue_prefix),
        heartbeat_timeout_seconds=heartbeat_timeout,
        checkpoint_interval_seconds=settings.checkpoint_interval_seconds,
    ).model_copy(update=fields)
    return await client.start_workflow(
        VideoJobWorkflow.run, job, id=f"video-{job_id}", task_queue=orchestration_queue(settings.queue_prefix)
    )


def start_gpu(settings: Settings, logs: Path, name: str = "gpu") -> ManagedProcess:
    return start_worker(settings, "gpu", logs, "--model", MODEL, name=name).wait_healthy(120)


def start_orchestration(settings: Settings, logs: Path) -> ManagedProcess:
    return start_worker(settings, "orchestration", logs).wait_healthy(60)


async def pending_progress(handle: WorkflowHandle) -> tuple[GenerateProgress | None, int, bool]:
    """(last heartbeat details, attempt, started) of the pending generation activity."""
    desc = await handle.describe()
    for pending in desc.raw_description.pending_activities:
        started = pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        progress = None
        if pending.heartbeat_details.payloads:
            [progress] = pydantic_data_converter.payload_converter.from_payloads(
                pending.heartbeat_details.payloads, [GenerateProgress]
            )
        return progress, pending.attempt, started
    return None, 0, False


async def wait_for(check: Callable[[], Awaitable[bool]], within: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {within}s waiting for {what}")


async def wait_for_step(handle: WorkflowHandle, step: int, within: float = 60.0) -> GenerateProgress:
    """Wait until the running attempt has heartbeated at least ``step``."""
    found: list[GenerateProgress] = []

    async def reached() -> bool:
        progress, _attempt, _started = await pending_progress(handle)
        if progress is not None and progress.step >= step:
            found.append(progress)
            return True
        return False

    await wait_for(reached, within, f"step {step}")
    return found[-1]


def store_of(settings: Settings) -> LocalObjectStore:
    store = open_store(settings)
    assert isinstance(store, LocalObjectStore)
    return store


def job_keys(settings: Settings, job_id: str) -> list[str]:
    return store_of(settings).list(job_object_prefix(job_id) + "/")


def result_keys_of(state: Any) -> list[str]:
    """The objects a completed job keeps: its video, thumbnail and spritesheet."""
    result = state.result
    return sorted(k for k in (result.video_key, result.thumbnail_key, result.spritesheet_key) if k)


def probe_mp4(data: bytes) -> tuple[str, int, int, int]:
    """(codec, width, height, decoded frame count) of an MP4."""
    with av.open(io.BytesIO(data), "r") as container:
        stream = container.streams.video[0]
        frames = len(list(container.decode(stream)))
        return stream.codec_context.name, stream.width, stream.height, frames


def metric(proc: ManagedProcess, name: str, labels: str = "") -> float:
    """One sample from a worker's /metrics (0 when absent)."""
    assert proc.health_url is not None
    text = httpx.get(proc.health_url.replace("/healthz", "/metrics"), timeout=5).text
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.split()[-1])
    return 0.0


async def busy_worker(workers: list[ManagedProcess], within: float = 60.0) -> ManagedProcess:
    """The one worker (of several polling the same queue) that is running a generation."""
    found: list[ManagedProcess] = []

    async def one_busy() -> bool:
        found[:] = [w for w in workers if metric(w, "leasehold_gpu_generation_active") == 1.0]
        return len(found) == 1

    await wait_for(one_busy, within, "a busy GPU worker")
    return found[0]
