"""The video activities the workflows call (the job's, and the lifecycle's), as definitions:
registered name, input and result.

The implementations need the database (SQLAlchemy and the record tables) and the object store;
a workflow must not load them (the orchestration worker and the API import the workflows). So
each implementation subclasses its definition here, which imports only temporalio and the
payload types. The names are what running executions scheduled; they never change.
"""

from __future__ import annotations

from temporalio import activity

from workflows.lifecycle.types import ACTIVITY_EXPIRE_VIDEOS, ACTIVITY_SWEEP_VIDEO_ORPHANS, BatchResult, LifecycleBatch
from workflows.video.types import (
    CleanupInput,
    CleanupResult,
    GenerateInput,
    GenerateResult,
    ProjectionResult,
    ProjectVideoJobInput,
    VideoEventInput,
    VideoEventResult,
)

GENERATE_VIDEO = "generate_video"
DELETE_VIDEO_OBJECTS = "delete_video_objects"
PROJECT_VIDEO_JOB = "project_video_job"
DELIVER_VIDEO_EVENT = "deliver_video_event"


class VideoGenerationDefinition:
    """Implemented by ``activities.video.generation.VideoGenerationActivities`` (GPU workers)."""

    @activity.defn(name=GENERATE_VIDEO)
    def generate_video(self, input: GenerateInput) -> GenerateResult:
        """Run (or resume) one job on a GPU, heartbeating its progress; the video's keys."""
        raise NotImplementedError


class VideoHousekeepingDefinition:
    """Implemented by ``activities.video.housekeeping.VideoHousekeepingActivities`` (orchestration worker)."""

    @activity.defn(name=DELETE_VIDEO_OBJECTS)
    def delete_video_objects(self, input: CleanupInput) -> CleanupResult:
        """Delete every object under ``input.prefix`` except ``input.keep``."""
        raise NotImplementedError


class VideoProjectionDefinition:
    """Implemented by ``activities.video.projection.VideoProjectionActivities`` (orchestration worker)."""

    @activity.defn(name=PROJECT_VIDEO_JOB)
    def project_video_job(self, input: ProjectVideoJobInput) -> ProjectionResult:
        """Write a job's snapshot to its ``video_jobs`` row unless the row holds a newer version."""
        raise NotImplementedError


class VideoWebhookDefinition:
    """Implemented by ``activities.video.webhooks.VideoWebhookActivities`` (orchestration worker)."""

    @activity.defn(name=DELIVER_VIDEO_EVENT)
    def deliver_video_event(self, input: VideoEventInput) -> VideoEventResult:
        """Deliver ``input.event_type`` of the job to every endpoint of its owner, at least once."""
        raise NotImplementedError


class VideoLifecycleDefinition:
    """Implemented by ``activities.video.lifecycle.VideoLifecycleActivities`` (orchestration worker)."""

    @activity.defn(name=ACTIVITY_EXPIRE_VIDEOS)
    def expire_videos(self, batch: LifecycleBatch) -> BatchResult:
        """Delete the content of completed jobs past ``expires_at`` and mark them ``expired``."""
        raise NotImplementedError

    @activity.defn(name=ACTIVITY_SWEEP_VIDEO_ORPHANS)
    def sweep_video_orphans(self, batch: LifecycleBatch) -> BatchResult:
        """Delete objects closed jobs left under their prefixes, except their results."""
        raise NotImplementedError
