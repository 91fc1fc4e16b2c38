"""The events stream of a queued job whose ETA moves while its place in the queue does not.

No stack: a stack cannot move a queued job's ETA on cue (the capacity tracker plans from
measured step times), so the job's snapshots are scripted and everything after them runs as
served: the ``/v1/videos/{id}/events`` route, ``VideoJobs.watch`` and the snapshot ids
(``JobView.event_id``). The queue-position twin of this test runs on the stack
(``test_1_queued_jobs.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import api.video.jobs
from api.routers.video.videos import get_jobs, router
from api.schemas.video import VideoQueue
from api.video.jobs import VideoJobs
from api.video.memo import JobMemo
from api.video.views import ETA_EVENT_SECONDS, Estimate, JobView
from leasehold.records.api_keys import Principal
from tests.video_api.conftest import MODEL, sse_events
from workflows.video.types import VideoStatus

JOB_ID = "video_" + "e" * 32
OWNER = Principal(tenant_id="t", user_id="u", tier="paid", key_id="k")
MEMO = JobMemo(
    prompt="a slow queue",
    model=MODEL,
    seconds=1,
    width=180,
    height=320,
    seed=1,
    request_hash="h",
    created_at=1_000.0,
    expires_after_seconds=3600,
)


# The moment the script is seen at (epoch seconds).
NOW = 2_000_000.0


def _queued(completion_at: float, position: int = 2) -> JobView:
    """A queued job expected to finish at ``completion_at``, at ``position`` in the queue."""
    queue = VideoQueue(position=position, ahead=position - 1, workers_serving=1, completion_rate_per_min=1.0, reason="")
    estimate = Estimate(
        eta_seconds=completion_at - NOW,
        estimated_start_at=completion_at - 10,
        estimated_completion_at=completion_at,
        queue=queue,
    )
    return JobView(job_id=JOB_ID, memo=MEMO, owner=OWNER, status=VideoStatus.QUEUED, estimate=estimate)


class ScriptedJobs(VideoJobs):
    """The caller's jobs, whose one job is seen as ``views`` say, one look after another
    (the last one from then on)."""

    def __init__(self, views: list[JobView]) -> None:
        self.views = views
        self.looks = 0

    async def get(self, job_id: str) -> JobView:
        assert job_id == JOB_ID
        view = self.views[min(self.looks, len(self.views) - 1)]
        self.looks += 1
        return view


@pytest.fixture
def events_of(monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    # The stream looks at the job every WATCH_INTERVAL_SECONDS; the script needs no waiting.
    monkeypatch.setattr(api.video.jobs, "WATCH_INTERVAL_SECONDS", 0.0)
    app = FastAPI()
    app.include_router(router)
    with TestClient(app) as client:
        yield client


def test_a_queued_jobs_event_stream_says_when_its_eta_moves_alone(events_of: TestClient) -> None:
    # The first expected completion, just inside an ETA_EVENT_SECONDS bucket, so that a jitter
    # below it stays inside the bucket.
    start = (NOW // ETA_EVENT_SECONDS + 20) * ETA_EVENT_SECONDS + 1
    script = [
        _queued(start),  # the route's existence check
        _queued(start),  # the first look: sent
        _queued(start + 1),  # jitter below ETA_EVENT_SECONDS: not news
        _queued(start + 3 * ETA_EVENT_SECONDS),  # the ETA moved, the place did not: sent
        _queued(start + 3 * ETA_EVENT_SECONDS),  # nothing changed
        JobView(job_id=JOB_ID, memo=MEMO, owner=OWNER, status=VideoStatus.CANCELLED),  # ends the stream
    ]
    jobs = ScriptedJobs(script)
    events_of.app.dependency_overrides[get_jobs] = lambda: jobs  # type: ignore[attr-defined]
    with events_of.stream("GET", f"/v1/videos/{JOB_ID}/events", timeout=30) as response:
        assert response.status_code == 200
        events = list(sse_events(response, limit=100))
    assert jobs.looks == len(script), "the stream ended before the script did"
    updates = [e["data"] for e in events if e.get("event") == "video.updated"]
    assert [v["status"] for v in updates] == ["queued", "queued", "cancelled"], updates
    assert [(v["queue"] or {}).get("position") for v in updates[:2]] == [2, 2]
    assert [v["estimated_completion_at"] for v in updates[:2]] == [round(start), round(start + 3 * ETA_EVENT_SECONDS)]
    # Each event has an id of its own, so a reconnect resumes after the ETA change.
    ids = [e["id"] for e in events if e.get("event") == "video.updated"]
    assert len(set(ids)) == len(ids) == 3, ids
