"""The run's read model: its state written to SQL in the background, paced by the run's size."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.ci.definitions import CIProjectionDefinition
    from workflows.ci.run_fields import RunFields
    from workflows.ci.types.projection import CIRunSnapshot
    from workflows.queues import (
        CI_PROJECTION_RETRY,
        CI_PROJECTION_SCHEDULE_TO_CLOSE,
        CI_PROJECTION_TIMEOUT,
        orchestration_queue,
    )

# The interval between the starts of two read-model writes of a running run: a write carries
# the whole state (every job), so a larger run writes less often; its final state is written
# at once. Status shown by the API trails the engine by at most this much while jobs run.
SNAPSHOT_INTERVAL_MIN_SECONDS = 0.5
SNAPSHOT_INTERVAL_PER_JOB_SECONDS = 0.05
SNAPSHOT_INTERVAL_MAX_SECONDS = 5.0


class RunProjection(RunFields):
    """Writes the run's state to the read model (``SnapshotWriter``'s write and pace)."""

    async def _write_snapshot(self, version: int) -> None:
        await workflow.execute_activity_method(
            CIProjectionDefinition.project_ci_run,
            # No copy: the SDK converts an activity's input to its payload as it schedules it,
            # here, before any other code of the workflow runs.
            CIRunSnapshot(state=self._state, version=version),
            task_queue=orchestration_queue(self._inp.push.queue_prefix),
            start_to_close_timeout=CI_PROJECTION_TIMEOUT,
            schedule_to_close_timeout=CI_PROJECTION_SCHEDULE_TO_CLOSE,
            retry_policy=CI_PROJECTION_RETRY,
        )

    async def _pace_snapshot(self) -> None:
        """Hold the next read-model write back until the run's interval since the last one has
        passed (not when the run is closing: its final state goes out at once)."""
        if self._last_snapshot_at is not None and not self._snapshots.closing:
            wait = self._snapshot_interval() - (workflow.now() - self._last_snapshot_at).total_seconds()
            if wait > 0:
                try:
                    await workflow.wait_condition(lambda: self._snapshots.closing, timeout=wait)
                except TimeoutError:
                    pass
        self._last_snapshot_at = workflow.now()

    def _snapshot_interval(self) -> float:
        return min(
            SNAPSHOT_INTERVAL_MAX_SECONDS,
            max(SNAPSHOT_INTERVAL_MIN_SECONDS, SNAPSHOT_INTERVAL_PER_JOB_SECONDS * len(self._state.jobs)),
        )

    async def _close_snapshots(self) -> None:
        """Every way out of the run passes here: the read model gets the final state."""
        await self._snapshots.flush()
