"""Admission from the read model: the capacity tracker plans with every open job from SQL (no
cap; waiting jobs are not described, but for the few next in line), one replica measures under
a lease while the others plan from what it publishes, and a submit between two snapshots is
placed without re-planning.

Real dev server and real databases (SQLite and Postgres); no workers run, so the rows are made
as the submit path and the workflow's snapshots make them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.orm import sessionmaker
from temporalio.client import Client, DescribeWorkflowInput, Interceptor, OutboundInterceptor

from api.video.capacity import CapacityTracker
from api.video.memo import JobMemo
from api.video.views import JobView
from leasehold.database import init_database
from leasehold.records.api_keys import Principal
from leasehold.records.video.capacity import CapacitySnapshot
from leasehold.records.video.jobs import VideoJobRecord
from leasehold.settings import Settings
from tests.conftest import sqlite_url
from video_policy.eta import JobCosts, JobShape, ModelSnapshot, QueuedJob, RunningJob
from video_policy.queue_plan import place, plan
from workflows.queues import orchestration_queue
from workflows.video.ids import workflow_id
from workflows.video.models import get_model
from workflows.video.types import VideoJobState, VideoRequest, VideoStatus

MODEL = "procedural-v1"
# Past the 500 open jobs the tracker used to follow.
QUEUED_JOBS = 1200
GENERATING_JOBS = 3


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return sqlite_url(tmp_path)


@pytest.fixture
def db(database_url: str) -> sessionmaker:
    return init_database(database_url)


@pytest.fixture
def tracker_settings(settings: Settings, database_url: str) -> Settings:
    return settings.model_copy(
        update={
            "database_url": database_url,
            "video_capacity_refresh_seconds": 0.2,
            "video_capacity_lease_seconds": 3.0,
        }
    )


class Describes(Interceptor):
    """Counts DescribeWorkflowExecution calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self.calls)


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, calls: Counter[str]) -> None:
        super().__init__(next)
        self.calls = calls

    async def describe_workflow(self, input: DescribeWorkflowInput) -> Any:
        self.calls[input.id] += 1
        return await super().describe_workflow(input)


def _rows(count: int, status: VideoStatus, start: datetime, prefix: str) -> list[dict[str, Any]]:
    rows = []
    for i in range(count):
        job_id = f"video_{prefix}{i:05d}"
        tenant, user = f"tenant-{i % 7}", f"user-{i % 11}"
        created = start + timedelta(milliseconds=i)
        request = VideoRequest(prompt="p", model=MODEL, seconds=1, width=320, height=180, seed=i, steps=4)
        state = VideoJobState(
            job_id=job_id,
            tenant_id=tenant,
            user_id=user,
            tier="paid",
            request=request,
            request_hash="h",
            status=status,
            created_at=created,
        )
        rows.append(
            {
                "job_id": job_id,
                "tenant_id": tenant,
                "user_id": user,
                "model": MODEL,
                "tier": "paid",
                "status": status.value,
                "version": 0,
                "request_hash": "h",
                "engine_started": True,
                "attempts_started": 1 if status is VideoStatus.IN_PROGRESS else 0,
                "created_at": created,
                "started_at": created if status is VideoStatus.IN_PROGRESS else None,
                "updated_at": created,
                "state": state.model_dump(mode="json"),
                "fairness_key": f"paid/{tenant}/{user}",
                "fairness_weight": 4.0 / 11,
            }
        )
    return rows


def _seed(db: sessionmaker) -> None:
    start = datetime.now(UTC) - timedelta(minutes=5)
    with db.begin() as session:
        session.execute(insert(VideoJobRecord), _rows(QUEUED_JOBS, VideoStatus.QUEUED, start, "q"))
        session.execute(insert(VideoJobRecord), _rows(GENERATING_JOBS, VideoStatus.IN_PROGRESS, start, "r"))
        # Closed jobs are not open: never planned.
        session.execute(insert(VideoJobRecord), _rows(50, VideoStatus.COMPLETED, start, "c"))


def _tracker(
    temporal_client: Client, settings: Settings, db: sessionmaker, calls: Describes | None = None
) -> CapacityTracker:
    client = temporal_client
    if calls is not None:
        config = temporal_client.config()
        config["interceptors"] = [calls]
        client = Client(**config)
    return CapacityTracker(client, settings, db)


