"""One classed stack for the package: the API, an orchestration worker and two CPU GPU workers
declaring different memory (``small`` and ``large``), as real processes on the session's dev server.

Class sizes follow the model's ``memory_bytes_per_frame_pixel``, so the jobs below land where
the test says whatever figure the catalogue holds: SMALL_JOB fits ``small``, BIG_JOB only
``large``, and LONG_JOB / WIDE_JOB no class at all.
"""

from __future__ import annotations

import asyncio
import secrets
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from leasehold.gpu_classes import GIB
from testing.harness import ManagedProcess
from testing.process_stack import ORCHESTRATION, ProcessStack, gpu_worker
from workflows.video.ids import workflow_id
from workflows.video.models import get_model

MODEL = "procedural-v1"
SPEC = get_model(MODEL)
assert SPEC is not None
FAST_STEPS = 3


def frame_pixels(size: str, seconds: int) -> int:
    width, height = (int(v) for v in size.split("x"))
    assert SPEC is not None
    return SPEC.frame_count(seconds) * width * height


# (size, seconds) of each job and the frame-pixels it costs.
SMALL_JOB = ("180x320", 1)  # 0.46 M frame-pixels
BIG_JOB = ("256x256", 2)  # 1.05 M
LONG_JOB = ("256x256", 3)  # 1.57 M: a shorter video of this size would fit -> "seconds"
WIDE_JOB = ("720x1280", 1)  # 7.4 M: too large even at the shortest length -> "size"
# Per frame-pixel bytes: the catalogue's figure (1 if unmeasured, so the sizes still order).
PER_PIXEL = SPEC.memory_bytes_per_frame_pixel or 1.0
SMALL_GIB = 0.75e6 * PER_PIXEL / GIB
LARGE_GIB = 1.3e6 * PER_PIXEL / GIB
METRICS_TOKEN = "classes-metrics-token"


@dataclass
class Caller:
    http: httpx.Client


@dataclass
class ClassStack(ProcessStack):
    def caller(self, tier: str = "paid") -> Caller:
        _tenant, key = self.new_key(user_id=f"user-{secrets.token_hex(3)}", tier=tier)
        return Caller(self.http(key))

    def gpu(self, gpu_class: str) -> ManagedProcess:
        """The GPU worker started for ``gpu_class`` (its memory covers that class and no larger)."""
        (proc,) = [p for p in self.workers if p.name == f"gpu-{gpu_class}"]
        return proc

    def capacity(self, caller: Caller) -> dict[str | None, dict[str, Any]]:
        response = caller.http.get("/v1/capacity")
        assert response.status_code == 200, response.text
        return {m["gpu_class"]: m for m in response.json()["data"] if m["model"] == MODEL}

    def generated_on(self, job_id: str) -> tuple[str, str]:
        """The task queue the job's generation was scheduled on, and the identity of the worker
        that ran it (from the workflow's history)."""
        return asyncio.run(_generated_on(self.settings.temporal_address, job_id))


async def _generated_on(address: str, job_id: str) -> tuple[str, str]:
    client = await Client.connect(address)
    queue = identity = ""
    scheduled = -1
    async for event in client.get_workflow_handle(workflow_id(job_id)).fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "generate_video":
                queue, scheduled = attrs.task_queue.name, event.event_id
        if event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            if started.scheduled_event_id == scheduled:
                identity = started.identity
    return queue, identity


def body(job: tuple[str, int], steps: int = FAST_STEPS, **fields: Any) -> dict[str, Any]:
    size, seconds = job
    video = {"prompt": "a lighthouse at dusk", "model": MODEL, "seconds": str(seconds), "size": size, "steps": steps}
    return {**video, **fields}


@pytest.fixture(scope="package")
def class_stack(temporal_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClassStack]:
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="openai")
    # The small worker has more than ``small`` but less than ``large``: it serves ``small``.
    memory = {"small": (SMALL_GIB + LARGE_GIB) / 2, "large": LARGE_GIB}
    gpus = [gpu_worker(MODEL, "--memory-gib", str(gib), name=f"gpu-{name}") for name, gib in memory.items()]
    with ClassStack.running(
        temporal_address,
        tmp_path_factory.mktemp("video-classes"),
        ORCHESTRATION,
        *gpus,
        video_capacity_refresh_seconds=1.0,
        video_gpu_classes={"small": SMALL_GIB, "large": LARGE_GIB},
        metrics_token=METRICS_TOKEN,
    ) as stack:
        yield stack
