"""``leasehold readmodel rebuild`` against a real dev server, on SQLite and Postgres: an open video
job, CI push and CI run whose rows were lost get them back from the engine, and a newer row is
never overwritten."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import delete, select, update
from sqlalchemy.orm import sessionmaker
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from clients.ci import start as ci_start
from leasehold.database import init_database
from leasehold.records.ci.runs import CIAttemptRecord, CIJobRecord, CIPushRecord, CIRunRecord
from leasehold.records.video.jobs import VideoJobRecord
from leasehold.settings import Settings
from testing.harness import REPO_ROOT, process_env
from tests.ci_core.conftest import engine_stack
from tests.conftest import sqlite_url
from tests.video_core.jobs import request, start_job, start_orchestration
from workflows.ci.ids import push_workflow_id
from workflows.ci.types.push import CIPushInput, PushContext, PushStatus
from workflows.video.job import VideoJobWorkflow
from workflows.video.types import VideoStatus

LIFECYCLE_VERSION = 2**62


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return sqlite_url(tmp_path) if request.param == "sqlite" else str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def deployment(settings: Settings, db_url: str) -> Settings:
    """The test's settings on one database, without lifecycle schedules (not under test here)."""
    return settings.model_copy(update={"database_url": db_url, "lifecycle_schedules": False})


def rebuild(settings: Settings) -> dict[str, dict[str, int]]:
    """Run the command as an operator would; its one line of output is the report."""
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "readmodel", "rebuild"],
        cwd=REPO_ROOT,
        env=process_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def job_row(factory: sessionmaker, job_id: str) -> VideoJobRecord | None:
    with factory() as session:
        return session.scalars(select(VideoJobRecord).where(VideoJobRecord.job_id == job_id)).one_or_none()


async def test_rebuild_restores_a_lost_row_of_an_open_job(
    temporal_client: Client, deployment: Settings, logs_dir: Path
) -> None:
    factory = init_database(deployment.resolved_database_url)
    orchestration = start_orchestration(deployment, logs_dir)
    try:
        # No GPU worker polls the model's queue: the job stays queued, its execution open.
        handle = await start_job(temporal_client, deployment, request())
        job_id = (await handle.query(VideoJobWorkflow.state)).job_id
        deadline = time.monotonic() + 60
        while job_row(factory, job_id) is None:
            assert time.monotonic() < deadline, f"the workflow never wrote its row:\n{orchestration.log_tail()}"
            await asyncio.sleep(0.2)
        # The row is lost (a restored backup, a write that never landed).
        with factory.begin() as session:
            session.execute(delete(VideoJobRecord).where(VideoJobRecord.job_id == job_id))
        assert job_row(factory, job_id) is None

        report = await asyncio.to_thread(rebuild, deployment)
        assert report["VideoJobWorkflow"] == {"seen": 1, "written": 1, "unchanged": 0, "failed": 0}
        row = job_row(factory, job_id)
        assert row is not None
        assert (row.tenant_id, row.user_id, row.model, row.status) == ("tenant-a", "user-a", "procedural-v1", "queued")
        assert row.state["status"] == VideoStatus.QUEUED.value and row.state["job_id"] == job_id
        history_length = (await handle.describe()).history_length
        assert 0 < row.version <= history_length

        # A row newer than anything the engine can say (the lifecycle's) is left alone.
        with factory.begin() as session:
            session.execute(
                update(VideoJobRecord)
                .where(VideoJobRecord.job_id == job_id)
                .values(version=LIFECYCLE_VERSION, status="expired")
            )
        report = await asyncio.to_thread(rebuild, deployment)
        assert report["VideoJobWorkflow"] == {"seen": 1, "written": 0, "unchanged": 1, "failed": 0}
        row = job_row(factory, job_id)
        assert row is not None and (row.version, row.status) == (LIFECYCLE_VERSION, "expired")
        await handle.cancel()
    finally:
        orchestration.stop()


def push_row(factory: sessionmaker, push_id: str) -> CIPushRecord | None:
    with factory() as session:
        return session.scalars(select(CIPushRecord).where(CIPushRecord.push_id == push_id)).one_or_none()


