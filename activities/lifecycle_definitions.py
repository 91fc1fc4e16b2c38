"""The lifecycle activities the lifecycle workflows call, as definitions: name, input, result.

The implementations (``activities.video.lifecycle``, ``activities.ci.lifecycle``) need the
database and the object store; a workflow must not load either. So each implementation class
subclasses its definition here, which imports only temporalio and the payload types (as CI's
``activities.ci.definitions`` does). The names are what running executions scheduled; they
never change.
"""

from __future__ import annotations

from temporalio import activity

from workflows.lifecycle.types import (
    ACTIVITY_APPLY_CI_RETENTION,
    ACTIVITY_COMPACT_CI_LOGS,
    ACTIVITY_EXPIRE_VIDEOS,
    ACTIVITY_SWEEP_VIDEO_ORPHANS,
    BatchResult,
    LifecycleBatch,
)


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


class CILifecycleDefinition:
    """Implemented by ``activities.ci.lifecycle.CILifecycleActivities`` (orchestration worker)."""

    @activity.defn(name=ACTIVITY_COMPACT_CI_LOGS)
    def compact_ci_logs(self, batch: LifecycleBatch) -> BatchResult:
        """Compact the log chunks of final attempts of finished runs."""
        raise NotImplementedError

    @activity.defn(name=ACTIVITY_APPLY_CI_RETENTION)
    def apply_ci_retention(self, batch: LifecycleBatch) -> BatchResult:
        """Delete runs and pushes past their tenant's retention, with their logs."""
        raise NotImplementedError
