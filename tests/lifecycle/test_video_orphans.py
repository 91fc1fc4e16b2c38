"""Orphan sweeps: what closed jobs left in the store goes; nothing a live job points at does."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import sessionmaker
from temporalio.testing import ActivityEnvironment

from activities.video.lifecycle import VideoLifecycleActivities
from leasehold.storage import LocalObjectStore
from tests.lifecycle.conftest import add_video_job, video_result
from workflows.lifecycle.types import BatchResult, LifecycleBatch, LifecycleInput

GRACE = timedelta(hours=1)


def sweep(store: LocalObjectStore, db: sessionmaker, batch_size: int = 10, cursor: str | None = None) -> BatchResult:
    inp = LifecycleInput(batch_size=batch_size, grace_seconds=GRACE.total_seconds(), window_seconds=2 * 86400)
    activities = VideoLifecycleActivities(store, db)
    return ActivityEnvironment().run(activities.sweep_video_orphans, LifecycleBatch(input=inp, cursor=cursor))


def test_orphans_of_closed_jobs_go_and_results_and_live_jobs_stay(store: LocalObjectStore, db: sessionmaker) -> None:
    # A completed job: attempt 1 lost its lease but uploaded late; attempt 2 won.
    won = video_result("vid_done", attempt=2)
    for key in (*won.values(),):
        if isinstance(key, str):
            store.put(key, b"result")
    store.put("videos/vid_done/attempt-1/video.mp4", b"stale attempt")
    store.put("videos/vid_done/attempt-2/checkpoint-000100.pt", b"checkpoint")
    add_video_job(
        db, "vid_done", "completed", completed_ago=timedelta(hours=3), expires_in=timedelta(days=6), result=won
    )
    # A failed job's checkpoints.
    store.put("videos/vid_failed/attempt-3/checkpoint-000050.pt", b"checkpoint")
    add_video_job(db, "vid_failed", "failed", completed_ago=timedelta(hours=5))
    # A live job: its checkpoints are what its next attempt resumes from.
    store.put("videos/vid_live/attempt-1/checkpoint-000010.pt", b"checkpoint")
    store.put("videos/vid_live/attempt-2/checkpoint-000020.pt", b"checkpoint")
    add_video_job(db, "vid_live", "in_progress")
    # Closed a moment ago: a stale attempt may still be writing; the grace period waits for it.
    store.put("videos/vid_recent/attempt-1/checkpoint-000010.pt", b"checkpoint")
    add_video_job(db, "vid_recent", "cancelled", completed_ago=timedelta(minutes=5))
    # No row at all (a job the read model does not know): never touched.
    store.put("videos/vid_unknown/attempt-1/checkpoint-000010.pt", b"checkpoint")

    result = sweep(store, db)
    assert result.done and result.processed == 2 and result.deleted_objects == 3
    assert store.list("videos/vid_done/") == sorted([won["video_key"], won["thumbnail_key"]])
    assert store.list("videos/vid_failed/") == []
    assert len(store.list("videos/vid_live/")) == 2
    assert len(store.list("videos/vid_recent/")) == 1
    assert len(store.list("videos/vid_unknown/")) == 1

    # Twice is once.
    again = sweep(store, db)
    assert again.deleted_objects == 0
    assert store.list("videos/vid_done/") == sorted([won["video_key"], won["thumbnail_key"]])


def test_sweep_pages_through_jobs_by_cursor(store: LocalObjectStore, db: sessionmaker) -> None:
    for i in range(5):
        store.put(f"videos/vid_p{i}/attempt-1/checkpoint-000001.pt", b"checkpoint")
        add_video_job(db, f"vid_p{i}", "failed", completed_ago=timedelta(hours=2, minutes=i))
    first = sweep(store, db, batch_size=2)
    assert (first.processed, first.done) == (2, False) and first.cursor
    second = sweep(store, db, batch_size=2, cursor=first.cursor)
    third = sweep(store, db, batch_size=2, cursor=second.cursor)
    assert (second.processed, third.processed, third.done) == (2, 1, True)
    assert all(store.list(f"videos/vid_p{i}/") == [] for i in range(5))
