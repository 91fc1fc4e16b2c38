"""The lifecycle schedules: created when the orchestration worker starts, and their ticks work."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client, ScheduleActionStartWorkflow, ScheduleOverlapPolicy

from leasehold.database import init_database
from leasehold.records.video.jobs import VideoJobRecord
from leasehold.settings import Settings
from leasehold.storage import open_store
from orchestrator.lifecycle_schedules import (
    CI_LOG_COMPACTION,
    CI_RETENTION,
    VIDEO_EXPIRY,
    VIDEO_ORPHANS,
    ensure_lifecycle_schedules,
    schedule_id,
)
from testing.harness import start_worker
from tests.lifecycle.conftest import add_ci_run, add_video_job, attempt_row, video_result
from workflows.ci.ids import log_chunk_key
from workflows.queues import orchestration_queue

NAMES = (VIDEO_EXPIRY, VIDEO_ORPHANS, CI_LOG_COMPACTION, CI_RETENTION)


async def delete_schedules(client: Client, settings: Settings) -> None:
    # Schedules outlive the test on the shared dev server; ticks nobody polls for would pile up.
    for name in NAMES:
        try:
            await client.get_schedule_handle(schedule_id(settings, name)).delete()
        except Exception:
            pass


async def wait_for(check: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.25)
    raise AssertionError("timed out waiting for a lifecycle tick")


async def test_the_worker_creates_the_schedules_and_their_ticks_do_the_work(
    settings: Settings, temporal_client: Client, tmp_path: Path
) -> None:
    settings = settings.model_copy(
        update={"video_expiry_interval_seconds": 1.0, "ci_log_compaction_interval_seconds": 1.0}
    )
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = init_database(settings.resolved_database_url)
    store = open_store(settings)
    result = video_result("vid_sched")
    store.put(result["video_key"], b"mp4")
    store.put(result["thumbnail_key"], b"jpg")
    add_video_job(
        db, "vid_sched", "completed", completed_ago=timedelta(days=8), expires_in=-timedelta(hours=1), result=result
    )
    prefix = "ci/tenant-a/run_sched/build/attempt-1/"
    store.put(log_chunk_key(prefix, 0), b"hello\n")
    store.put(log_chunk_key(prefix, 1), b"world\n")
    summary = {"prefix": prefix, "next_seq": 2, "gaps": [], "bytes": 12, "ended": True}
    add_ci_run(db, "run_sched", attempts=[{"attempt": 1, "status": "success", "log": summary}])

    worker = start_worker(settings, "orchestration", tmp_path / "logs")
    try:
        worker.wait_healthy()
        for name in NAMES:
            described = await temporal_client.get_schedule_handle(schedule_id(settings, name)).describe()
            action = described.schedule.action
            assert isinstance(action, ScheduleActionStartWorkflow)
            assert action.task_queue == orchestration_queue(settings.queue_prefix)
            assert described.schedule.policy.overlap == ScheduleOverlapPolicy.SKIP
            assert len(described.schedule.spec.intervals) == 1
        expiry = await temporal_client.get_schedule_handle(schedule_id(settings, VIDEO_EXPIRY)).describe()
        assert expiry.schedule.spec.intervals[0].every == timedelta(seconds=1)
        assert isinstance(expiry.schedule.action, ScheduleActionStartWorkflow)
        assert expiry.schedule.action.workflow == "VideoExpiryWorkflow"

        def expired() -> bool:
            with db() as session:
                row = session.get(VideoJobRecord, "vid_sched")
            return row is not None and row.status == "expired"

        def compacted() -> bool:
            row = attempt_row(db, "run_sched", 1)
            return row is not None and row.compacted_at is not None

        await wait_for(expired)
        assert store.list("videos/vid_sched/") == []
        await wait_for(compacted)
        assert not store.exists(log_chunk_key(prefix, 0))
    finally:
        worker.stop()
        await delete_schedules(temporal_client, settings)


async def test_a_restart_updates_the_schedules_and_keeps_a_pause(settings: Settings, temporal_client: Client) -> None:
    try:
        ids = await ensure_lifecycle_schedules(temporal_client, settings)
        assert ids == [schedule_id(settings, name) for name in NAMES]
        assert all(i.startswith(settings.queue_prefix) for i in ids)
        handle = temporal_client.get_schedule_handle(schedule_id(settings, CI_RETENTION))
        await handle.pause(note="operator: investigating")

        changed = settings.model_copy(update={"ci_retention_interval_seconds": 120.0, "ci_log_retention_days": 30})
        assert await ensure_lifecycle_schedules(temporal_client, changed) == ids
        described = await handle.describe()
        assert described.schedule.spec.intervals[0].every == timedelta(seconds=120)
        assert described.schedule.state.paused and described.schedule.state.note == "operator: investigating"
        action = described.schedule.action
        assert isinstance(action, ScheduleActionStartWorkflow)
        (arg,) = action.args
        assert arg.data is not None and b'"retention_days":30' in arg.data.replace(b" ", b"")  # type: ignore[union-attr]
    finally:
        await delete_schedules(temporal_client, settings)
