"""A stack split into reserved and preemptible capacity: the API, an orchestration worker and
one CPU GPU worker of each capacity type, as real processes on the session's dev server."""

from __future__ import annotations

import asyncio
import secrets
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from testing.harness import ManagedProcess
from testing.process_stack import ORCHESTRATION, ProcessStack, gpu_worker
from workflows.video.ids import workflow_id

MODEL = "procedural-v1"
SMALL = {"prompt": "a lighthouse at dusk", "model": MODEL, "seconds": "1", "size": "180x320"}
# How long a job waits for a free worker of its first capacity type before it is handed over.
FALLBACK_SECONDS = 3.0


def wait_until(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not reached in {timeout}s (last: {last!r})")


@dataclass
class CapacityStack(ProcessStack):
    def caller(self, tier: str) -> httpx.Client:
        _tenant, key = self.new_key(user_id=f"user-{secrets.token_hex(3)}", tier=tier)
        return self.http(key)

    def gpu(self, capacity: str) -> ManagedProcess:
        (proc,) = [p for p in self.workers if p.name == f"gpu-{capacity}"]
        return proc

    def capacity(self, http: httpx.Client) -> dict[str, Any]:
        response = http.get("/v1/capacity")
        assert response.status_code == 200, response.text
        (entry,) = [m for m in response.json()["data"] if m["model"] == MODEL]
        return entry

    def generations(self, job_id: str) -> list[tuple[str, str, str]]:
        """Each generation activity of the job: (queue, identity of the worker that started
        it or "", how it ended), from the workflow's history."""
        return asyncio.run(_generations(self.settings.temporal_address, job_id))


async def _generations(address: str, job_id: str) -> list[tuple[str, str, str]]:
    client = await Client.connect(address)
    scheduled: dict[int, list[str]] = {}
    async for event in client.get_workflow_handle(workflow_id(job_id)).fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "generate_video":
                scheduled[event.event_id] = [attrs.task_queue.name, "", "open"]
        ends: dict[str, Any] = {
            "completed": event.activity_task_completed_event_attributes,
            "failed": event.activity_task_failed_event_attributes,
            "timed_out": event.activity_task_timed_out_event_attributes,
        }
        if event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            if started.scheduled_event_id in scheduled:
                scheduled[started.scheduled_event_id][1] = started.identity
        for kind, attrs in ends.items():
            if attrs.scheduled_event_id in scheduled and attrs.ByteSize():
                scheduled[attrs.scheduled_event_id][2] = kind
    return [(q, i, e) for q, i, e in scheduled.values()]


def create(http: httpx.Client, **fields: Any) -> dict[str, Any]:
    response = http.post("/v1/videos", json={**SMALL, "steps": 3, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def status(http: httpx.Client, video_id: str) -> dict[str, Any]:
    response = http.get(f"/v1/videos/{video_id}")
    assert response.status_code == 200, response.text
    return response.json()


def completed(http: httpx.Client, video_id: str) -> bool:
    video = status(http, video_id)
    assert video["status"] not in ("failed", "cancelled"), video
    return bool(video["status"] == "completed")


@pytest.fixture(scope="package")
def capacity_stack(temporal_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CapacityStack]:
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="openai")
    gpus = [gpu_worker(MODEL, "--capacity-type", c, name=f"gpu-{c}") for c in ("reserved", "preemptible")]
    with CapacityStack.running(
        temporal_address,
        tmp_path_factory.mktemp("fleet-capacity"),
        ORCHESTRATION,
        *gpus,
        video_capacity_refresh_seconds=1.0,
        video_capacity_types=True,
        video_capacity_fallback_seconds=FALLBACK_SECONDS,
    ) as stack:
        yield stack
