"""Video lifecycle on the orchestration worker: expiring completed videos, sweeping orphans.

Both read the read model (``video_jobs``) to find work and delete from the object store; both
are safe to run twice, concurrently, or after a crash half-way:

* Expiry deletes a job's content first and marks the row ``expired`` after, so a crash in
  between leaves a ``completed`` row whose content is (partly) gone; the next batch finds the
  row again and finishes. The mark is a versioned write at ``LIFECYCLE_VERSION``, above any
  snapshot the engine can still send, so a late snapshot cannot bring the job back.
* The orphan sweep touches only jobs whose row is terminal and older than a grace period, and
  keeps the result a completed job points at. Objects of a job with no row (or a live one) are
  never touched. What a write killed half-way left there (``ObjectStore.delete_interrupted``:
  no object, so no listing shows it) goes too, once older than an hour.

A database that fails over mid-batch is waited out in place (``leasehold.db_retry``,
heartbeating), the batch starting again from its cursor: every row of it is idempotent.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, and_, or_, select
from sqlalchemy.orm import sessionmaker
from temporalio import activity

from activities.video.definitions import VideoLifecycleDefinition
from leasehold.db_retry import DEFAULT_FAILOVER_SECONDS, in_activity
from leasehold.records.base import utcnow
from leasehold.records.versioned import LIFECYCLE_VERSION, write_versioned
from leasehold.records.video.jobs import VideoJobRecord
from leasehold.storage import ObjectStore
from workflows.lifecycle.types import (
    ACTIVITY_EXPIRE_VIDEOS,
    ACTIVITY_SWEEP_VIDEO_ORPHANS,
    BatchResult,
    LifecycleBatch,
)
from workflows.video.types import TERMINAL_STATUSES, VideoStatus, job_object_prefix

log = logging.getLogger(__name__)

# The status of a job whose content the lifecycle deleted (not a ``VideoStatus``: the engine
# never reports it, only the read model holds it).
EXPIRED = "expired"
CLOSED_STATUSES = tuple(sorted({s.value for s in TERMINAL_STATUSES} | {EXPIRED}))


def result_keys(state: dict[str, Any]) -> list[str]:
    """The objects a job's recorded result points at (video, thumbnail, spritesheet)."""
    result = state.get("result") or {}
    keys = (result.get("video_key"), result.get("thumbnail_key"), result.get("spritesheet_key"))
    return [key for key in keys if key]


def delete_job_content(store: ObjectStore, job_id: str, state: dict[str, Any]) -> int:
    """Delete everything of one job: its result and all under its prefix. Idempotent."""
    deleted = 0
    for key in result_keys(state):
        store.delete(key)
        deleted += 1
    prefix = job_object_prefix(job_id) + "/"
    return deleted + store.delete_prefix(prefix) + store.delete_interrupted(prefix)


def mark_expired(factory: sessionmaker, job_id: str, now: datetime) -> bool:
    """Mark a completed job ``expired`` (row status and its state); ``True`` if this call did."""
    with factory.begin() as session:
        row = session.get(VideoJobRecord, job_id, with_for_update=True)
        if row is None or row.status != VideoStatus.COMPLETED.value:
            return False
        state = dict(row.state, status=EXPIRED)
        values = {"status": EXPIRED, "state": state, "updated_at": now}
        table = cast(Table, VideoJobRecord.__table__)
        return write_versioned(session, table, {"job_id": job_id}, values, LIFECYCLE_VERSION)


def _as_utc(value: datetime) -> datetime:
    # SQLite hands timestamps back naive; they were written in UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class VideoLifecycleActivities(VideoLifecycleDefinition):
    """Expiry and orphan sweeps of video jobs; the store and the database are injected."""

    def __init__(
        self, store: ObjectStore, factory: sessionmaker, failover_seconds: float = DEFAULT_FAILOVER_SECONDS
    ) -> None:
        self._store = store
        self._db = factory
        self._failover_seconds = failover_seconds

    @activity.defn(name=ACTIVITY_EXPIRE_VIDEOS)
    def expire_videos(self, batch: LifecycleBatch) -> BatchResult:
        """Expire up to ``batch_size`` completed jobs whose ``expires_at`` has passed."""
        return in_activity(lambda: self._expire(batch), self._failover_seconds, "video expiry", log)

    def _expire(self, batch: LifecycleBatch) -> BatchResult:
        now = utcnow()
        size = batch.input.batch_size
        with self._db() as session:
            rows = session.execute(
                select(VideoJobRecord.job_id, VideoJobRecord.state)
                .where(VideoJobRecord.status == VideoStatus.COMPLETED.value, VideoJobRecord.expires_at <= now)
                .order_by(VideoJobRecord.expires_at, VideoJobRecord.job_id)
                .limit(size)
            ).all()
        result = BatchResult(done=len(rows) < size)
        for job_id, state in rows:
            activity.heartbeat(job_id)
            result.deleted_objects += delete_job_content(self._store, job_id, state)
            if mark_expired(self._db, job_id, now):
                result.processed += 1
            else:
                result.skipped += 1
        log.info("expired %d video jobs (%d objects)", result.processed, result.deleted_objects)
        return result

    @activity.defn(name=ACTIVITY_SWEEP_VIDEO_ORPHANS)
    def sweep_video_orphans(self, batch: LifecycleBatch) -> BatchResult:
        """Delete what closed jobs left under their prefixes (stale attempts, checkpoints).

        Pages through jobs closed between ``grace + window`` and ``grace`` ago, ``batch_size``
        at a time, by (completed_at, job_id).
        """
        return in_activity(lambda: self._sweep(batch), self._failover_seconds, "video orphan sweep", log)

    def _sweep(self, batch: LifecycleBatch) -> BatchResult:
        now = utcnow()
        inp = batch.input
        newest = now - timedelta(seconds=inp.grace_seconds)
        oldest = newest - timedelta(seconds=inp.window_seconds)
        job = VideoJobRecord
        query = select(job.job_id, job.status, job.state, job.completed_at).where(
            job.status.in_(CLOSED_STATUSES), job.completed_at > oldest, job.completed_at <= newest
        )
        if batch.cursor:
            at_text, after_id = batch.cursor.split("|", 1)
            at = datetime.fromisoformat(at_text)
            query = query.where(or_(job.completed_at > at, and_(job.completed_at == at, job.job_id > after_id)))
        with self._db() as session:
            rows = session.execute(query.order_by(job.completed_at, job.job_id).limit(inp.batch_size)).all()
        result = BatchResult(done=len(rows) < inp.batch_size)
        for job_id, status, state, completed_at in rows:
            activity.heartbeat(job_id)
            keep = set(result_keys(state)) if status == VideoStatus.COMPLETED.value else set()
            prefix = job_object_prefix(job_id) + "/"
            orphans = [key for key in self._store.list(prefix) if key not in keep]
            for key in orphans:
                self._store.delete(key)
            # Interrupted writes of any of its attempts (a checkpoint the worker was killed in).
            interrupted = self._store.delete_interrupted(prefix)
            result.deleted_objects += len(orphans) + interrupted
            if orphans or interrupted:
                result.processed += 1
            else:
                result.skipped += 1
            result.cursor = f"{_as_utc(completed_at).isoformat()}|{job_id}"
        if result.deleted_objects:
            log.info("swept %d orphaned objects of %d video jobs", result.deleted_objects, result.processed)
        return result
