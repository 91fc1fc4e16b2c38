"""``VideoExpiryWorkflow``: one tick of a lifecycle schedule.

Expire completed videos whose ``expires_at`` passed: delete their content, mark them ``expired``.

Started by its Temporal Schedule (overlap SKIP: one tick at a time); the work, its safety and
its idempotence are the activity's (``activities.video.lifecycle``, defined in ``activities.video.definitions``).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.video.definitions import VideoLifecycleDefinition
    from workflows.lifecycle.batches import run_batches
    from workflows.lifecycle.types import LifecycleInput, LifecycleResult


# Pinned (the orchestration worker's default): one schedule tick, a few batches; the next
# tick starts on the current build.
@workflow.defn
class VideoExpiryWorkflow:
    """Expire completed videos whose ``expires_at`` passed: delete their content, mark them ``expired``."""

    @workflow.run
    async def run(self, input: LifecycleInput) -> LifecycleResult:
        return await run_batches(VideoLifecycleDefinition.expire_videos, input)
