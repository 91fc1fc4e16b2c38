"""The workflow's read-model writer coalesces: a burst of transitions while a write is in flight
costs one more write, never two at once, and the last snapshot lands before the workflow closes.

Real dev server; the workflow runs on a worker in this process whose projection activity is
slowed down, so the burst surely lands while a write is in flight. No GPU worker: generation
waits, the worker's start signals are sent by the test, and the job ends by cancellation.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

from activities.video.definitions import PROJECT_VIDEO_JOB
from activities.video.housekeeping import VideoHousekeepingActivities
from activities.video.projection import VideoProjectionActivities
from activities.video.webhooks import build_webhook_activities
from leasehold.database import init_database
from leasehold.records.video.jobs import VideoJobRecord
from leasehold.settings import Settings
from tests.conftest import sqlite_url
from tests.video_core.jobs import request, start_job, store_of
from workflows.queues import orchestration_queue
from workflows.video.job import VideoJobWorkflow
from workflows.video.types import GenerationStarted, ProjectionResult, ProjectVideoJobInput

WRITE_SECONDS = 1.5
BURST = 5


class SlowProjection(VideoProjectionActivities):
    """The real projection, slower, and watched: when a write starts and how many run at once."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.first_started = threading.Event()

    @activity.defn(name=PROJECT_VIDEO_JOB)
    def project_video_job(self, input: ProjectVideoJobInput) -> ProjectionResult:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.first_started.set()
        try:
            time.sleep(WRITE_SECONDS)
            return super().project_video_job(input)
        finally:
            with self.lock:
                self.in_flight -= 1


async def test_a_burst_costs_one_write(temporal_client: Client, settings: Settings, tmp_path: Path) -> None:
    db = init_database(sqlite_url(tmp_path))
    projection = SlowProjection(db)
    worker = Worker(
        temporal_client,
        task_queue=orchestration_queue(settings.queue_prefix),
        workflows=[VideoJobWorkflow],
        activities=[
            projection.project_video_job,
            VideoHousekeepingActivities(store_of(settings)).delete_video_objects,
            build_webhook_activities(settings, db).deliver_video_event,
        ],
        activity_executor=ThreadPoolExecutor(max_workers=8),
    )
    async with worker:
        handle = await start_job(temporal_client, settings, request())
        job_id = handle.id.removeprefix("video-")
        # The first snapshot (queued) is being written: now the burst.
        assert await asyncio.to_thread(projection.first_started.wait, 30)
        for attempt in range(1, BURST + 1):
            await handle.signal(VideoJobWorkflow.generation_started, GenerationStarted(attempt=attempt))
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()

    # The row holds the outcome the moment the execution is closed.
    with db() as session:
        row = session.get(VideoJobRecord, job_id)
        assert row is not None
        assert (row.status, row.attempts_started) == ("cancelled", BURST)

    events = [e async for e in handle.fetch_history_events()]
    scheduled = {
        e.event_id: e
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == PROJECT_VIDEO_JOB
    }
    completed = [
        e.activity_task_completed_event_attributes.scheduled_event_id
        for e in events
        if e.HasField("activity_task_completed_event_attributes")
        and e.activity_task_completed_event_attributes.scheduled_event_id in scheduled
    ]
    # Queued; the whole burst and the cancel request in one; cancelled. Not one per transition.
    assert 2 <= len(scheduled) <= 3, sorted(scheduled)
    assert sorted(completed) == sorted(scheduled)
    # One write at a time: each is scheduled only after the previous one completed.
    order = sorted(scheduled)
    completion_events = {
        e.activity_task_completed_event_attributes.scheduled_event_id: e.event_id
        for e in events
        if e.HasField("activity_task_completed_event_attributes")
    }
    for previous, following in itertools.pairwise(order):
        assert completion_events[previous] < following
    assert projection.most_in_flight == 1
