"""A run's concurrency groups (``CIConcurrencyGroupWorkflow``): the run's, and its jobs'."""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from workflows.ci.concurrency import (
        MAX_GROUP_CHARS,
        SIGNAL_GROUP_ACQUIRE,
        SIGNAL_GROUP_NOTICE,
        SIGNAL_GROUP_RELEASE,
        CIConcurrencyGroupWorkflow,
        group_workflow_id,
    )
    from workflows.ci.event import push_github_context
    from workflows.ci.expressions import ExpressionError, interpolate, truthy
    from workflows.ci.matrix import evaluate_value
    from workflows.ci.run_slots import RunSlots
    from workflows.ci.types.concurrency import GroupNotice, GroupOutcome, GroupRelease, GroupRequest, GroupState
    from workflows.ci.types.run import JOB_FINAL_STATUSES, JobState, JobStatus
    from workflows.ci.types.spec import ConcurrencySpec


class RunGroups(RunSlots):
    """Membership of the run and its job rounds in concurrency groups."""

    def _job_group_context(self, job: JobState) -> dict[str, object]:
        context = self._strategy_context(job)
        context["matrix"] = dict(job.matrix)
        context["strategy"] = {"job-index": job.job_index, "job-total": job.job_total} if job.matrix_of else {}
        return context

    def _evaluate_group(self, spec: ConcurrencySpec, context: dict[str, object]) -> tuple[str, bool]:
        group = interpolate(spec.group, dict(context))[:MAX_GROUP_CHARS]
        if not group.strip():
            raise ExpressionError("the concurrency group evaluated to an empty name")
        cancel = spec.cancel_in_progress
        if isinstance(cancel, str):
            cancel = truthy(evaluate_value(cancel, dict(context)))
        return group, bool(cancel)

    def _group_reason(self, group: str) -> str:
        return f"cancelled: a newer run is waiting in concurrency group {group!r}"

    async def _enter_group(self, group: str, key: str, cancel_in_progress: bool, job_id: str) -> GroupOutcome | None:
        """Ask the tenant's group for a place and wait for its answer (``None``: stopped waiting
        because the job was cancelled meanwhile). ``job_id`` is "" for the whole run."""
        inp = self._inp
        self._group_keys[key] = job_id
        req = GroupRequest(holder=workflow.info().workflow_id, key=key, cancel_in_progress=cancel_in_progress)
        # No such group yet (or it ended idle): it starts holding this request.
        await self._signal_or_start(
            group_workflow_id(inp.push.tenant_id, group),
            SIGNAL_GROUP_ACQUIRE,
            req,
            CIConcurrencyGroupWorkflow.run,
            GroupState(tenant_id=inp.push.tenant_id, group=group, pending=req),
        )
        await workflow.wait_condition(lambda: key in self._group_notices or bool(job_id and job_id in self._abort_wait))
        return self._group_notices.get(key)

    def _leave_group(self, group: str, key: str) -> None:
        self._releases.append(asyncio.create_task(self._release_group(group, key)))

    async def _release_group(self, group: str, key: str) -> None:
        try:
            await workflow.get_external_workflow_handle(group_workflow_id(self._inp.push.tenant_id, group)).signal(
                SIGNAL_GROUP_RELEASE, GroupRelease(holder=workflow.info().workflow_id, key=key)
            )
        except FailureError:
            workflow.logger.warning("concurrency group gone; nothing to release for %s", key)

    @workflow.signal(name=SIGNAL_GROUP_NOTICE)
    def group_notice(self, notice: GroupNotice) -> None:
        """A concurrency group's answer: granted, superseded while pending, or preempted while running."""
        if notice.key not in self._group_keys:
            return
        job_id = self._group_keys[notice.key]
        if notice.outcome == GroupOutcome.PREEMPTED:
            self._preempted.add(notice.key)
            reason = f"cancelled by a newer run in concurrency group {notice.group!r} (cancel-in-progress)"
            if not job_id:
                current = self._run_group is not None and self._run_group[1] == notice.key
                if current and self._state.finished_at is None and not self._state.cancel_requested:
                    self._state.error = reason
                    self._cancel_jobs()
            elif job_id in self._handles:
                self._cancel_reasons[job_id] = reason
                self._cancelling.add(job_id)
                self._handles[job_id].cancel()
            elif job_id in self._tasks:
                self._cancel_reasons[job_id] = reason
                self._abort_wait.add(job_id)
        else:
            self._group_notices.setdefault(notice.key, notice.outcome)
        self._dirty = True

    async def _enter_run_group(self) -> bool:
        """Workflow-level ``concurrency``: the run waits for its place before any job starts.
        False when it must not run (superseded while pending, cancelled while waiting, or its
        group could not be evaluated); its jobs have been ended then."""
        inp = self._inp
        assert inp.spec is not None and inp.spec.concurrency is not None
        context: dict[str, object] = {
            "github": push_github_context(inp.push, inp.run_id, self._state.workflow_name),
            "vars": dict(inp.push.variables),
            "inputs": dict(inp.push.inputs),
        }
        try:
            group, cancel = self._evaluate_group(inp.spec.concurrency, context)
        except ExpressionError as exc:
            self._end_unstarted(JobStatus.FAILURE, f"concurrency: {exc}")
            return False
        self._state.concurrency_group = group
        key = f"@run#{self._state.retries}"
        self._run_group = (group, key)
        try:
            outcome = await self._enter_group(group, key, cancel, "")
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            self._state.cancel_requested = True
            self._end_unstarted(JobStatus.CANCELLED, "cancelled while waiting for its concurrency group")
            return False
        if outcome == GroupOutcome.GRANTED and key not in self._preempted:
            return True
        self._state.cancel_requested = True
        self._end_unstarted(JobStatus.CANCELLED, self._group_reason(group))
        return False

    def _end_unstarted(self, status: JobStatus, reason: str) -> None:
        self._state.error = reason
        for job in self._state.jobs:
            if job.status not in JOB_FINAL_STATUSES:
                self._finish_job(job, status, error=reason)
