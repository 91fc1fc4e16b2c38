"""The video read model's writes converge: snapshots a real workflow wrote, applied in order, out
of order and twice, leave the same row, on SQLite and on Postgres.

The snapshots are the ``project_video_job`` inputs of a recorded history (a real run of the
workflow), not hand-made ones, so their versions are the ones the workflow really sends.
"""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.video.definitions import PROJECT_VIDEO_JOB
from activities.video.projection import VideoProjectionActivities
from leasehold.database import init_database
from leasehold.records.versioned import LIFECYCLE_VERSION, write_versioned
from leasehold.records.video.jobs import VideoJobRecord
from tests.conftest import sqlite_url
from workflows.version import BUILD_ID
from workflows.video.types import ProjectVideoJobInput, VideoJobState, VideoStatus

HISTORIES = Path(__file__).parents[1] / "video_core" / "histories" / BUILD_ID


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> sessionmaker:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else sqlite_url(tmp_path)
    return init_database(url)


def recorded_snapshots(name: str) -> list[ProjectVideoJobInput]:
    """The read-model writes the workflow scheduled in the recorded history ``name``, in order."""
    history = WorkflowHistory.from_json(f"video-{name}", (HISTORIES / f"{name}.json").read_text())
    snapshots = []
    for event in history.events:
        if not event.HasField("activity_task_scheduled_event_attributes"):
            continue
        scheduled = event.activity_task_scheduled_event_attributes
        if scheduled.activity_type.name == PROJECT_VIDEO_JOB:
            [snapshot] = pydantic_data_converter.payload_converter.from_payloads(
                list(scheduled.input.payloads), [ProjectVideoJobInput]
            )
            snapshots.append(snapshot)
    return snapshots


def row(db: sessionmaker, job_id: str) -> dict[str, Any]:
    """The row as plain values, without ``updated_at`` (when, not what)."""
    with db() as session:
        record = session.scalars(select(VideoJobRecord).where(VideoJobRecord.job_id == job_id)).one()
        values = {c.name: getattr(record, c.name) for c in VideoJobRecord.__table__.columns}
    values.pop("updated_at")
    for name, value in values.items():
        # SQLite hands timezone-aware columns back naive; they were written in UTC.
        if isinstance(value, datetime) and value.tzinfo is None:
            values[name] = value.replace(tzinfo=UTC)
    return values


def apply(db: sessionmaker, snapshots: list[ProjectVideoJobInput]) -> list[bool]:
    activities = VideoProjectionActivities(db)
    return [activities.project_video_job(snapshot).applied for snapshot in snapshots]


@pytest.mark.parametrize("name", ["completed", "failed", "cancelled"])
def test_any_order_and_duplicates_give_the_newest_snapshot(db: sessionmaker, name: str) -> None:
    snapshots = recorded_snapshots(name)
    assert len(snapshots) >= 2
    versions = [s.version for s in snapshots]
    assert versions == sorted(versions) and len(set(versions)) == len(versions), versions
    final = snapshots[-1]
    assert final.state.status in (VideoStatus.COMPLETED, VideoStatus.FAILED, VideoStatus.CANCELLED)

    # In order, once: every write applies.
    assert apply(db, snapshots) == [True] * len(snapshots)
    expected = row(db, final.state.job_id)
    assert expected["status"] == final.state.status.value
    assert expected["version"] == final.version
    assert expected["engine_started"] is True
    assert VideoJobState.model_validate(expected["state"]) == final.state

    # Every order, every write twice, in fresh rows (another job id each time): the same row.
    rng = random.Random(name)
    orders = [list(reversed(snapshots)), *(rng.sample(snapshots, len(snapshots)) for _ in range(3))]
    for index, order in enumerate(orders):
        job_id = f"{final.state.job_id}-{index}"
        doubled = [_as_job(s, job_id) for s in order + order]
        applied = apply(db, doubled)
        # The second round changes nothing; the final snapshot applied exactly once.
        assert applied[len(order) :] == [False] * len(order)
        assert row(db, job_id) == {
            **expected,
            "job_id": job_id,
            "state": _as_job(final, job_id).state.model_dump(mode="json"),
        }


def _as_job(snapshot: ProjectVideoJobInput, job_id: str) -> ProjectVideoJobInput:
    return snapshot.model_copy(update={"state": snapshot.state.model_copy(update={"job_id": job_id})})


def test_the_workflow_never_overwrites_the_api_row_backwards_nor_the_lifecycle(db: sessionmaker) -> None:
    snapshots = recorded_snapshots("completed")
    final = snapshots[-1]
    job_id = final.state.job_id
    accepted = snapshots[0].state
    # The API's row at version 0, with what only the API writes (how it was dispatched).
    with db.begin() as session:
        values = {
            "tenant_id": accepted.tenant_id,
            "user_id": accepted.user_id,
            "model": accepted.request.model,
            "tier": accepted.tier,
            "status": "queued",
            "request_hash": accepted.request_hash,
            "engine_started": False,
            "created_at": accepted.created_at,
            "state": accepted.model_dump(mode="json"),
            "fairness_key": "paid/tenant/user",
            "fairness_weight": 0.5,
        }
        assert write_versioned(session, VideoJobRecord.__table__, {"job_id": job_id}, values, 0)  # type: ignore[arg-type]

    assert apply(db, list(itertools.chain(snapshots, snapshots[:1]))) == [True] * len(snapshots) + [False]
    completed = row(db, job_id)
    assert completed["status"] == "completed" and completed["engine_started"] is True
    # The workflow's snapshots leave the API's dispatch columns alone.
    assert (completed["fairness_key"], completed["fairness_weight"]) == ("paid/tenant/user", 0.5)
    # The API's row arriving late (a retried insert) changes nothing either.
    with db.begin() as session:
        assert not write_versioned(session, VideoJobRecord.__table__, {"job_id": job_id}, values, 0)  # type: ignore[arg-type]
    assert row(db, job_id) == completed

    # The lifecycle expires it; a snapshot delivered after that (a late retry) cannot revive it.
    expired_state = final.state.model_copy(update={"status": VideoStatus.EXPIRED})
    with db.begin() as session:
        assert write_versioned(
            session,
            VideoJobRecord.__table__,  # type: ignore[arg-type]
            {"job_id": job_id},
            {"status": "expired", "state": expired_state.model_dump(mode="json")},
            LIFECYCLE_VERSION,
        )
    assert apply(db, [final, snapshots[1]]) == [False, False]
    expired = row(db, job_id)
    assert expired["status"] == "expired" and expired["version"] == LIFECYCLE_VERSION
    assert VideoJobState.model_validate(expired["state"]).status is VideoStatus.EXPIRED
    assert expired["expires_at"] is not None and expired["expires_at"] - expired["completed_at"] == timedelta(days=7)
