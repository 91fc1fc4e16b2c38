"""Housekeeping of video jobs on the orchestration worker: deleting checkpoints and leftovers."""

from __future__ import annotations

import logging

from temporalio import activity

from activities.video.definitions import DELETE_VIDEO_OBJECTS, VideoHousekeepingDefinition
from leasehold.storage import ObjectStore
from workflows.video.types import CleanupInput, CleanupResult

log = logging.getLogger(__name__)


class VideoHousekeepingActivities(VideoHousekeepingDefinition):
    """Object-store cleanup for video jobs; the store is injected."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    @activity.defn(name=DELETE_VIDEO_OBJECTS)
    def delete_video_objects(self, input: CleanupInput) -> CleanupResult:
        """Delete every object under ``input.prefix`` except ``input.keep``.

        Idempotent, so retries are safe: checkpoints, stale attempts' outputs and partial
        uploads all go; the final video and thumbnail the job recorded stay.
        """
        prefix = input.prefix if input.prefix.endswith("/") else input.prefix + "/"
        keep = set(input.keep)
        deleted = 0
        for key in self._store.list(prefix):
            if key not in keep:
                self._store.delete(key)
                deleted += 1
        log.info("deleted %d objects under %s (kept %d)", deleted, prefix, len(keep))
        return CleanupResult(deleted=deleted)
