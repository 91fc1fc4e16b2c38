"""``CIPushWorkflow``: a push (repo + commit + ref) turned into one run per triggered workflow file.

Its start is the API's durable acceptance of a webhook. Git work happens on a CI worker (the
control queue); this workflow then starts each ``CIRunWorkflow`` as an abandoned child whose
id is derived from repo + commit + file, so duplicates are impossible: a second start of the
same id is refused by the server and counted as "already exists".
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import ActivityError, ApplicationError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from activities.ci.definitions import CIListingDefinition, CIProjectionDefinition, CIScheduleDefinition
    from workflows import search_attributes as sa
    from workflows.ci.ids import push_id, run_id, run_workflow_id
    from workflows.ci.run import CIRunWorkflow
    from workflows.ci.types.projection import CIPushSnapshot, current_snapshot_version
    from workflows.ci.types.push import (
        DISPATCH_REJECTED,
        PUSH_GIT_FAILED,
        CIPushInput,
        CIPushState,
        ListWorkflowsInput,
        ListWorkflowsResult,
        PushStatus,
        RunRef,
        WorkflowFile,
        variables_size,
    )
    from workflows.ci.types.run import CIRunInput, RunStatus
    from workflows.ci.types.schedules import SYNC_RETRY, SYNC_START_TO_CLOSE, SyncSchedulesInput
    from workflows.queues import (
        CI_LIST_WORKFLOWS_HEARTBEAT_SECONDS,
        CI_LIST_WORKFLOWS_MAX_ATTEMPTS,
        CI_LIST_WORKFLOWS_TIMEOUT_SECONDS,
        CI_PROJECTION_RETRY,
        CI_PROJECTION_SCHEDULE_TO_CLOSE,
        CI_PROJECTION_TIMEOUT,
        ci_control_queue,
        orchestration_queue,
    )
    from workflows.snapshots import SnapshotWriter


# Pinned (the orchestration worker's default): a push lists and starts its runs in seconds.
@workflow.defn
class CIPushWorkflow:
    """Lists the workflow files at the pushed commit and starts their runs."""

    @workflow.init
    def __init__(self, inp: CIPushInput) -> None:
        push = inp.push
        if push.event == "schedule" and not push.dispatch_key:
            # A tick of an on.schedule entry: the schedule appended its time to this id, which
            # names the tick's push and run (one run a tick, however often it is delivered).
            push = push.model_copy(update={"dispatch_key": workflow.info().workflow_id})
            inp = inp.model_copy(update={"push": push, "received_at": workflow.info().start_time})
        self._inp = inp
        self._state = CIPushState(push_id=push_id(push.repo_id, push.commit_sha, push.ref, push.dispatch_key))
        self._snapshots = SnapshotWriter(
            self._write_snapshot, f"push {self._state.push_id}", lambda: current_snapshot_version(workflow.info())
        )

    @workflow.query
    def state(self) -> CIPushState:
        return self._state

    @workflow.run
    async def run(self, inp: CIPushInput) -> CIPushState:
        inp = self._inp
        # "listing" at once: a redelivery after a failed listing must not read "failed" for long.
        self._snapshots.start()
        try:
            listing = await workflow.execute_activity_method(
                CIListingDefinition.list_workflows,
                ListWorkflowsInput(
                    repo_id=inp.push.repo_id,
                    clone_url=inp.push.clone_url,
                    commit_sha=inp.push.commit_sha,
                    ref=inp.push.ref,
                    event=inp.push.event,
                    base_ref=inp.push.pull_request.base_ref if inp.push.pull_request else None,
                    action=(inp.push.pull_request.action if inp.push.pull_request else inp.push.action) or None,
                    tenant_id=inp.push.tenant_id,
                    before=inp.push.before or None,
                    dispatch_workflow=inp.push.dispatch_workflow or None,
                    inputs=dict(inp.push.inputs),
                    dispatch_key=inp.push.dispatch_key,
                    triggering_workflow=inp.push.triggering_workflow,
                    triggering_branch=inp.push.triggering_branch,
                    variables_bytes=variables_size(inp.push.variables),
                    push=inp.push,
                ),
                task_queue=ci_control_queue(inp.push.queue_prefix),
                start_to_close_timeout=timedelta(seconds=CI_LIST_WORKFLOWS_TIMEOUT_SECONDS),
                heartbeat_timeout=timedelta(seconds=CI_LIST_WORKFLOWS_HEARTBEAT_SECONDS),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=1),
                    maximum_attempts=CI_LIST_WORKFLOWS_MAX_ATTEMPTS,
                    non_retryable_error_types=[PUSH_GIT_FAILED],
                ),
            )
        except ActivityError as err:
            self._state.status = PushStatus.FAILED
            self._state.error = str(err.cause or err)
            await self._close_snapshots()
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == DISPATCH_REJECTED:
                # A dispatch its workflow file refused: the caller is told which field.
                raise ApplicationError(self._state.error, *cause.details, type=DISPATCH_REJECTED) from err
            # Failing the workflow lets a redelivery of the same push try again.
            raise ApplicationError(self._state.error, type=PUSH_GIT_FAILED) from err

        if listing.commit_sha is not None:
            # A workflow_dispatch: its commit, full ref and checked inputs are known only now.
            resolved = inp.push.model_copy(
                update={"commit_sha": listing.commit_sha, "ref": listing.ref or inp.push.ref, "inputs": listing.inputs}
            )
            self._inp = inp = inp.model_copy(update={"push": resolved})

        if (
            inp.push.event == "push"
            and inp.push.default_branch
            and inp.push.ref == f"refs/heads/{inp.push.default_branch}"
        ):
            await self._sync_schedules(inp, listing)
        for file in listing.files:
            if not file.triggered:
                self._state.not_triggered.append(file.path)
                continue
            await self._start_run(inp, listing, file)
        self._state.status = PushStatus.DONE
        await self._close_snapshots()
        return self._state

    async def _sync_schedules(self, inp: CIPushInput, listing: ListWorkflowsResult) -> None:
        """The default branch moved: its files' ``on.schedule`` entries become the repository's
        Temporal Schedules (``activities.ci.schedules``). A failure is logged, never the push's."""
        schedules = {f.path: list(f.spec.on_schedule) for f in listing.files if f.spec and f.spec.on_schedule}
        try:
            await workflow.execute_activity_method(
                CIScheduleDefinition.sync_schedules,
                SyncSchedulesInput(push=inp.push, schedules=schedules, received_at=inp.received_at),
                task_queue=orchestration_queue(inp.push.queue_prefix),
                start_to_close_timeout=SYNC_START_TO_CLOSE,
                retry_policy=SYNC_RETRY,
            )
        except ActivityError as err:
            workflow.logger.warning("push %s: schedules not synced: %s", self._state.push_id, err.cause or err)

    async def _start_run(self, inp: CIPushInput, listing: ListWorkflowsResult, file: WorkflowFile) -> None:
        """Start the run of one triggered workflow file (once: a redelivered push finds it started)."""
        rid = run_id(inp.push.repo_id, inp.push.commit_sha, file.path, inp.push.event, inp.push.dispatch_key)
        wid = run_workflow_id(rid)
        created = True
        try:
            await workflow.start_child_workflow(
                CIRunWorkflow.run,
                CIRunInput(
                    push=inp.push,
                    run_id=rid,
                    workflow_path=file.path,
                    created_at=workflow.now(),
                    spec=file.spec,
                    spec_error=file.error,
                    push_id=self._state.push_id,
                    environments=listing.environments,
                    environment_variables=listing.environment_variables,
                    run_number=listing.run_numbers.get(file.path),
                    report_status=listing.report_status,
                    notify_workflow_run=file.path in listing.workflow_run_listened,
                ),
                id=wid,
                task_queue=orchestration_queue(inp.push.queue_prefix),
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=TypedSearchAttributes(
                    [
                        SearchAttributePair(sa.TENANT_ID, inp.push.tenant_id),
                        SearchAttributePair(sa.REPO_ID, inp.push.repo_id),
                        SearchAttributePair(sa.COMMIT_SHA, inp.push.commit_sha),
                        SearchAttributePair(sa.RUN_STATE, RunStatus.QUEUED.value),
                    ]
                ),
            )
        except WorkflowAlreadyStartedError:
            created = False
        self._state.runs.append(RunRef(run_id=rid, workflow_id=wid, workflow_path=file.path, created=created))

    async def _write_snapshot(self, version: int) -> None:
        push = self._inp.push
        await workflow.execute_activity_method(
            CIProjectionDefinition.project_ci_push,
            CIPushSnapshot.of(self._inp, self._state.model_copy(deep=True), version),
            task_queue=orchestration_queue(push.queue_prefix),
            start_to_close_timeout=CI_PROJECTION_TIMEOUT,
            schedule_to_close_timeout=CI_PROJECTION_SCHEDULE_TO_CLOSE,
            retry_policy=CI_PROJECTION_RETRY,
        )

    async def _close_snapshots(self) -> None:
        """Both ways out (runs started, or listing failed) leave the final state in the read model."""
        self._snapshots.changed()
        await self._snapshots.flush()