async def test_rebuild_restores_a_lost_row_of_an_open_push(
    temporal_client: Client, deployment: Settings, logs_dir: Path
) -> None:
    factory = init_database(deployment.resolved_database_url)
    orchestration = start_orchestration(deployment, logs_dir)
    try:
        # No CI worker serves the control queue: the push stays "listing", its execution open.
        sha = uuid.uuid4().hex + "00c0ffee"  # a commit of its own: push ids are not per deployment
        context = PushContext(
            tenant_id="tenant-r",
            repo_id="repo-rebuild",
            repo_full_name="acme/rebuild",
            clone_url="https://git.example.com/acme/rebuild.git",
            commit_sha=sha,
            ref="refs/heads/main",
            queue_prefix=deployment.queue_prefix,
        )
        push = CIPushInput(push=context, received_at=datetime.now(UTC))
        push_id = await ci_start.start_push(temporal_client, push)
        deadline = time.monotonic() + 60
        while push_row(factory, push_id) is None:
            assert time.monotonic() < deadline, f"the push never wrote its row:\n{orchestration.log_tail()}"
            await asyncio.sleep(0.2)
        written = push_row(factory, push_id)
        assert written is not None
        with factory.begin() as session:
            session.execute(delete(CIPushRecord).where(CIPushRecord.push_id == push_id))

        report = await asyncio.to_thread(rebuild, deployment)
        assert report["CIPushWorkflow"] == {"seen": 1, "written": 1, "unchanged": 0, "failed": 0}
        row = push_row(factory, push_id)
        assert row is not None
        # Tenant, repository and commit come from the push's start input, not its state.
        assert (row.tenant_id, row.repo_id, row.commit_sha, row.ref) == ("tenant-r", "repo-rebuild", sha, context.ref)
        assert row.status == PushStatus.LISTING.value and row.state["push_id"] == push_id
        # The rebuilt version orders with the workflow's own: the same execution start in the high
        # bits (describe's start time is the workflow's), a history at least as long below.
        assert row.version >> 20 == written.version >> 20 and row.version >= written.version

        report = await asyncio.to_thread(rebuild, deployment)  # again: the row is already at this version
        assert report["CIPushWorkflow"] == {"seen": 1, "written": 0, "unchanged": 1, "failed": 0}
        await temporal_client.get_workflow_handle(push_workflow_id(push_id)).terminate("test over")
    finally:
        orchestration.stop()


WAITS_FOREVER = """
on: push
jobs:
  build:
    runs-on: nobody-serves-this-label
    steps:
      - run: echo never
"""


async def test_rebuild_restores_a_lost_run_with_its_jobs(
    temporal_env: WorkflowEnvironment, db_url: str, tmp_path: Path
) -> None:
    # A CI worker lists the push; the run's job asks for a label no worker serves, so it stays open.
    with engine_stack(temporal_env, tmp_path, database_url=db_url, lifecycle_schedules=False) as stack:
        factory = init_database(db_url)
        repo = stack.repo("rebuild")
        sha = repo.commit({".github/workflows/wait.yml": WAITS_FOREVER, "README.md": "x"})
        pushed = await stack.push(repo, sha)
        [ref] = pushed.runs
        run = await stack.wait_run(ref.run_id, until=lambda state: state.jobs and state.jobs[0].status == "queued")
        deadline = time.monotonic() + 60
        while (found := get_run_row(factory, ref.run_id)) is None or found.status != run.status.value:
            assert time.monotonic() < deadline, "the run never wrote its row"
            await asyncio.sleep(0.2)
        with factory.begin() as session:
            for table in (CIAttemptRecord, CIJobRecord, CIRunRecord):
                session.execute(delete(table).where(table.run_id == ref.run_id))

        report = await asyncio.to_thread(rebuild, stack.settings)
        assert report["CIRunWorkflow"]["written"] == 1 and report["CIRunWorkflow"]["failed"] == 0
        row = get_run_row(factory, ref.run_id)
        assert row is not None
        assert (row.tenant_id, row.repo_id, row.commit_sha, row.workflow_path) == (
            "tenant-a",
            repo.repo_id,
            sha,
            ".github/workflows/wait.yml",
        )
        assert row.status == run.status.value and row.state["run_id"] == ref.run_id
        with factory() as session:
            jobs = session.scalars(select(CIJobRecord).where(CIJobRecord.run_id == ref.run_id)).all()
        assert [(j.name, j.status, j.tenant_id) for j in jobs] == [("build", "queued", "tenant-a")]
        await stack.client.get_workflow_handle(ref.workflow_id).terminate("test over")


def get_run_row(factory: sessionmaker, run_id: str) -> CIRunRecord | None:
    with factory() as session:
        return session.scalars(select(CIRunRecord).where(CIRunRecord.run_id == run_id)).one_or_none()
