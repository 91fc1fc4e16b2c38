"""One video stack for the package: the API and an orchestration worker as real processes
against the session's dev server; a GPU worker joins on first need (tests that need jobs to
stay queued run before it). Tests isolate themselves by user, never by restarting processes.
"""

from __future__ import annotations

import json
import secrets
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from leasehold.database import init_database
from leasehold.devserver import free_port
from leasehold.records.api_keys import create_key
from leasehold.settings import Settings
from leasehold.storage import ObjectStore, open_store
from leasehold.testing.harness import ManagedProcess, start_api, start_worker, unique_prefix

MODEL = "procedural-v1"
# Small and short so generation takes seconds on two CPU cores.
SIZE = "180x320"
SECONDS = 1
FAST_STEPS = 4
# Enough steps that a job is still running when the test cancels it (it never finishes).
SLOW_STEPS = 1000
# A job that runs a few seconds: long enough to be seen mid-way, short enough to wait for.
MEDIUM_STEPS = 150


@dataclass
class Caller:
    """One API key's view of the stack: raw HTTP and the official openai SDK."""

    tenant_id: str
    user_id: str
    key: str
    http: httpx.Client
    sdk: openai.OpenAI


@dataclass
class VideoStack:
    settings: Settings
    base_url: str
    logs: Path
    api: ManagedProcess
    workers: list[ManagedProcess] = field(default_factory=list)
    gpu: ManagedProcess | None = None

    def caller(self, tenant_id: str | None = None, user_id: str = "user") -> Caller:
        """A fresh API key (for a fresh tenant unless one is given)."""
        tenant_id = tenant_id or f"tenant-{secrets.token_hex(4)}"
        key = create_key(init_database(self.settings.resolved_database_url), tenant_id, user_id, "paid")
        http = httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        sdk = openai.OpenAI(base_url=f"{self.base_url}/v1", api_key=key, max_retries=0, timeout=60)
        return Caller(tenant_id, user_id, key, http, sdk)

    def anonymous(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=30)

    def store(self) -> ObjectStore:
        return open_store(self.settings)


def create(caller: Caller, steps: int = FAST_STEPS, **fields: Any) -> dict[str, Any]:
    """POST /v1/videos as JSON with test-sized defaults; asserts the job was accepted."""
    body = {"prompt": "a red kite over the sea", "model": MODEL, "seconds": str(SECONDS), "size": SIZE}
    body.update(fields)
    body["steps"] = steps
    response = caller.http.post("/v1/videos", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def wait_for(caller: Caller, video_id: str, done: Any, timeout: float = 90.0) -> dict[str, Any]:
    """Poll GET /v1/videos/{id} until ``done(video)``; fails with the last video seen."""
    deadline = time.monotonic() + timeout
    video: dict[str, Any] = {}
    while time.monotonic() < deadline:
        response = caller.http.get(f"/v1/videos/{video_id}")
        assert response.status_code == 200, response.text
        video = response.json()
        if done(video):
            return video
        time.sleep(0.25)
    raise AssertionError(f"condition not reached in {timeout}s; last: {video}")


def sse_events(response: httpx.Response, limit: int = 10_000) -> Iterator[dict[str, Any]]:
    """Parse a text/event-stream response into {id, event, data} dicts."""
    event: dict[str, Any] = {}
    for count, line in enumerate(response.iter_lines()):
        if count > limit:
            raise AssertionError("event stream did not end")
        if not line:
            if "data" in event:
                yield event
            event = {}
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            event["data"] = json.loads(value)
        elif name in ("id", "event"):
            event[name] = value


@pytest.fixture(scope="package")
def video_stack(temporal_env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VideoStack]:  # type: ignore[no-untyped-def]
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="openai")
    root = tmp_path_factory.mktemp("video-api")
    logs = root / "logs"
    logs.mkdir()
    settings = Settings(
        data_dir=root / "data",
        temporal_address=temporal_env.client.service_client.config.target_host,
        queue_prefix=unique_prefix(),
        api_port=free_port(),
        checkpoint_interval_seconds=1.0,
        video_heartbeat_timeout_seconds=5.0,
    )
    settings.data_dir.mkdir(parents=True)
    init_database(settings.resolved_database_url)
    api, base_url = start_api(settings, logs)
    stack = VideoStack(settings=settings, base_url=base_url, logs=logs, api=api)
    try:
        stack.workers.append(start_worker(settings, "orchestration", logs))
        api.wait_healthy(60)
        for worker in stack.workers:
            worker.wait_healthy(60)
        yield stack
    finally:
        for proc in [*stack.workers, api]:
            proc.stop()


@pytest.fixture(scope="package")
def gpu_stack(video_stack: VideoStack) -> VideoStack:
    """The stack plus a GPU worker for ``MODEL`` (started once, on first need)."""
    if video_stack.gpu is None:
        video_stack.gpu = start_worker(video_stack.settings, "gpu", video_stack.logs, "--model", MODEL)
        video_stack.workers.append(video_stack.gpu)
        video_stack.gpu.wait_healthy(120)
    return video_stack
