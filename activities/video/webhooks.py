"""The webhook activity the video workflow calls, as a definition: name, input and result.

The implementation (``activities.video.webhook_delivery``) needs the database, the secrets
keyring and an HTTP client; the workflow imports only this module. The name is what running
executions scheduled; it never changes.
"""

from __future__ import annotations

from temporalio import activity

from workflows.video.types import VideoEventInput, VideoEventResult

DELIVER_VIDEO_EVENT = "deliver_video_event"


class VideoWebhookDefinition:
    """Implemented by ``activities.video.webhook_delivery.VideoWebhookActivities`` (orchestration worker)."""

    @activity.defn(name=DELIVER_VIDEO_EVENT)
    def deliver_video_event(self, input: VideoEventInput) -> VideoEventResult:
        """Deliver ``input.event_type`` of the job to every endpoint of its owner, at least once."""
        raise NotImplementedError
