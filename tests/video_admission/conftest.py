"""One admission stack for the package: the API, an orchestration worker and GPU workers as
real processes on the session's dev server, with a fast model configuration. Tests that need
the model unserved run first (file order); GPU workers join on need and tests isolate
themselves by user.
"""

from __future__ import annotations

import secrets
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from testing.harness import ManagedProcess
from testing.process_stack import ORCHESTRATION, ProcessStack, gpu_worker

MODEL = "procedural-v1"
SIZE = "180x320"
SECONDS = 1
# Test-sized jobs: a fast one takes about a second on one core; a slow one runs until cancelled.
FAST_STEPS = 4
SLOW_STEPS = 1000
PAID_CAP = 5
FREE_CAP = 3


@dataclass
class Caller:
    tenant_id: str
    user_id: str
    tier: str
    http: httpx.Client


@dataclass
class AdmissionStack(ProcessStack):
    gpus: list[ManagedProcess] = field(default_factory=list)

    def caller(self, tier: str = "paid", tenant_id: str | None = None, user_id: str | None = None) -> Caller:
        user_id = user_id or f"user-{secrets.token_hex(3)}"
        tenant_id, key = self.new_key(tenant_id, user_id, tier)
        return Caller(tenant_id, user_id, tier, self.http(key))

    def add_gpu(self) -> ManagedProcess:
        worker = self.add_worker(gpu_worker(MODEL, name=f"gpu-{len(self.gpus)}"))
        self.gpus.append(worker)
        return worker

    def capacity(self, caller: Caller) -> dict[str, Any]:
        response = caller.http.get("/v1/capacity")
        assert response.status_code == 200, response.text
        (model,) = [m for m in response.json()["data"] if m["model"] == MODEL]
        return model


def body(steps: int = FAST_STEPS, **fields: Any) -> dict[str, Any]:
    video = {"prompt": "a lighthouse at dusk", "model": MODEL, "seconds": str(SECONDS), "size": SIZE, "steps": steps}
    return {**video, **fields}


def create(caller: Caller, steps: int = FAST_STEPS, **fields: Any) -> dict[str, Any]:
    response = caller.http.post("/v1/videos", json=body(steps, **fields))
    assert response.status_code == 200, response.text
    return response.json()


def get(caller: Caller, video_id: str) -> dict[str, Any]:
    response = caller.http.get(f"/v1/videos/{video_id}")
    assert response.status_code == 200, response.text
    return response.json()


def wait_until(check: Any, timeout: float, what: str, interval: float = 0.25) -> Any:
    """Call ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not reached in {timeout}s (last: {last!r})")


def cancel_all(caller: Caller, ids: list[str]) -> None:
    for video_id in ids:
        caller.http.post(f"/v1/videos/{video_id}/cancel")


# Opens the API's /metrics (it serves none without a token).
METRICS_TOKEN = "admission-metrics-token"


@pytest.fixture(scope="package")
def admission_stack(temporal_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdmissionStack]:
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="openai")
    with AdmissionStack.running(
        temporal_address,
        tmp_path_factory.mktemp("video-admission"),
        ORCHESTRATION,
        video_capacity_refresh_seconds=1.0,
        video_paid_max_queued=PAID_CAP,
        video_free_max_queued=FREE_CAP,
        metrics_token=METRICS_TOKEN,
    ) as stack:
        yield stack