async def test_every_open_job_is_planned_and_only_generating_ones_described(
    temporal_client: Client, tracker_settings: Settings, db: sessionmaker
) -> None:
    _seed(db)
    calls = Describes()
    tracker = _tracker(temporal_client, tracker_settings, db, calls)
    await tracker.refresh()
    snapshot = tracker.snapshots[MODEL]
    assert len(snapshot.queued) == QUEUED_JOBS
    assert [j.job_id for j in snapshot.queued] == sorted(j.job_id for j in snapshot.queued)
    assert {r.job_id for r in snapshot.running} == {f"video_r{i:05d}" for i in range(GENERATING_JOBS)}
    # Each generating job is described once; of the waiting ones only the few the plan puts
    # next (a worker may have just taken them): no worker serves here, so at most 4.
    generating = {workflow_id(f"video_r{i:05d}") for i in range(GENERATING_JOBS)}
    assert generating <= set(calls.calls)
    assert all(n == 1 for n in calls.calls.values())
    assert len(set(calls.calls) - generating) <= 4
    # The fairness data the submit wrote is what the plans use.
    first = snapshot.queued[0]
    assert first.fairness_key == f"paid/{first.tenant_id}/{first.user_id}"
    assert first.fairness_weight == pytest.approx(4.0 / 11)
    figures = tracker.figures(MODEL)
    assert figures.queued == QUEUED_JOBS
    assert figures.running == GENERATING_JOBS


async def test_one_replica_measures_and_the_others_follow(
    temporal_client: Client, tracker_settings: Settings, db: sessionmaker
) -> None:
    _seed(db)
    first = _tracker(temporal_client, tracker_settings, db)
    second = _tracker(temporal_client, tracker_settings, db)
    refreshes: Counter[str] = Counter()

    def counted(tracker: CapacityTracker, name: str) -> None:
        measure = tracker.refresh

        async def refresh() -> None:
            refreshes[name] += 1
            await measure()

        tracker.refresh = refresh  # type: ignore[method-assign]

    counted(first, "first")
    counted(second, "second")
    first_task = asyncio.create_task(first.run())
    await asyncio.sleep(0.5)  # the first one takes the lease
    second_task = asyncio.create_task(second.run())
    try:
        # Several measurements by the first (bounded: a loaded host refreshes slower).
        deadline = time.monotonic() + 15
        while refreshes["first"] < 3:
            assert time.monotonic() < deadline, f"the leader measured {refreshes['first']} times"
            await asyncio.sleep(0.1)
        assert refreshes["second"] == 0  # it never measured: it loaded what the first published
        await asyncio.wait_for(second.ready(), 5)
        assert len(second.snapshots[MODEL].queued) == QUEUED_JOBS
        assert second.snapshots[MODEL].taken_at > 0
        assert second.costs[MODEL].to_json() == first.costs[MODEL].to_json()
        with db() as session:
            row = session.get(CapacitySnapshot, orchestration_queue(tracker_settings.queue_prefix))
            assert row is not None and row.owner == first.identity
        # The leader goes away; once its lease lapses the other takes over.
        first_task.cancel()
        deadline = time.monotonic() + 10
        while refreshes["second"] == 0:
            assert time.monotonic() < deadline, "no replica took over the measurement"
            await asyncio.sleep(0.1)
        with db() as session:
            row = session.get(CapacitySnapshot, orchestration_queue(tracker_settings.queue_prefix))
            assert row is not None and row.owner == second.identity
    finally:
        for task in (first_task, second_task):
            task.cancel()
        await asyncio.gather(first_task, second_task, return_exceptions=True)


def test_a_new_job_is_placed_where_a_new_plan_puts_it() -> None:
    """Placing submits into the snapshot's plan agrees with re-planning with them (exact cases)."""
    spec = get_model(MODEL)
    assert spec is not None
    costs = JobCosts(spec)
    shape = JobShape(steps=30, frames=32, width=320, height=180)
    backlog = [QueuedJob(f"q{i}", "t", "a", "paid", 1000.0 + i, shape, "paid/t/a", 1.0) for i in range(8)]
    running = [RunningJob(f"r{i}", "t", "u", "paid", shape, 5 * i, f"w{i}", True) for i in range(3)]
    snapshot = ModelSnapshot(MODEL, 2000.0, backlog, running, workers_serving=3, measured=True)
    base = plan(snapshot, costs)
    assert base is not None
    # Two other users submit after the snapshot: each gets a pass ahead of user a's backlog.
    new = [
        QueuedJob("n0", "t", "b", "paid", 2001.0, shape, "paid/t/b", 1.0),
        QueuedJob("n1", "t", "c", "paid", 2002.0, shape, "paid/t/c", 1.0),
    ]
    replanned = plan(snapshot, costs, extra=new)
    assert replanned is not None
    for i, job in enumerate(new):
        position, start = place(base, job, new[:i], costs)
        assert position == replanned.starts[job.job_id][0]
        assert start == pytest.approx(replanned.starts[job.job_id][1], rel=0.01)
    # Behind the whole backlog (a second job of user a): its start is when a worker frees last.
    late = QueuedJob("n2", "t", "a", "paid", 2003.0, shape, "paid/t/a", 1.0)
    replanned = plan(snapshot, costs, extra=[late])
    assert replanned is not None
    position, start = place(base, late, [], costs)
    assert position == replanned.starts["n2"][0]
    assert start == pytest.approx(replanned.starts["n2"][1], rel=0.01)


