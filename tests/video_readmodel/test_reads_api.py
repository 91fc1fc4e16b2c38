"""Video reads from the read model, end to end: real dev server, real orchestration and GPU worker
processes, the API over real HTTP (uvicorn in this process, so its engine calls can be counted),
on SQLite and on Postgres.

* The engine is no longer the record: a completed job whose execution was deleted from Temporal
  still answers GET, the listing, its content and its event stream, with no engine call; once
  the lifecycle expires it, it reads as ``expired`` and its content is 410.
* Live progress is bounded: many concurrent readers of one running job make at most one
  DescribeWorkflowExecution per second between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.orm import sessionmaker
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
)
from temporalio.service import RPCError, RPCStatusCode

from api.app import create_app
from api.video.live import LIVE_TTL_SECONDS, LiveProgress
from leasehold.database import init_database
from leasehold.records.api_keys import create_key
from leasehold.records.versioned import LIFECYCLE_VERSION, write_versioned
from leasehold.records.video.jobs import VideoJobRecord
from leasehold.settings import Settings
from leasehold.storage import open_store
from testing.harness import ManagedProcess, start_worker
from testing.harness import serving as serve_app
from tests.conftest import sqlite_url
from workflows.video.ids import workflow_id
from workflows.video.types import VideoJobState, VideoStatus

MODEL = "procedural-v1"
BODY = {"prompt": "a lighthouse at dusk", "model": MODEL, "seconds": "1", "size": "180x320"}
FAST_STEPS = 4
# Long enough to still be running while the test reads it (the test cancels it).
SLOW_STEPS = 1000
READERS = 50


class EngineCalls(Interceptor):
    """Counts the describes and queries the API's client makes."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self)


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, owner: EngineCalls) -> None:
        super().__init__(next)
        self.owner = owner

    async def describe_workflow(self, input: DescribeWorkflowInput) -> Any:
        self.owner.calls["describe_workflow"] += 1
        return await super().describe_workflow(input)

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self.owner.calls["query_workflow"] += 1
        return await super().query_workflow(input)


@dataclass
class ReadsStack:
    settings: Settings
    db: sessionmaker
    workers: list[ManagedProcess]

    def key(self, tenant: str) -> str:
        return create_key(self.db, tenant, "user", "paid")


