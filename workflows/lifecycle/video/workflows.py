"""The video lifecycle workflows, each one tick of its lifecycle schedule.

``VideoExpiryWorkflow`` expires completed videos whose ``expires_at`` passed;
``VideoOrphanSweepWorkflow`` deletes what closed video jobs left in the store.

Started by their Temporal Schedules (overlap SKIP: one tick at a time); the work, its safety and
its idempotence are the activities' (``activities.video.lifecycle``, defined in
``activities.video.definitions``).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.video.definitions import VideoLifecycleDefinition
    from workflows.lifecycle.batches import run_batches
    from workflows.lifecycle.types import LifecycleInput, LifecycleResult


# Both pinned (the orchestration worker's default): one schedule tick, a few batches; the next
# tick starts on the current build.
@workflow.defn
class VideoExpiryWorkflow:
    """Expire completed videos whose ``expires_at`` passed: delete their content, mark them ``expired``."""

    @workflow.run
    async def run(self, input: LifecycleInput) -> LifecycleResult:
        return await run_batches(VideoLifecycleDefinition.expire_videos, input)


@workflow.defn
class VideoOrphanSweepWorkflow:
    """Delete what closed video jobs left in the store (attempts that never won, checkpoints)."""

    @workflow.run
    async def run(self, input: LifecycleInput) -> LifecycleResult:
        return await run_batches(VideoLifecycleDefinition.sweep_video_orphans, input)
