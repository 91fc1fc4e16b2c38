"""The read model's writer for video jobs: a job's snapshot into its ``video_jobs`` row.

``VideoJobWorkflow`` calls this at its transitions (coalesced: at most one write in flight) on
the orchestration worker. Every write carries the workflow's history length as its version and
goes through ``write_versioned``, so a retried, duplicated or late snapshot never overwrites a
newer one and the row converges on the job's outcome.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.orm import sessionmaker
from temporalio import activity

from activities.video.definitions import PROJECT_VIDEO_JOB, VideoProjectionDefinition
from leasehold.database import utcnow
from leasehold.records.versioned import write_versioned
from leasehold.records.video.jobs import VideoJobRecord
from workflows.video.types import ProjectionResult, ProjectVideoJobInput, VideoJobState

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


class VideoProjectionActivities(VideoProjectionDefinition):
    """Writes video job snapshots to the read model; the session factory is injected."""

    def __init__(self, db: sessionmaker) -> None:
        self._db = db

    @activity.defn(name=PROJECT_VIDEO_JOB)
    def project_video_job(self, input: ProjectVideoJobInput) -> ProjectionResult:
        """Apply ``input.state`` to the job's row unless the row already holds a newer version."""
        with self._db.begin() as session:
            applied = write_versioned(
                session,
                VideoJobRecord.__table__,  # type: ignore[arg-type]
                {"job_id": input.state.job_id},
                row_values(input.state),
                input.version,
            )
        state = input.state
        log.debug("job %s snapshot v%d (%s): applied=%s", state.job_id, input.version, state.status, applied)
        return ProjectionResult(applied=applied)
