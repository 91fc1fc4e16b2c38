"""The open video jobs of one model version, from the read model (``video_jobs``).

What the capacity tracker plans with: every job waiting for a worker, oldest first, and every
job generating, from one indexed query (``ix_video_jobs_model_status``) with no cap on how many.
The rows carry what a plan needs of a job without asking the engine: owner, tier, arrival,
cost shape (the request in ``state``) and how its task was dispatched (the fairness columns the
submit wrote).

A job's request and class never change, so the caller keeps them (``JobFacts`` by job id) and
only new jobs' ``state`` is read and parsed: parsing every open job's state at every refresh,
in a thread holding the interpreter lock, was what held the API's status reads back (their p99)
whenever a few hundred jobs waited.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from leasehold.records.video.jobs import VideoJobRecord
from video_policy.eta import JobShape, QueuedJob, shape_of
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


@dataclass(frozen=True)
class JobFacts:
    """What a plan needs of a job's ``state`` that never changes: its cost shape and class."""

    shape: JobShape
    gpu_class: str | None


# Rows whose state is read per query (an IN list SQLite and Postgres both take comfortably).
STATE_BATCH = 500


def _epoch(value: datetime | None) -> float | None:
    if value is None:
        return None
    # SQLite hands back naive datetimes for timezone-aware columns; they were written in UTC.
    return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).timestamp()


def open_jobs(
    db: sessionmaker, spec: VideoModelSpec, facts: MutableMapping[str, JobFacts] | None = None
) -> list[OpenJob]:
    """Every open job of ``spec``'s model, oldest first.

    ``facts``: what earlier calls learnt of jobs' states (updated here: new jobs added, closed
    ones dropped); without it every state is read.
    """
    known: MutableMapping[str, JobFacts] = {} if facts is None else facts
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
    )
    with db() as session:
        rows = session.execute(
            select(*columns)
            .where(VideoJobRecord.model == spec.name, VideoJobRecord.status.in_(OPEN_STATUSES))
            .order_by(VideoJobRecord.created_at, VideoJobRecord.job_id)
        ).all()
        missing = [row.job_id for row in rows if row.job_id not in known]
        for first in range(0, len(missing), STATE_BATCH):
            batch = missing[first : first + STATE_BATCH]
            for job_id, state in session.execute(
                select(VideoJobRecord.job_id, VideoJobRecord.state).where(VideoJobRecord.job_id.in_(batch))
            ):
                request = VideoRequest.model_validate(state["request"])
                known[job_id] = JobFacts(shape=shape_of(spec, request), gpu_class=state.get("gpu_class"))
    open_ids = {row.job_id for row in rows}
    for job_id in [job_id for job_id in known if job_id not in open_ids]:
        del known[job_id]
    jobs = []
    for row in rows:
        fact = known.get(row.job_id)
        if fact is None:
            continue  # deleted between the two reads
        job = QueuedJob(
            job_id=row.job_id,
            tenant_id=row.tenant_id,
            user_id=row.user_id,
            tier=row.tier,
            created_at=_epoch(row.created_at) or 0.0,
            shape=fact.shape,
            fairness_key=row.fairness_key or row.tier,
            fairness_weight=row.fairness_weight or 1.0,
        )
        jobs.append(
            OpenJob(
                job=job,
                generating=row.status == VideoStatus.IN_PROGRESS.value,
                started_at=_epoch(row.started_at),
                attempts_started=row.attempts_started or 0,
                gpu_class=fact.gpu_class,
            )
        )
    return jobs
