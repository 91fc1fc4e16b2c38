"""The video activities the workflow calls, as definitions: registered name, input and result.

The implementations need the database (SQLAlchemy and the record tables); a workflow must not
load them (the orchestration worker and the API import the workflow). So each implementation
subclasses its definition here, which imports only temporalio and the payload types. The
names are what running executions scheduled; they never change.
"""

from __future__ import annotations

from temporalio import activity

from workflows.video.types import ProjectionResult, ProjectVideoJobInput

PROJECT_VIDEO_JOB = "project_video_job"


class VideoProjectionDefinition:
    """Implemented by ``activities.video.projection.VideoProjectionActivities`` (orchestration worker)."""

    @activity.defn(name=PROJECT_VIDEO_JOB)
    def project_video_job(self, input: ProjectVideoJobInput) -> ProjectionResult:
        """Write a job's snapshot to its ``video_jobs`` row unless the row holds a newer version."""
        raise NotImplementedError
