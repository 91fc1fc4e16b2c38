"""Record histories of the lifecycle workflows for the replay test.

    python -m tests.lifecycle.record_histories

Runs each lifecycle workflow on a throwaway dev server with a real worker, a SQLite read model
and a local store holding enough due rows for several batches, and writes each history to
``tests/lifecycle/histories/<name>.json``. It never overwrites a file: a history is a record of
what running code did, kept so later code must still replay it.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities.ci.lifecycle import CILifecycleActivities
from activities.video.lifecycle import VideoLifecycleActivities
from leasehold.database import init_database
from leasehold.storage import LocalObjectStore
from testing.temporal import start_local_environment
from tests.conftest import sqlite_url
from tests.lifecycle.conftest import add_ci_run, add_video_job, video_result
from workflows.ci.ids import log_chunk_key
from workflows.lifecycle.ci.workflows import CILogCompactionWorkflow, CIRetentionWorkflow
from workflows.lifecycle.types import LifecycleInput
from workflows.lifecycle.video.workflows import VideoExpiryWorkflow, VideoOrphanSweepWorkflow

HISTORIES = Path(__file__).parent / "histories"


async def record(client: Client, tmp: Path) -> None:
    db = init_database(sqlite_url(tmp))
    store = LocalObjectStore(tmp / "objects", b"k" * 32, "http://127.0.0.1:1")
    for i in range(3):
        job = f"vid_rec{i}"
        result = video_result(job)
        store.put(result["video_key"], b"mp4")
        store.put(f"videos/{job}/attempt-1/checkpoint-000001.pt", b"checkpoint")
        add_video_job(
            db, job, "completed", completed_ago=timedelta(days=8), expires_in=-timedelta(hours=1), result=result
        )
        add_video_job(db, f"vid_rec_failed{i}", "failed", completed_ago=timedelta(hours=3))
        store.put(f"videos/vid_rec_failed{i}/attempt-2/checkpoint-000001.pt", b"checkpoint")
        prefix = f"ci/tenant-a/run_rec{i}/build/attempt-1/"
        store.put(log_chunk_key(prefix, 0), b"hello\n")
        summary = {"prefix": prefix, "next_seq": 1, "gaps": [], "bytes": 6, "ended": True}
        add_ci_run(
            db,
            f"run_rec{i}",
            finished_ago=timedelta(days=100),
            attempts=[{"attempt": 1, "status": "success", "log": summary}],
        )
    video = VideoLifecycleActivities(store, db)
    ci = CILifecycleActivities(store, db)
    queue = f"record-{uuid.uuid4().hex[:8]}"
    runs: list[tuple[str, Any]] = [
        ("video_orphans-two_batches", VideoOrphanSweepWorkflow.run),
        ("video_expiry-two_batches", VideoExpiryWorkflow.run),
        ("ci_compaction-two_batches", CILogCompactionWorkflow.run),
        ("ci_retention-runs_then_pushes", CIRetentionWorkflow.run),
    ]
    async with Worker(
        client,
        task_queue=queue,
        workflows=[VideoExpiryWorkflow, VideoOrphanSweepWorkflow, CILogCompactionWorkflow, CIRetentionWorkflow],
        activities=[video.expire_videos, video.sweep_video_orphans, ci.compact_ci_logs, ci.apply_ci_retention],
        activity_executor=ThreadPoolExecutor(max_workers=2),
    ):
        for name, run in runs:
            path = HISTORIES / f"{name}.json"
            if path.exists():
                print(f"kept {path.name}")
                continue
            handle = await client.start_workflow(
                run,
                LifecycleInput(batch_size=2, max_batches=5, grace_seconds=3600, window_seconds=86400),
                id=f"{name}-{uuid.uuid4().hex[:8]}",
                task_queue=queue,
            )
            await handle.result()
            history = await handle.fetch_history()
            path.parent.mkdir(exist_ok=True)
            path.write_text(history.to_json())
            print(f"wrote {path.name}")


async def main() -> None:
    env = await start_local_environment()
    try:
        with tempfile.TemporaryDirectory(prefix="leasehold-record-") as tmp:
            await record(env.client, Path(tmp))
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
