"""Writes killed half-way: a GPU worker process SIGKILLed inside a checkpoint write leaves the
store's temporary behind (no object, so no listing shows it); the orphan sweep removes it
once it is older than an hour, with everything else the closed job left, and a younger
temporary (a write that may still be running) stays.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

from sqlalchemy.orm import sessionmaker
from temporalio.testing import ActivityEnvironment

from activities.video.lifecycle import VideoLifecycleActivities
from leasehold.storage import INTERRUPTED_WRITE_AGE_SECONDS, LocalObjectStore, S3ObjectStore
from testing.harness import REPO_ROOT
from tests.lifecycle.conftest import add_video_job
from workflows.lifecycle.types import BatchResult, LifecycleBatch, LifecycleInput
from workflows.video.types import job_object_prefix

# A checkpoint as the generation activity commits them, large enough that the kill lands inside
# the write (the temporary exists from the first byte to the rename after fsync).
WRITER = """
import itertools, sys
from pathlib import Path
from activities.video.checkpoints import JobCheckpoints
from leasehold.storage import LocalObjectStore
store = LocalObjectStore(Path(sys.argv[1]), b"k" * 32, "http://127.0.0.1:1")
checkpoints = JobCheckpoints(store, sys.argv[2], 1)
data = b"\\x01" * (48 << 20)
for step in itertools.count(1):
    checkpoints.commit(step, 1_000_000, "fingerprint", data)
"""
KILL_TRIES = 10


def temporaries(directory: Path) -> list[Path]:
    return sorted(directory.glob(".tmp-*")) if directory.is_dir() else []


def kill_inside_a_write(store: LocalObjectStore, job_id: str) -> list[Path]:
    """Start a writer of checkpoints, SIGKILL it while a temporary exists; the temporaries left."""
    checkpoints_dir = store.root / job_object_prefix(job_id) / "attempt-1" / "checkpoints"
    for _ in range(KILL_TRIES):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(store.root), job_object_prefix(job_id)],
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 60
            while not temporaries(checkpoints_dir):
                assert writer.poll() is None, writer.stderr.read().decode() if writer.stderr else ""
                assert time.monotonic() < deadline, "the writer never started a checkpoint"
                time.sleep(0.001)
            writer.send_signal(signal.SIGKILL)
        finally:
            writer.kill()
            writer.wait(timeout=30)
        assert writer.returncode == -signal.SIGKILL
        left = temporaries(checkpoints_dir)
        if left:
            return left
    raise AssertionError(f"no SIGKILL in {KILL_TRIES} landed inside a write")


def sweep(store: LocalObjectStore, db: sessionmaker) -> BatchResult:
    inp = LifecycleInput(batch_size=10, grace_seconds=3600, window_seconds=2 * 86400)
    activities = VideoLifecycleActivities(store, db)
    return ActivityEnvironment().run(activities.sweep_video_orphans, LifecycleBatch(input=inp))


def test_a_checkpoint_write_killed_by_sigkill_leaves_nothing_once_swept(
    store: LocalObjectStore, db: sessionmaker
) -> None:
    job_id = "vid_killed"
    left = kill_inside_a_write(store, job_id)
    prefix = job_object_prefix(job_id) + "/"
    # The store does not show it: a sweep of what it lists alone would keep it forever.
    committed = store.list(prefix)
    assert not any(".tmp-" in key for key in committed)
    add_video_job(db, job_id, "failed", completed_ago=timedelta(hours=3))

    # Younger than an hour: it may be a write still in progress (a stale attempt's), so it stays.
    first = sweep(store, db)
    assert all(path.exists() for path in left)
    # The checkpoints committed before the kill (if any) went: the job is closed.
    assert store.list(prefix) == [] and first.deleted_objects == len(committed)

    # An hour later (its mtime moved back): an interrupted write, removed.
    old = time.time() - INTERRUPTED_WRITE_AGE_SECONDS - 60
    for path in left:
        os.utime(path, (old, old))
    second = sweep(store, db)
    assert not any(path.exists() for path in left)
    assert second.deleted_objects == len(left) and second.processed == 1
    leftovers = [p for p in (store.root / job_object_prefix(job_id)).rglob("*") if p.is_file()]
    assert leftovers == [], leftovers


def test_an_old_temporary_of_a_live_job_or_another_prefix_stays(store: LocalObjectStore, db: sessionmaker) -> None:
    old = time.time() - INTERRUPTED_WRITE_AGE_SECONDS - 60
    planted = []
    for job_id in ("vid_live", "vid_unknown"):
        directory = store.root / job_object_prefix(job_id) / "attempt-1" / "checkpoints"
        directory.mkdir(parents=True)
        path = directory / ".tmp-abc123"
        path.write_bytes(b"half")
        os.utime(path, (old, old))
        planted.append(path)
    add_video_job(db, "vid_live", "in_progress")
    result = sweep(store, db)
    assert result.deleted_objects == 0 and all(path.exists() for path in planted)
    # A temporary's name does not say which key it was for: a prefix that ends inside the names
    # of its directory does not cover it, the directory's own prefix does.
    checkpoints = job_object_prefix("vid_unknown") + "/attempt-1/checkpoints/"
    assert store.delete_interrupted(checkpoints + "step-", 0) == 0 and planted[1].exists()
    assert store.delete_interrupted(checkpoints, 0) == 1 and not planted[1].exists()
    assert planted[0].exists()


def test_s3_interrupted_multipart_uploads_are_aborted_once_old(s3_endpoint: str) -> None:
    store = S3ObjectStore(
        bucket=f"lh-{uuid.uuid4().hex[:12]}",
        region="us-east-1",
        endpoint_url=s3_endpoint,
        access_key_id="testing",
        secret_access_key="testing",
        create_bucket=True,
    )
    client = store._client
    # An upload a killed worker began and never completed, and one under another job.
    for key in ("videos/vid_a/attempt-1/video.mp4", "videos/vid_b/attempt-1/video.mp4"):
        upload = client.create_multipart_upload(Bucket=store.bucket, Key=key)
        client.upload_part(Bucket=store.bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 1024)

    def uploads() -> list[str]:
        return sorted(u["Key"] for u in client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", []))

    assert store.list("videos/") == []  # never an object
    # moto reports every upload as initiated in 2010, so the age is not tested here (the local
    # store's test covers the rule); the prefix is.
    assert store.delete_interrupted("videos/vid_a/") == 1
    assert uploads() == ["videos/vid_b/attempt-1/video.mp4"]
    assert store.delete_interrupted("videos/vid_a/") == 0
