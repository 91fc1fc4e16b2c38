"""The open video jobs of one model version, from the read model (``video_jobs``).

What the capacity tracker plans with: every job waiting for a worker, oldest first, and every
job generating, from one indexed query (``ix_video_jobs_model_status``) with no cap on how many.
The rows carry what a plan needs of a job without asking the engine: owner, tier, arrival,
cost shape (the request in ``state``) and how its task was dispatched (the fairness columns the
submit wrote).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from api.video.eta import QueuedJob, shape_of
from leasehold.records.video.jobs import VideoJobRecord
from workflows.video.models import VideoModelSpec
from workflows.video.types import VideoRequest, VideoStatus

OPEN_STATUSES = (VideoStatus.QUEUED.value, VideoStatus.IN_PROGRESS.value)


@dataclass(frozen=True)
class OpenJob:
    """One open job: as the plans see it, and whether its row says it generates."""

    job: QueuedJob
    generating: bool
    started_at: float | None
    attempts_started: int
    # The GPU class whose queue it waits on (``None``: no classes when it was submitted).
    gpu_class: str | None = None


def _epoch(value: datetime | None) -> float | None:
    if value is None:
        return None
    # SQLite hands back naive datetimes for timezone-aware columns; they were written in UTC.
    return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).timestamp()


def open_jobs(db: sessionmaker, spec: VideoModelSpec) -> list[OpenJob]:
    """Every open job of ``spec``'s model, oldest first."""
    columns = (
        VideoJobRecord.job_id,
        VideoJobRecord.tenant_id,
        VideoJobRecord.user_id,
        VideoJobRecord.tier,
        VideoJobRecord.status,
        VideoJobRecord.created_at,
        VideoJobRecord.started_at,
        VideoJobRecord.attempts_started,
        VideoJobRecord.fairness_key,
        VideoJobRecord.fairness_weight,
        VideoJobRecord.state,
    )
    with db() as session:
        rows = session.execute(
            select(*columns)
            .where(VideoJobRecord.model == spec.name, VideoJobRecord.status.in_(OPEN_STATUSES))
            .order_by(VideoJobRecord.created_at, VideoJobRecord.job_id)
        ).all()
    jobs = []
    for row in rows:
        request = VideoRequest.model_validate(row.state["request"])
        job = QueuedJob(
            job_id=row.job_id,
            tenant_id=row.tenant_id,
            user_id=row.user_id,
            tier=row.tier,
            created_at=_epoch(row.created_at) or 0.0,
            shape=shape_of(spec, request),
            fairness_key=row.fairness_key or row.tier,
            fairness_weight=row.fairness_weight or 1.0,
        )
        jobs.append(
            OpenJob(
                job=job,
                generating=row.status == VideoStatus.IN_PROGRESS.value,
                started_at=_epoch(row.started_at),
                attempts_started=row.attempts_started or 0,
                gpu_class=row.state.get("gpu_class"),
            )
        )
    return jobs
