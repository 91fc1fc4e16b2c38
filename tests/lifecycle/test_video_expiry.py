"""Video expiry: content of completed jobs past ``expires_at`` is deleted, the job is ``expired``."""

from __future__ import annotations

from datetime import timedelta
from typing import cast

from sqlalchemy import Table
from sqlalchemy.orm import sessionmaker
from temporalio.testing import ActivityEnvironment

from activities.video.lifecycle import VideoLifecycleActivities, delete_job_content
from leasehold.records.versioned import LIFECYCLE_VERSION, write_versioned
from leasehold.records.video.jobs import VideoJobRecord
from leasehold.storage import LocalObjectStore
from tests.lifecycle.conftest import add_video_job, video_result
from workflows.lifecycle.types import BatchResult, LifecycleBatch, LifecycleInput


def put_job_objects(store: LocalObjectStore, job_id: str) -> dict[str, str]:
    result = video_result(job_id)
    store.put(result["video_key"], b"mp4")
    store.put(result["thumbnail_key"], b"jpg")
    store.put(f"videos/{job_id}/previews/0001.jpg", b"preview")
    return result


def expire(store: LocalObjectStore, db: sessionmaker, batch_size: int = 10) -> BatchResult:
    batch = LifecycleBatch(input=LifecycleInput(batch_size=batch_size))
    return ActivityEnvironment().run(VideoLifecycleActivities(store, db).expire_videos, batch)


def row(db: sessionmaker, job_id: str) -> VideoJobRecord:
    with db() as session:
        found = session.get(VideoJobRecord, job_id)
    assert found is not None
    return found


def test_expiry_deletes_content_and_marks_the_job_expired(store: LocalObjectStore, db: sessionmaker) -> None:
    old = put_job_objects(store, "vid_old")
    add_video_job(
        db, "vid_old", "completed", completed_ago=timedelta(days=8), expires_in=-timedelta(days=1), result=old
    )
    fresh = put_job_objects(store, "vid_fresh")
    add_video_job(
        db, "vid_fresh", "completed", completed_ago=timedelta(hours=1), expires_in=timedelta(days=6), result=fresh
    )
    # Neighbours whose ids share the prefix text must not be caught by a prefix delete.
    store.put("videos/vid_old2/attempt-1/video.mp4", b"other job")

    result = expire(store, db)
    assert (result.processed, result.done) == (1, True)
    assert store.list("videos/vid_old/") == []
    assert store.list("videos/vid_fresh/") == sorted(
        [fresh["video_key"], fresh["thumbnail_key"], "videos/vid_fresh/previews/0001.jpg"]
    )
    assert store.exists("videos/vid_old2/attempt-1/video.mp4")
    expired = row(db, "vid_old")
    assert expired.status == "expired" and expired.state["status"] == "expired"
    assert expired.version == LIFECYCLE_VERSION
    assert row(db, "vid_fresh").status == "completed"

    # Twice is once: nothing left to do, nothing changes.
    again = expire(store, db)
    assert (again.processed, again.deleted_objects) == (0, 0)
    assert row(db, "vid_old").status == "expired"

    # A late snapshot from the engine (a whole row, as the projection writes it) cannot bring
    # the job back.
    late = {c.name: getattr(row(db, "vid_fresh"), c.name) for c in VideoJobRecord.__table__.columns}
    late.update(job_id="vid_old", status="completed", version=10_000)
    table = cast(Table, VideoJobRecord.__table__)
    with db.begin() as session:
        applied = write_versioned(session, table, {"job_id": "vid_old"}, late, 10_000)
    assert applied is False
    assert row(db, "vid_old").status == "expired"


def test_expiry_resumes_after_a_crash_between_deleting_and_marking(store: LocalObjectStore, db: sessionmaker) -> None:
    result = put_job_objects(store, "vid_crash")
    add_video_job(
        db, "vid_crash", "completed", completed_ago=timedelta(days=8), expires_in=-timedelta(hours=1), result=result
    )
    # The first tick deleted part of the content, then died before marking the row.
    store.delete(result["video_key"])
    assert row(db, "vid_crash").status == "completed"
    # ... or all of it.
    assert delete_job_content(store, "vid_crash", row(db, "vid_crash").state) >= 1
    assert row(db, "vid_crash").status == "completed"

    done = expire(store, db)
    assert done.processed == 1
    assert store.list("videos/vid_crash/") == []
    assert row(db, "vid_crash").status == "expired"


def test_only_completed_jobs_expire_in_bounded_batches(store: LocalObjectStore, db: sessionmaker) -> None:
    for i in range(5):
        job = f"vid_batch{i}"
        add_video_job(
            db,
            job,
            "completed",
            completed_ago=timedelta(days=9),
            expires_in=-timedelta(days=2),
            result=put_job_objects(store, job),
        )
    store.put("videos/vid_running/attempt-1/checkpoint-000010.pt", b"ckpt")
    add_video_job(db, "vid_running", "in_progress", expires_in=-timedelta(days=1))
    add_video_job(db, "vid_failed", "failed", completed_ago=timedelta(days=9), expires_in=-timedelta(days=2))

    first = expire(store, db, batch_size=3)
    assert (first.processed, first.done) == (3, False)
    second = expire(store, db, batch_size=3)
    assert (second.processed, second.done) == (2, True)
    assert all(row(db, f"vid_batch{i}").status == "expired" for i in range(5))
    assert row(db, "vid_running").status == "in_progress"
    assert row(db, "vid_failed").status == "failed"
    assert store.exists("videos/vid_running/attempt-1/checkpoint-000010.pt")
