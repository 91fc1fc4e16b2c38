"""One stack for the package: the API, an orchestration worker and a GPU worker for the
procedural model as real processes against the session's dev server, webhooks allowed to a
loopback receiver. Tests isolate themselves by API key (a fresh tenant each), never by
restarting processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import replicate

from testing.process_stack import ORCHESTRATION, ProcessStack, gpu_worker
from tests.video_webhooks.stack import Receiver

MODEL = "procedural-v1"
OWNER = "leasehold"
# Small and short so generation takes a second or two on two CPU cores.
SIZE = "180x320"
FAST_STEPS = 4
# Enough steps that a job is still running when the test cancels it (it never finishes).
SLOW_STEPS = 1000


@dataclass
class Caller:
    """One API key: the official client, unchanged, and raw HTTP with the same key."""

    key: str
    client: replicate.Client
    http: httpx.Client


@dataclass
class ReplicateStack(ProcessStack):
    def caller(self, tenant_id: str | None = None) -> Caller:
        """A fresh API key (a fresh tenant unless one is given)."""
        key = self.new_key(tenant_id)[1]
        return Caller(key, replicate.Client(api_token=key, base_url=self.base_url), self.http(key))


@pytest.fixture(scope="package")
def stack(temporal_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicateStack]:
    with ReplicateStack.running(
        temporal_address,
        tmp_path_factory.mktemp("video-replicate"),
        ORCHESTRATION,
        gpu_worker(MODEL),
        video_webhook_schemes=["http", "https"],
        video_webhook_allow_cidrs=["127.0.0.1/32"],
        video_webhook_timeout_seconds=3.0,
        lifecycle_schedules=False,
    ) as running:
        yield running


@pytest.fixture(scope="package")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    try:
        yield server
    finally:
        server.close()
