"""Record VideoJobWorkflow histories for the replay test: ``python -m tests.video_core.record_histories [DIR]``.

A completed job (its worker signals the start), a failed one, a cancelled one, and a paid job
handed from reserved capacity (no worker there) to preemptible capacity after its
schedule-to-start wait, each writing its read-model row and delivering its webhooks, recorded
by workers that run as this build's deployment version, into ``histories/<BUILD_ID>/``
(``docs/versioning.md``). Existing files are never overwritten; a new scenario adds a file.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

from activities.video.generation import VideoGenerationActivities
from activities.video.housekeeping import VideoHousekeepingActivities
from activities.video.projection import VideoProjectionActivities
from activities.video.webhooks import build_webhook_activities
from leasehold.database import init_database
from leasehold.settings import Settings
from leasehold.storage import LocalObjectStore
from leasehold.worker_versioning import deployment_config, promote
from testing.temporal import start_local_environment
from tests.video_core.jobs import request, start_job
from worker_gpu.encoding import H264Encoder
from worker_gpu.job_signals import StartedAnnouncer
from worker_gpu.models.procedural import ProceduralVideoModel
from workflows.queues import PREEMPTIBLE, RESERVED, orchestration_queue, video_queue
from workflows.version import BUILD_ID
from workflows.video.job import VideoJobWorkflow

HISTORIES = Path(__file__).parent / "histories"


async def record(client: Client, settings: Settings, store: LocalObjectStore, out: Path) -> None:
    model = ProceduralVideoModel(device="cpu", threads=1)
    model.load()
    announcer = StartedAnnouncer()
    announcer.bind(client, asyncio.get_running_loop())
    generation = VideoGenerationActivities(model, H264Encoder(), store, announce_started=announcer)
    housekeeping = VideoHousekeepingActivities(store)
    projection = VideoProjectionActivities(init_database(f"sqlite:///{settings.data_dir / 'record.db'}"))
    webhooks = build_webhook_activities(settings, init_database(f"sqlite:///{settings.data_dir / 'record.db'}"))
    pool = ThreadPoolExecutor(max_workers=4)
    orchestration = Worker(
        client,
        task_queue=orchestration_queue(settings.queue_prefix),
        workflows=[VideoJobWorkflow],
        activities=[housekeeping.delete_video_objects, projection.project_video_job, webhooks.deliver_video_event],
        activity_executor=pool,
        deployment_config=deployment_config(settings, BUILD_ID, routed=True),
    )
    gpu = Worker(
        client,
        task_queue=video_queue("procedural-v1", settings.queue_prefix),
        activities=[generation.generate_video],
        activity_executor=pool,
        deployment_config=deployment_config(settings, BUILD_ID, routed=False),
    )
    # Only preemptible capacity serves the model: the paid job below waits out its reserved
    # queue's schedule-to-start and is handed over.
    preemptible = Worker(
        client,
        task_queue=video_queue("procedural-v1", settings.queue_prefix, None, PREEMPTIBLE),
        activities=[generation.generate_video],
        activity_executor=pool,
        deployment_config=deployment_config(settings, BUILD_ID, routed=False),
    )
    async with orchestration, gpu, preemptible:
        await promote(client, deployment_config(settings, BUILD_ID, routed=True).version, "record")
        completed = await start_job(client, settings, request(steps=4, seconds=1))
        await completed.result()
        failed = await start_job(client, settings, request(width=100, height=100))
        await failed.result()
        cancelled = await start_job(client, settings, request(steps=1000, seconds=4))
        await asyncio.sleep(2)
        await cancelled.cancel()
        with contextlib.suppress(WorkflowFailureError):
            await cancelled.result()
        handed_over = await start_job(
            client,
            settings,
            request(steps=2, seconds=1),
            generate_queue=video_queue("procedural-v1", settings.queue_prefix, None, RESERVED),
            fallback_queue=video_queue("procedural-v1", settings.queue_prefix, None, PREEMPTIBLE),
            fallback_after_seconds=1.0,
        )
        await handed_over.result()
        outcomes = {"completed": completed, "failed": failed, "cancelled": cancelled, "handed_over": handed_over}
        for name, handle in outcomes.items():
            path = out / f"{name}.json"
            if not path.exists():
                path.write_text((await handle.fetch_history()).to_json())


async def main(out: Path) -> None:
    env = await start_local_environment()
    async with env:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(data_dir=Path(tmp), queue_prefix="record.")
            store = LocalObjectStore(Path(tmp) / "objects", b"record", "http://127.0.0.1:1")
            await record(env.client, settings, store, out)


if __name__ == "__main__":
    # Another directory (first argument) for a trial run that leaves the recorded files alone.
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HISTORIES / BUILD_ID
    target.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(target))
