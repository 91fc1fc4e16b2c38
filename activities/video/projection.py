"""The read model's writer for video jobs: a job's snapshot into its ``video_jobs`` row.

``VideoJobWorkflow`` calls this at its transitions (coalesced: at most one write in flight) on
the orchestration worker. Every write carries the workflow's history length as its version and
goes through ``write_versioned``, so a retried, duplicated or late snapshot never overwrites a
newer one and the row converges on the job's outcome.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy.orm import sessionmaker
from temporalio import activity

from activities.video.definitions import PROJECT_VIDEO_JOB, VideoProjectionDefinition
from leasehold.db_retry import DEFAULT_FAILOVER_SECONDS, in_activity
from leasehold.records.base import utcnow
from leasehold.records.versioned import write_versioned
from leasehold.records.video.jobs import VideoJobRecord
from workflows.video.types import TERMINAL_STATUSES, ProjectionResult, ProjectVideoJobInput, VideoJobState, VideoStatus

log = logging.getLogger(__name__)


def row_values(state: VideoJobState) -> dict[str, Any]:
    """The ``video_jobs`` columns a snapshot fills: the indexed ones derived from the state, and
    the state itself. The API's dispatch columns (fairness) are not the workflow's to write."""
    return {
        "tenant_id": state.tenant_id,
        "user_id": state.user_id,
        "model": state.request.model,
        "tier": state.tier,
        "status": state.status.value,
        "request_hash": state.request_hash,
        # Only a started workflow writes snapshots.
        "engine_started": True,
        "attempts_started": state.attempts_started,
        "created_at": state.created_at,
        "started_at": state.started_at,
        "completed_at": state.completed_at,
        "expires_at": state.expires_at,
        "updated_at": utcnow(),
        "state": state.model_dump(mode="json"),
    }


# Why a job whose execution was closed from outside failed, by how it closed.
LOST_EXECUTION_MESSAGES = {
    "terminated": "the job's execution was terminated outside leasehold (an operator's terminate)",
    "timed_out": "the job's execution ran past the engine's execution timeout",
}


def close_lost_job(db: sessionmaker, job_id: str, version: int, closed_at: datetime | None, code: str) -> bool:
    """Mark an open row ``failed`` whose execution was closed without its workflow's last
    snapshot (terminated or timed out: the workflow never ran again to write it); ``True`` if
    this call did.

    ``version`` is the closed execution's history length: above every snapshot the workflow
    wrote, so nothing it sent late can reopen the row, and a rebuild finds it final.
    """
    with db.begin() as session:
        row = session.get(VideoJobRecord, job_id)
        if row is None or row.status in {s.value for s in TERMINAL_STATUSES} or row.status == VideoStatus.EXPIRED:
            return False
        state = VideoJobState.model_validate(row.state)
        state.status = VideoStatus.FAILED
        state.error_code = code
        state.error_message = LOST_EXECUTION_MESSAGES.get(code, "the job's execution closed without a result")
        state.completed_at = closed_at or utcnow()
        values = row_values(state)
        # The API's dispatch columns stay as they are (row_values leaves them out).
        return write_versioned(session, VideoJobRecord.__table__, {"job_id": job_id}, values, version)  # type: ignore[arg-type]


class VideoProjectionActivities(VideoProjectionDefinition):
    """Writes video job snapshots to the read model; the session factory is injected."""

    def __init__(self, db: sessionmaker, failover_seconds: float = DEFAULT_FAILOVER_SECONDS) -> None:
        self._db = db
        # Waited out within the attempt (up to its timeout), then by Temporal's retries: a
        # versioned write is safe to repeat.
        self._failover_seconds = failover_seconds

    @activity.defn(name=PROJECT_VIDEO_JOB)
    def project_video_job(self, input: ProjectVideoJobInput) -> ProjectionResult:
        """Apply ``input.state`` to the job's row unless the row already holds a newer version."""

        def write() -> bool:
            with self._db.begin() as session:
                return write_versioned(
                    session,
                    VideoJobRecord.__table__,  # type: ignore[arg-type]
                    {"job_id": input.state.job_id},
                    row_values(input.state),
                    input.version,
                )

        what = f"job {input.state.job_id} v{input.version}"
        applied = in_activity(write, self._failover_seconds, what, log)
        state = input.state
        log.debug("job %s snapshot v%d (%s): applied=%s", state.job_id, input.version, state.status, applied)
        return ProjectionResult(applied=applied)
