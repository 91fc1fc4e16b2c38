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
from pathlib import Path
from typing import Any

import httpx
import pytest

from leasehold.database import init_database
from leasehold.devserver import free_port
from leasehold.records.api_keys import create_key
from leasehold.settings import Settings
from leasehold.testing.harness import ManagedProcess, start_api, start_worker, unique_prefix

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
class AdmissionStack:
    settings: Settings
    base_url: str
    logs: Path
    api: ManagedProcess
    gpus: list[ManagedProcess] = field(default_factory=list)
    others: list[ManagedProcess] = field(default_factory=list)

    def caller(self, tier: str = "paid", tenant_id: str | None = None, user_id: str | None = None) -> Caller:
        tenant_id = tenant_id or f"tenant-{secrets.token_hex(4)}"
        user_id = user_id or f"user-{secrets.token_hex(3)}"
        key = create_key(init_database(self.settings.resolved_database_url), tenant_id, user_id, tier)
        http = httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        return Caller(tenant_id, user_id, tier, http)

    def add_gpu(self) -> ManagedProcess:
        worker = start_worker(self.settings, "gpu", self.logs, "--model", MODEL, name=f"gpu-{len(self.gpus)}")
        self.gpus.append(worker)
        worker.wait_healthy(120)
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


def stack_settings(root: Path, temporal_address: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": root / "data",
        "temporal_address": temporal_address,
        "queue_prefix": unique_prefix(),
        "api_port": free_port(),
        "checkpoint_interval_seconds": 1.0,
        "video_heartbeat_timeout_seconds": 5.0,
        "video_capacity_refresh_seconds": 1.0,
        "video_paid_max_queued": PAID_CAP,
        "video_free_max_queued": FREE_CAP,
        "metrics_token": METRICS_TOKEN,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="package")
def admission_stack(temporal_env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdmissionStack]:  # type: ignore[no-untyped-def]
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="openai")
    root = tmp_path_factory.mktemp("video-admission")
    logs = root / "logs"
    logs.mkdir()
    settings = stack_settings(root, temporal_env.client.service_client.config.target_host)
    settings.data_dir.mkdir(parents=True)
    init_database(settings.resolved_database_url)
    api, base_url = start_api(settings, logs)
    stack = AdmissionStack(settings=settings, base_url=base_url, logs=logs, api=api)
    try:
        stack.others.append(start_worker(settings, "orchestration", logs))
        api.wait_healthy(60)
        for proc in stack.others:
            proc.wait_healthy(60)
        yield stack
    finally:
        for proc in [*stack.gpus, *stack.others, api]:
            proc.stop()