@pytest.fixture(params=["sqlite", "postgres"])
def stack(request: pytest.FixtureRequest, settings: Settings, tmp_path: Path, logs_dir: Path) -> Iterator[ReadsStack]:
    """An orchestration and a GPU worker for this test's queues and database."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else sqlite_url(tmp_path)
    settings = settings.model_copy(update={"database_url": url, "video_heartbeat_timeout_seconds": 5.0})
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = init_database(url)
    workers = [
        start_worker(settings, "orchestration", logs_dir),
        start_worker(settings, "gpu", logs_dir, "--model", MODEL),
    ]
    try:
        for worker in workers:
            worker.wait_healthy(120)
        yield ReadsStack(settings, db, workers)
    finally:
        for worker in workers:
            worker.stop()


@contextlib.asynccontextmanager
async def serving(app: FastAPI, calls: EngineCalls) -> AsyncIterator[str]:
    """Serve ``app`` over real HTTP in this event loop; its reads use a client counted by ``calls``."""
    async with serve_app(app) as url:
        counted = Client(**{**app.state.temporal.config(), "interceptors": [calls]})
        app.state.temporal = counted
        app.state.video_live = LiveProgress(counted)
        yield url


async def wait_video(http: httpx.AsyncClient, video_id: str, done: Any, within: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + within
    video: dict[str, Any] = {}
    while time.monotonic() < deadline:
        response = await http.get(f"/v1/videos/{video_id}")
        assert response.status_code == 200, response.text
        video = response.json()
        if done(video):
            return video
        await asyncio.sleep(0.25)
    raise AssertionError(f"not reached in {within}s; last: {video}")


async def forget_execution(client: Client, video_id: str) -> None:
    """Delete the closed execution from Temporal, as retention would, and wait until it is gone."""
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=workflow_id(video_id))
        )
    )
    handle = client.get_workflow_handle(workflow_id(video_id))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            await handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return
            raise
        await asyncio.sleep(0.25)
    raise AssertionError("the execution was not deleted within 60 s")


def events(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")]


async def test_a_job_outlives_its_execution(stack: ReadsStack, temporal_client: Client) -> None:
    tenant = f"tenant-{secrets.token_hex(4)}"
    headers = {"Authorization": f"Bearer {stack.key(tenant)}"}
    stranger = {"Authorization": f"Bearer {stack.key(f'stranger-{secrets.token_hex(4)}')}"}
    calls = EngineCalls()
    async with serving(create_app(stack.settings), calls) as url:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
            created = await http.post("/v1/videos", json={**BODY, "steps": FAST_STEPS})
            assert created.status_code == 200, created.text
            video_id = created.json()["id"]
            done = await wait_video(http, video_id, lambda v: v["status"] in ("completed", "failed", "cancelled"))
            assert done["status"] == "completed", done
            before = (await http.get(f"/v1/videos/{video_id}/content")).content
            assert before[4:8] == b"ftyp"  # an MP4

            await forget_execution(temporal_client, video_id)
            calls.calls.clear()

            got = await http.get(f"/v1/videos/{video_id}")
            assert got.status_code == 200, got.text
            assert got.json() == done
            assert got.json()["progress"] == 100 and got.json()["expires_at"] > got.json()["completed_at"]
            listed = (await http.get("/v1/videos")).json()
            assert [(v["id"], v["status"]) for v in listed["data"]] == [(video_id, "completed")]
            content = await http.get(f"/v1/videos/{video_id}/content")
            assert content.status_code == 200 and content.content == before
            thumbnail = await http.get(f"/v1/videos/{video_id}/content", params={"variant": "thumbnail"})
            assert thumbnail.status_code == 200 and thumbnail.content[8:12] == b"WEBP"
            stream = await http.get(f"/v1/videos/{video_id}/events")
            assert [e["status"] for e in events(stream.text)] == ["completed"]
            # None of those reads asked the engine anything.
            assert calls.calls == {}, calls.calls

            # Still nobody else's: another tenant's key finds nothing.
            for path in (f"/v1/videos/{video_id}", f"/v1/videos/{video_id}/content"):
                assert (await http.get(path, headers=stranger)).status_code == 404
            assert (await http.get("/v1/videos", headers=stranger)).json()["data"] == []

            # The lifecycle expires it (deleting the objects, then marking the row, at its version).
            open_store(stack.settings).delete_prefix(f"videos/{video_id}/")
            state = VideoJobState.model_validate(await asyncio.to_thread(_row_state, stack.db, video_id))
            expired = state.model_copy(update={"status": VideoStatus.EXPIRED})
            with stack.db.begin() as session:
                assert write_versioned(
                    session,
                    VideoJobRecord.__table__,  # type: ignore[arg-type]
                    {"job_id": video_id},
                    {"status": "expired", "state": expired.model_dump(mode="json")},
                    LIFECYCLE_VERSION,
                )
            got = await http.get(f"/v1/videos/{video_id}")
            assert got.status_code == 200 and got.json()["status"] == "expired"
            gone = await http.get(f"/v1/videos/{video_id}/content")
            assert gone.status_code == 410, gone.text
            assert gone.json()["error"]["code"] == "video_expired"
            assert "Traceback" not in gone.text

            # Deleting it forgets it, though its row stays behind the tombstone.
            assert (await http.delete(f"/v1/videos/{video_id}")).status_code == 200
            assert (await http.get(f"/v1/videos/{video_id}")).status_code == 404
            assert (await http.get("/v1/videos")).json()["data"] == []


def _row_state(db: sessionmaker, video_id: str) -> dict[str, Any]:
    with db() as session:
        record = session.get(VideoJobRecord, video_id)
        assert record is not None
        return dict(record.state)


async def test_concurrent_readers_of_a_running_job_share_one_describe(stack: ReadsStack) -> None:
    headers = {"Authorization": f"Bearer {stack.key(f'tenant-{secrets.token_hex(4)}')}"}
    calls = EngineCalls()
    async with serving(create_app(stack.settings), calls) as url:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
            created = await http.post("/v1/videos", json={**BODY, "steps": SLOW_STEPS, "prompt": "a very long take"})
            assert created.status_code == 200, created.text
            video_id = created.json()["id"]
            try:
                await wait_video(http, video_id, lambda v: v["status"] == "in_progress" and v["progress"] > 0)
                await asyncio.sleep(LIVE_TTL_SECONDS)  # the cache entry of that last poll is stale now
                calls.calls.clear()
                started = time.monotonic()
                answers = await asyncio.gather(*(http.get(f"/v1/videos/{video_id}") for _ in range(READERS)))
                elapsed = time.monotonic() - started
                assert all(a.status_code == 200 for a in answers)
                # Progress exists only in the engine: every reader got it, through shared describes.
                assert all(a.json()["status"] == "in_progress" and a.json()["progress"] > 0 for a in answers)
                describes = calls.calls["describe_workflow"]
                assert 1 <= describes <= 1 + int(elapsed / LIVE_TTL_SECONDS), (describes, elapsed)
                assert calls.calls["query_workflow"] == 0
            finally:
                cancel = await http.post(f"/v1/videos/{video_id}/cancel")
                assert cancel.status_code == 200, cancel.text
            # The outcome reaches the row: the workflow writes it before it closes.
            cancelled = await wait_video(http, video_id, lambda v: v["status"] == "cancelled", within=30)
            assert cancelled["error"]["code"] == "cancelled"
