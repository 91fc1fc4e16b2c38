"""One video stack for the package: the API and an orchestration worker as real processes
against the session's dev server; a GPU worker joins on first need (tests that need jobs to
stay queued run before it). Tests isolate themselves by user, never by restarting processes.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from testing.harness import ManagedProcess
from testing.process_stack import ORCHESTRATION, ProcessStack, gpu_worker

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
class VideoStack(ProcessStack):
    gpu: ManagedProcess | None = None

    def caller(self, tenant_id: str | None = None, user_id: str = "user") -> Caller:
        """A fresh API key (for a fresh tenant unless one is given)."""
        tenant_id, key = self.new_key(tenant_id, user_id)
        sdk = openai.OpenAI(base_url=f"{self.base_url}/v1", api_key=key, max_retries=0, timeout=60)
        return Caller(tenant_id, user_id, key, self.http(key), sdk)

    def anonymous(self) -> httpx.Client:
        return self.http()


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


def sse_events(response: httpx.Response, limit: int = 10_000, comments: bool = False) -> Iterator[dict[str, Any]]:
    """Parse a text/event-stream response into {id, event, data} dicts; with ``comments``, each
    comment line (the keep-alives) comes as ``{"comment": text}`` too, so that a reader can look
    at its clock while nothing happens."""
    event: dict[str, Any] = {}
    for count, line in enumerate(response.iter_lines()):
        if count > limit:
            raise AssertionError("event stream did not end")
        if comments and line.startswith(":"):
            yield {"comment": line[1:].strip()}
            continue
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
def video_stack(temporal_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VideoStack]:
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="openai")
    with VideoStack.running(temporal_address, tmp_path_factory.mktemp("video-api"), ORCHESTRATION) as stack:
        yield stack


@pytest.fixture(scope="package")
def gpu_stack(video_stack: VideoStack) -> VideoStack:
    """The stack plus a GPU worker for ``MODEL`` (started once, on first need)."""
    if video_stack.gpu is None:
        video_stack.gpu = video_stack.add_worker(gpu_worker(MODEL))
    return video_stack
