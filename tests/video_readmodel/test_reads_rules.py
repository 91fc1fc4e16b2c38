"""Whose word counts when the read model's row and the engine disagree (``api.video.views``),
over real HTTP against a real dev server, on SQLite and Postgres. The workflow runs on a worker
in this process and no GPU worker runs: the test sets the row and the execution to each
disagreement itself.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import sessionmaker
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from activities.video.projection import VideoProjectionActivities
from api.app import create_app
from api.video.live import LIVE_TTL_SECONDS
from leasehold.database import init_database
from leasehold.records.api_keys import create_key
from leasehold.records.versioned import write_versioned
from leasehold.records.video.jobs import VideoJobRecord
from leasehold.settings import Settings
from testing.harness import serving
from tests.conftest import sqlite_url
from tests.video_core.jobs import request, start_job
from workflows.queues import orchestration_queue
from workflows.video.job import VideoJobWorkflow
from workflows.video.types import VideoJobState, VideoStatus


@pytest.fixture(params=["sqlite", "postgres"])
def api_settings(request: pytest.FixtureRequest, settings: Settings, tmp_path: Path) -> Settings:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else sqlite_url(tmp_path)
    return settings.model_copy(update={"database_url": url})


def write_row(db: sessionmaker, state: VideoJobState, version: int) -> None:
    values: dict[str, Any] = {
        "tenant_id": state.tenant_id,
        "user_id": state.user_id,
        "model": state.request.model,
        "tier": state.tier,
        "status": state.status.value,
        "request_hash": state.request_hash,
        "engine_started": True,
        "created_at": state.created_at,
        "state": state.model_dump(mode="json"),
    }
    with db.begin() as session:
        assert write_versioned(session, VideoJobRecord.__table__, {"job_id": state.job_id}, values, version)  # type: ignore[arg-type]


def in_progress_row(job_id: str) -> VideoJobState:
    """The row of a job whose GPU worker signalled a start: in_progress, attempt 1."""
    return VideoJobState(
        job_id=job_id,
        tenant_id="tenant-a",
        user_id="user-a",
        tier="paid",
        request=request(),
        request_hash="test",
        status=VideoStatus.IN_PROGRESS,
        created_at=datetime.now(UTC),
        attempts_started=1,
    )


async def pending_generation_scheduled(handle: WorkflowHandle) -> None:
    deadline = time.monotonic() + 30
    while not (await handle.describe()).raw_description.pending_activities:
        assert time.monotonic() < deadline, "the generation was never scheduled"
        await asyncio.sleep(0.1)


async def test_the_row_answers_unless_the_engine_knows_better(api_settings: Settings, temporal_client: Client) -> None:
    db = init_database(api_settings.resolved_database_url)
    # ``start_job`` starts as tenant-a/user-a; each run has a database of its own.
    key = create_key(db, "tenant-a", "user-a", "paid")
    stranger = create_key(db, f"other-{secrets.token_hex(4)}", "user-a", "paid")
    # The workflow runs here; no GPU worker polls the model's queue, so generation waits.
    worker = Worker(
        temporal_client,
        task_queue=orchestration_queue(api_settings.queue_prefix),
        workflows=[VideoJobWorkflow],
        activities=[VideoProjectionActivities(db).project_video_job],
        activity_executor=ThreadPoolExecutor(max_workers=2),
    )
    async with (
        worker,
        serving(create_app(api_settings)) as url,
        httpx.AsyncClient(base_url=url, timeout=30, headers={"Authorization": f"Bearer {key}"}) as http,
    ):

        async def view(job_id: str) -> dict[str, Any]:
            response = await http.get(f"/v1/videos/{job_id}")
            assert response.status_code == 200, response.text
            return dict(response.json())

        handle = await start_job(temporal_client, api_settings, request())
        job_id = handle.id.removeprefix("video-")
        await pending_generation_scheduled(handle)
        # Newer than anything the workflow wrote so far (it wrote "queued" at its history length).
        state = in_progress_row(job_id)
        write_row(db, state, 1000)

        # Open, its attempt waiting for a worker (as after a preemption): the pending activity
        # decides (rule 3).
        assert (await view(job_id))["status"] == "queued"
        foreign = await http.get(f"/v1/videos/{job_id}", headers={"Authorization": f"Bearer {stranger}"})
        assert foreign.status_code == 404

        # Closed without writing its outcome (terminated): the close status decides (rule 2).
        await handle.terminate("operator")
        await asyncio.sleep(LIVE_TTL_SECONDS)
        assert (await view(job_id))["status"] == "failed"

        # Forgotten by the engine: the row answers (rule 4).
        await temporal_client.workflow_service.delete_workflow_execution(
            DeleteWorkflowExecutionRequest(
                namespace=temporal_client.namespace, workflow_execution=WorkflowExecution(workflow_id=handle.id)
            )
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                await handle.describe()
            except RPCError as exc:
                assert exc.status == RPCStatusCode.NOT_FOUND
                break
            assert time.monotonic() < deadline, "the execution was not deleted"
            await asyncio.sleep(0.25)
        await asyncio.sleep(LIVE_TTL_SECONDS)
        assert (await view(job_id))["status"] == "in_progress"

        # The outcome in the row wins over anything the engine says (rule 1).
        write_row(db, state.model_copy(update={"status": VideoStatus.CANCELLED}), 2000)
        assert (await view(job_id))["status"] == "cancelled"
        listed = (await http.get("/v1/videos")).json()["data"]
        assert [(v["id"], v["status"]) for v in listed] == [(job_id, "cancelled")]

        # Open with no generation pending: generation ended and the outcome is on its way (the
        # workflow is cleaning up): still in progress, at 99 %, never back to queued or 0 %.
        idle = api_settings.model_copy(update={"queue_prefix": api_settings.queue_prefix + "idle."})
        finishing = await start_job(temporal_client, idle, request())
        try:
            write_row(db, in_progress_row(finishing.id.removeprefix("video-")), 10)
            shown = await view(finishing.id.removeprefix("video-"))
            assert (shown["status"], shown["progress"]) == ("in_progress", 99)
        finally:
            await finishing.terminate("test over")
