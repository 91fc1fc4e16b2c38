"""The lifecycle workflows on a real dev server: batch after batch, bounded per tick."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from sqlalchemy.orm import sessionmaker
from temporalio.client import Client
from temporalio.worker import Worker

from activities.video.lifecycle import VideoLifecycleActivities
from leasehold.records.video.jobs import VideoJobRecord
from leasehold.storage import LocalObjectStore
from tests.lifecycle.conftest import add_video_job, video_result
from workflows.lifecycle.types import LifecycleInput
from workflows.lifecycle.video.workflows import VideoExpiryWorkflow, VideoOrphanSweepWorkflow


def statuses(db: sessionmaker) -> list[str]:
    with db() as session:
        return sorted(row.status for row in session.query(VideoJobRecord))


async def test_a_tick_stops_at_max_batches_and_the_next_one_finishes(
    temporal_client: Client, store: LocalObjectStore, db: sessionmaker
) -> None:
    for i in range(5):
        job = f"vid_wf{i}"
        result = video_result(job)
        store.put(result["video_key"], b"mp4")
        add_video_job(
            db, job, "completed", completed_ago=timedelta(days=8), expires_in=-timedelta(hours=i + 1), result=result
        )
    activities = VideoLifecycleActivities(store, db)
    queue = f"lifecycle-{uuid.uuid4().hex[:8]}"
    async with Worker(
        temporal_client,
        task_queue=queue,
        workflows=[VideoExpiryWorkflow, VideoOrphanSweepWorkflow],
        activities=[activities.expire_videos, activities.sweep_video_orphans],
        activity_executor=ThreadPoolExecutor(max_workers=2),
    ):
        inp = LifecycleInput(batch_size=2, max_batches=2)
        first = await temporal_client.execute_workflow(
            VideoExpiryWorkflow.run, inp, id=f"expiry-{uuid.uuid4().hex}", task_queue=queue
        )
        assert (first.batches, first.processed, first.done) == (2, 4, False)
        assert statuses(db).count("expired") == 4
        second = await temporal_client.execute_workflow(
            VideoExpiryWorkflow.run, inp, id=f"expiry-{uuid.uuid4().hex}", task_queue=queue
        )
        assert (second.batches, second.processed, second.done) == (1, 1, True)
        assert statuses(db) == ["expired"] * 5
        assert store.list("videos/") == []

        sweep = await temporal_client.execute_workflow(
            VideoOrphanSweepWorkflow.run,
            LifecycleInput(batch_size=2, grace_seconds=0, window_seconds=30 * 86400),
            id=f"orphans-{uuid.uuid4().hex}",
            task_queue=queue,
        )
        # Expired jobs are closed; nothing is left of them to sweep.
        assert sweep.done and sweep.deleted_objects == 0 and sweep.batches == 3
