"""The CI lifecycle workflows, each one tick of its lifecycle schedule.

``CILogCompactionWorkflow`` compacts the log chunks of finished CI attempts into one object
each, with a byte-range index; ``CIRetentionWorkflow`` deletes CI runs (rows and logs) and
pushes past their tenant's retention.

Started by their Temporal Schedules (overlap SKIP: one tick at a time); the work, its safety and
its idempotence are the activities' (``activities.ci.lifecycle``, defined in ``activities.ci.definitions``).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.ci.definitions import CILifecycleDefinition
    from workflows.lifecycle.batches import run_batches
    from workflows.lifecycle.types import LifecycleInput, LifecycleResult


# Both pinned (the orchestration worker's default): one schedule tick, a few batches; the next
# tick starts on the current build.
@workflow.defn
class CILogCompactionWorkflow:
    """Compact the log chunks of finished CI attempts into one object each, with a byte-range index."""

    @workflow.run
    async def run(self, input: LifecycleInput) -> LifecycleResult:
        return await run_batches(CILifecycleDefinition.compact_ci_logs, input)


@workflow.defn
class CIRetentionWorkflow:
    """Delete CI runs (rows and logs) and pushes past their tenant's retention."""

    @workflow.run
    async def run(self, input: LifecycleInput) -> LifecycleResult:
        return await run_batches(CILifecycleDefinition.apply_ci_retention, input)
