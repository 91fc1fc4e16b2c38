"""A finished job holds no worker: its worker is free from the end of its generation.

* Not waiting: after its generation completes, a job's workflow cleans up and writes its
  outcome to the read model; until that write lands its row still reads ``in_progress``, while
  its execution has no generation pending (a retry would show one). Planned as waiting, such a
  job took the next free worker's turn in every plan made meanwhile, and each submit then was
  told a longer wait. Real dev server and a real SQLite read model; no worker polls, so the
  executions are exactly "started, nothing pending", which is what the tracker sees then.
* Not running until it closes: the tail after generation (clean-up, the outcome's read-model
  write, webhooks) is part of the caller's wait, but the worker takes its next job meanwhile.
  Holding the worker for the tail too put each job of a backlog a tail later per job ahead of
  it (pure computation).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert
from temporalio.client import Client

from api.video.capacity import CapacityTracker
from leasehold.database import init_database
from leasehold.records.video.jobs import VideoJobRecord
from leasehold.settings import Settings
from tests.conftest import sqlite_url
from video_policy.eta import JobCosts, JobShape, ModelSnapshot, QueuedJob, RunningJob
from video_policy.queue_plan import plan
from workflows.video.ids import workflow_id
from workflows.video.models import get_model
from workflows.video.types import VideoJobState, VideoRequest, VideoStatus

MODEL = "procedural-v1"


def _row(job_id: str, status: VideoStatus, created: datetime) -> dict[str, Any]:
    request = VideoRequest(prompt="p", model=MODEL, seconds=1, width=320, height=180, seed=1, steps=4)
    state = VideoJobState(
        job_id=job_id,
        tenant_id="tenant-a",
        user_id="user-a",
        tier="paid",
        request=request,
        request_hash="h",
        status=status,
        created_at=created,
    )
    generating = status is VideoStatus.IN_PROGRESS
    return {
        "job_id": job_id,
        "tenant_id": "tenant-a",
        "user_id": "user-a",
        "model": MODEL,
        "tier": "paid",
        "status": status.value,
        "version": 1,
        "request_hash": "h",
        "engine_started": True,
        "attempts_started": 1 if generating else 0,
        "created_at": created,
        "started_at": created + timedelta(seconds=1) if generating else None,
        "updated_at": created,
        "state": state.model_dump(mode="json"),
        "fairness_key": "paid/tenant-a/user-a",
        "fairness_weight": 4.0,
    }


async def test_a_job_whose_generation_ended_is_neither_waiting_nor_running(
    temporal_client: Client, settings: Settings, tmp_path: Path
) -> None:
    db = init_database(sqlite_url(tmp_path))
    tracker_settings = settings.model_copy(update={"database_url": sqlite_url(tmp_path)})
    suffix = time.time_ns() % 10**9
    finished, waiting = f"video_f{suffix}", f"video_w{suffix}"
    created = datetime.now(UTC) - timedelta(seconds=30)
    with db.begin() as session:
        session.execute(
            insert(VideoJobRecord),
            [
                # Generated, its outcome not written yet: the row still says generating.
                _row(finished, VideoStatus.IN_PROGRESS, created),
                # Accepted a moment later; its workflow has not scheduled generation yet.
                _row(waiting, VideoStatus.QUEUED, created + timedelta(seconds=1)),
            ],
        )
    for job_id in (finished, waiting):
        await temporal_client.start_workflow("VideoJobWorkflow", id=workflow_id(job_id), task_queue=f"nobody-{job_id}")
    try:
        tracker = CapacityTracker(temporal_client, tracker_settings, db)
        await tracker.refresh()
        snapshot = tracker.snapshots[MODEL]
        # Both were described (one generating, one next in line), and both have nothing
        # pending: the row tells them apart.
        assert [j.job_id for j in snapshot.queued] == [waiting]
        assert [r.job_id for r in snapshot.running] == []
        assert tracker.figures(MODEL).queued == 1
    finally:
        for job_id in (finished, waiting):
            await temporal_client.get_workflow_handle(workflow_id(job_id)).terminate(reason="test over")


def test_the_next_job_starts_when_generation_ends_not_when_the_job_closes() -> None:
    spec = get_model(MODEL)
    assert spec is not None
    shape = JobShape(steps=10, frames=8, width=180, height=320)
    costs = JobCosts(spec)
    costs.observe_step(shape, 1.0)
    # 10 s of steps, 2 s of decode and upload on the worker, then 3 s until the job closed.
    costs.observe_job(15.0, 10.0, tail_seconds=3.0)
    assert costs.run_seconds(shape) == pytest.approx(15.0)  # what a caller waits
    assert costs.worker_seconds(shape) == pytest.approx(12.0)  # what a worker is held
    running = RunningJob("r", "t", "u", "paid", shape, step=5, worker="w", alive=True, attempt=1)
    waiting = [QueuedJob(f"q{i}", "t", "u", "paid", float(i), shape, "paid/t/u", 4.0) for i in range(3)]
    snapshot = ModelSnapshot(model=MODEL, taken_at=100.0, queued=waiting, running=[running], workers_serving=1)
    planned = plan(snapshot, costs)
    assert planned is not None
    # 5 steps left (5 s) and the 2 s on the worker; then each job ahead holds it 12 s, not 15.
    assert [planned.starts[f"q{i}"][1] for i in range(3)] == pytest.approx([7.0, 19.0, 31.0])
