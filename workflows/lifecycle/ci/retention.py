"""``CIRetentionWorkflow``: one tick of a lifecycle schedule.

Delete CI runs (rows and logs) and pushes past their tenant's retention.

Started by its Temporal Schedule (overlap SKIP: one tick at a time); the work, its safety and
its idempotence are the activity's (``activities.ci.lifecycle``, defined in ``activities.ci.definitions``).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.ci.definitions import CILifecycleDefinition
    from workflows.lifecycle.batches import run_batches
    from workflows.lifecycle.types import LifecycleInput, LifecycleResult


# Pinned (the orchestration worker's default): one schedule tick, a few batches; the next
# tick starts on the current build.
@workflow.defn
class CIRetentionWorkflow:
    """Delete CI runs (rows and logs) and pushes past their tenant's retention."""

    @workflow.run
    async def run(self, input: LifecycleInput) -> LifecycleResult:
        return await run_batches(CILifecycleDefinition.apply_ci_retention, input)
