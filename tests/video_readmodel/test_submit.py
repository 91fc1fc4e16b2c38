"""The submit path against a real dev server, real HTTP (uvicorn) and a real database (SQLite
and Postgres): the per-user cap across two API instances, replays without an engine call, the
outbox starting what a submit could not, and a client that went away starting nothing.

No orchestration worker runs, so every job stays ``queued``: what is counted is the submit path.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker
from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    StartWorkflowInput,
    WorkflowHandle,
)
from temporalio.service import RPCError, RPCStatusCode

from api.app import create_app
from leasehold.database import init_database
from leasehold.records.api_keys import create_key
from leasehold.records.video.jobs import VideoJobRecord
from leasehold.settings import Settings
from testing.harness import serving as serve_app
from tests.conftest import sqlite_url
from workflows.video.ids import workflow_id

BODY = {"prompt": "a red kite over the sea", "model": "procedural-v1", "seconds": "1", "size": "180x320", "steps": 4}


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return sqlite_url(tmp_path)


@pytest.fixture
def submit_settings(settings: Settings, database_url: str) -> Settings:
    return settings.model_copy(
        update={
            "database_url": database_url,
            "video_outbox_delay_seconds": 0.5,
            "video_outbox_interval_seconds": 0.5,
            "video_paid_max_queued": 5,
        }
    )


class EngineCalls(Interceptor):
    """Counts the client calls the API makes; ``fail_starts`` makes starts fail as if Temporal were down."""

    def __init__(self, fail_starts: bool = False) -> None:
        self.calls: Counter[str] = Counter()
        self.fail_starts = fail_starts

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self)


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, owner: EngineCalls) -> None:
        super().__init__(next)
        self.owner = owner

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        self.owner.calls["start_workflow"] += 1
        if self.owner.fail_starts:
            raise RPCError("simulated: the engine is down", RPCStatusCode.UNAVAILABLE, b"")
        return await super().start_workflow(input)

    async def describe_workflow(self, input: DescribeWorkflowInput) -> Any:
        self.owner.calls["describe_workflow"] += 1
        return await super().describe_workflow(input)

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self.owner.calls["query_workflow"] += 1
        return await super().query_workflow(input)


@contextlib.asynccontextmanager
async def serving(app: FastAPI, calls: EngineCalls | None = None) -> AsyncIterator[str]:
    """Serve ``app`` over real HTTP in this event loop; requests use a client counted by ``calls``."""
    async with serve_app(app) as url:
        if calls is not None:
            # Requests take the client from app.state; the background tasks keep the original one.
            app.state.temporal = Client(**{**app.state.temporal.config(), "interceptors": [calls]})
        yield url


def _key(settings: Settings, tenant: str, user: str = "user", tier: str = "paid") -> str:
    return create_key(_database(settings.resolved_database_url), tenant, user, tier)


@functools.cache
def _database(url: str) -> sessionmaker:
    return init_database(url)


def _tenant(name: str) -> str:
    # The dev server outlives the test (and serves both databases): ids derived from keys must differ.
    return f"{name}-{secrets.token_hex(4)}"


def _jobs_of(settings: Settings, tenant: str) -> list[VideoJobRecord]:
    with _database(settings.resolved_database_url)() as session:
        return list(session.scalars(select(VideoJobRecord).where(VideoJobRecord.tenant_id == tenant)))


async def test_cap_holds_across_two_api_instances(submit_settings: Settings) -> None:
    tenant = _tenant("tenant-cap")
    key = _key(submit_settings, tenant)
    headers = {"Authorization": f"Bearer {key}"}
    async with serving(create_app(submit_settings)) as first, serving(create_app(submit_settings)) as second:
        async with httpx.AsyncClient(headers=headers, timeout=60) as http:
            # 16 submits at once, alternating between the two instances.
            answers = await asyncio.gather(
                *(http.post(f"{(first, second)[i % 2]}/v1/videos", json=BODY) for i in range(16))
            )
    statuses = Counter(a.status_code for a in answers)
    assert statuses == {200: 5, 429: 11}, [a.text for a in answers if a.status_code not in (200, 429)]
    refused = next(a.json() for a in answers if a.status_code == 429)
    assert refused["error"]["code"] == "too_many_queued"
    rows = _jobs_of(submit_settings, tenant)
    assert len(rows) == 5
    assert {r.status for r in rows} == {"queued"}
    assert all(r.engine_started for r in rows)
    accepted = {a.json()["id"] for a in answers if a.status_code == 200}
    assert accepted == {r.job_id for r in rows}


async def test_idempotent_replay_makes_no_engine_call(submit_settings: Settings, temporal_client: Client) -> None:
    tenant = _tenant("tenant-replay")
    headers = {"Authorization": f"Bearer {_key(submit_settings, tenant)}", "Idempotency-Key": "replay-1"}
    calls = EngineCalls()
    async with serving(create_app(submit_settings), calls) as url:
        async with httpx.AsyncClient(headers=headers, timeout=60) as http:
            created = await http.post(f"{url}/v1/videos", json=BODY)
            assert created.status_code == 200, created.text
            assert calls.calls == {"start_workflow": 1}
            replayed = await http.post(f"{url}/v1/videos", json=BODY)
            other_body = await http.post(f"{url}/v1/videos", json={**BODY, "prompt": "another video"})
    assert replayed.status_code == 200, replayed.text
    assert replayed.json()["id"] == created.json()["id"]
    assert replayed.json()["status"] == "queued"
    assert other_body.status_code == 409
    assert other_body.json()["error"]["code"] == "idempotency_key_reused"
    # The first submit started the workflow; neither later submit called the engine at all.
    assert calls.calls == {"start_workflow": 1}
    described = await temporal_client.get_workflow_handle(workflow_id(created.json()["id"])).describe()
    assert described.id == workflow_id(created.json()["id"])


async def test_outbox_starts_a_job_whose_start_failed(submit_settings: Settings, temporal_client: Client) -> None:
    tenant = _tenant("tenant-outbox")
    headers = {"Authorization": f"Bearer {_key(submit_settings, tenant)}"}
    calls = EngineCalls(fail_starts=True)
    async with serving(create_app(submit_settings), calls) as url:
        async with httpx.AsyncClient(headers=headers, timeout=60) as http:
            created = await http.post(f"{url}/v1/videos", json=BODY)
            # Acknowledged although the start failed: the row is committed.
            assert created.status_code == 200, created.text
            assert created.json()["status"] == "queued"
            assert calls.calls["start_workflow"] == 1
            job_id = created.json()["id"]
            handle = temporal_client.get_workflow_handle(workflow_id(job_id))
            # The outbox (the process's own client, which works) starts it.
            deadline = time.monotonic() + 30
            while True:
                (row,) = _jobs_of(submit_settings, tenant)
                if row.engine_started:
                    break
                assert time.monotonic() < deadline, "the outbox did not start the job"
                await asyncio.sleep(0.2)
    described = await handle.describe()
    assert described.id == workflow_id(job_id)
    assert row.status == "queued"


async def test_outbox_starts_a_row_left_by_a_crash(submit_settings: Settings, temporal_client: Client) -> None:
    """A row committed by a process that died before its start (inserted as the submit would)."""
    tenant = _tenant("tenant-crash")
    headers = {"Authorization": f"Bearer {_key(submit_settings, tenant)}", "Idempotency-Key": "crash-1"}
    calls = EngineCalls(fail_starts=True)
    app = create_app(submit_settings)
    async with serving(app, calls) as url:
        # The outbox of this instance is stopped: it plays the process that died.
        await _stop_outbox(app)
        async with httpx.AsyncClient(headers=headers, timeout=60) as http:
            created = await http.post(f"{url}/v1/videos", json=BODY)
        assert created.status_code == 200, created.text
        await asyncio.sleep(2 * submit_settings.video_outbox_delay_seconds + 0.5)
        (row,) = _jobs_of(submit_settings, tenant)
        assert not row.engine_started
    job_id = created.json()["id"]
    # Another instance comes up and its outbox starts the job.
    async with serving(create_app(submit_settings)):
        deadline = time.monotonic() + 30
        while not _jobs_of(submit_settings, tenant)[0].engine_started:
            assert time.monotonic() < deadline, "the outbox did not start the job"
            await asyncio.sleep(0.2)
    described = await temporal_client.get_workflow_handle(workflow_id(job_id)).describe()
    assert described.id == workflow_id(job_id)


async def _stop_outbox(app: FastAPI) -> None:
    from api.video.submit import stop_submit

    await stop_submit(app)


async def test_disconnected_client_starts_nothing(submit_settings: Settings) -> None:
    tenant = _tenant("tenant-gone")
    key = _key(submit_settings, tenant)
    calls = EngineCalls()
    app = create_app(submit_settings)
    async with serving(app, calls) as url:
        tracker = app.state.video_capacity
        ready = tracker.ready

        async def slow_ready() -> None:
            # Admission that takes a second: time for the client to hang up before the reservation.
            await asyncio.sleep(1.0)
            await ready()

        tracker.ready = slow_ready
        port = int(url.rsplit(":", 1)[1])
        payload = httpx.Request("POST", f"{url}/v1/videos", json=BODY).content
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            (
                f"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
            ).encode()
            + payload
        )
        await writer.drain()
        await asyncio.sleep(0.3)
        writer.close()
        await asyncio.sleep(2.0)
        assert _jobs_of(submit_settings, tenant) == []
        assert calls.calls["start_workflow"] == 0
        # The same request from a client that waits is accepted: the path itself works.
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            created = await http.post(f"{url}/v1/videos", json=BODY)
        assert created.status_code == 200, created.text
        assert calls.calls["start_workflow"] == 1
        assert len(_jobs_of(submit_settings, tenant)) == 1


async def test_overload_is_shed_with_retry_after(submit_settings: Settings) -> None:
    tenant = _tenant("tenant-shed")
    settings = submit_settings.model_copy(update={"video_submit_max_in_flight": 2})
    headers = {"Authorization": f"Bearer {_key(settings, tenant)}"}
    app = create_app(settings)
    async with serving(app) as url:
        tracker = app.state.video_capacity
        ready = tracker.ready

        async def slow_ready() -> None:
            await asyncio.sleep(1.0)  # submits pile up in flight
            await ready()

        tracker.ready = slow_ready
        async with httpx.AsyncClient(headers=headers, timeout=60) as http:
            answers = await asyncio.gather(*(http.post(f"{url}/v1/videos", json=BODY) for _ in range(5)))
    statuses = Counter(a.status_code for a in answers)
    assert statuses == {200: 2, 503: 3}, [a.text for a in answers]
    shed = next(a for a in answers if a.status_code == 503)
    assert shed.headers["Retry-After"] == "2"
    assert shed.json()["error"]["code"] == "overloaded"
    # Shed submits left nothing behind.
    assert len(_jobs_of(settings, tenant)) == 2