async def test_a_job_terminated_outside_leasehold_stops_counting(
    temporal_client: Client, tracker_settings: Settings, db: sessionmaker
) -> None:
    """A terminated execution never writes its last snapshot: the tracker, describing the job
    once it is next in line, closes its row (failed, ``terminated``) so it no longer holds its
    owner's cap or a turn in the plans; a live one next to it stays queued."""
    start = datetime.now(UTC) - timedelta(minutes=1)
    rows = _rows(2, VideoStatus.QUEUED, start, f"t{time.time_ns() % 10**9}")
    with db.begin() as session:
        session.execute(insert(VideoJobRecord), rows)
    killed, alive = (row["job_id"] for row in rows)
    # Executions nobody runs (no worker polls this queue): one is terminated by an operator.
    for job_id in (killed, alive):
        await temporal_client.start_workflow("VideoJobWorkflow", id=workflow_id(job_id), task_queue=f"nobody-{job_id}")
    await temporal_client.get_workflow_handle(workflow_id(killed)).terminate(reason="operator")
    tracker = _tracker(temporal_client, tracker_settings, db)
    await tracker.refresh()
    with db() as session:
        closed = session.get(VideoJobRecord, killed)
        kept = session.get(VideoJobRecord, alive)
        assert closed is not None and kept is not None
        assert closed.status == VideoStatus.FAILED.value, closed.status
        assert closed.state["error_code"] == "terminated" and closed.completed_at is not None
        assert closed.version > 0  # the closed history's length: above any snapshot
        assert kept.status == VideoStatus.QUEUED.value
    assert [j.job_id for j in tracker.snapshots[MODEL].queued] == [alive]
    # Seen again later (a duplicate describe), the closed row is left as it is.
    await tracker.refresh()
    with db() as session:
        again = session.get(VideoJobRecord, killed)
        assert again is not None and again.version == closed.version


async def test_with_no_worker_serving_a_waiting_job_is_placed_by_arrival_and_never_behind_itself(
    temporal_client: Client, tracker_settings: Settings, db: sessionmaker
) -> None:
    """No worker, so no plan: a job's place is how many jobs arrived before it (measured or just
    submitted) plus one. It once was the queue's length plus one for every job, so a job the
    snapshot held counted itself, and its place did not move when the job ahead of it went."""
    start = datetime.now(UTC) - timedelta(minutes=1)
    rows = _rows(3, VideoStatus.QUEUED, start, f"n{time.time_ns() % 10**9}")
    with db.begin() as session:
        session.execute(insert(VideoJobRecord), rows)
    tracker = _tracker(temporal_client, tracker_settings, db)
    await tracker.refresh()
    assert [j.job_id for j in tracker.snapshots[MODEL].queued] == [row["job_id"] for row in rows]

    def view(row: dict[str, Any]) -> JobView:
        created = row["created_at"].timestamp()
        memo = JobMemo(
            prompt="p", model=MODEL, seconds=1, width=320, height=180, seed=1, steps=4,
            request_hash="h", created_at=created, expires_after_seconds=3600,
        )  # fmt: skip
        owner = Principal(tenant_id=row["tenant_id"], user_id=row["user_id"], tier="paid", key_id="k")
        return JobView(job_id=row["job_id"], memo=memo, owner=owner, status=VideoStatus.QUEUED)

    def place_of(job: JobView) -> tuple[int, int, str]:
        estimate = tracker.estimate(job)
        assert estimate is not None and estimate.queue is not None
        return estimate.queue.position, estimate.queue.ahead, estimate.queue.reason

    places = [place_of(view(row)) for row in rows]
    assert [(position, ahead) for position, ahead, _ in places] == [(1, 0), (2, 1), (3, 2)]
    assert all("no worker is serving" in reason for _, _, reason in places)
    # A submit the snapshot has not seen yet waits behind all three, and counts for a later one.
    later = {**rows[-1], "job_id": "video_unseen_1", "created_at": datetime.now(UTC)}
    tracker.record_submit(view(later))
    assert place_of(view(later))[:2] == (4, 3)
    last = {**later, "job_id": "video_unseen_2", "created_at": datetime.now(UTC) + timedelta(seconds=1)}
    assert place_of(view(last))[:2] == (5, 4)
    # The first job goes: the next refresh moves everyone behind it up by one.
    with db.begin() as session:
        first = session.get(VideoJobRecord, rows[0]["job_id"])
        assert first is not None
        first.status = VideoStatus.CANCELLED.value
    await tracker.refresh()
    assert [place_of(view(row))[:2] for row in rows[1:]] == [(1, 0), (2, 1)]
