"""A run's graph of jobs: needs and expression contexts, results, matrix expansion and cancellation."""

from __future__ import annotations

import json

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

with workflow.unsafe.imports_passed_through():
    from workflows.ci.event import push_github_context
    from workflows.ci.expressions import ExpressionError, StatusFunctions
    from workflows.ci.ids import idempotency_key
    from workflows.ci.matrix import (
        MAX_MATRIX_BYTES,
        MAX_RUN_COMBINATIONS,
        MatrixError,
        aggregate_result,
        combination_ids,
        combination_name,
        resolve_strategy,
    )
    from workflows.ci.run_attempts import RunAttempts
    from workflows.ci.types.job import AttemptStatus, JobResult, NeedResult
    from workflows.ci.types.run import JOB_FINAL_STATUSES, JobState, JobStatus, RunStatus
    from workflows.ci.types.spec import JobSpec


class RunGraph(RunAttempts):
    """The jobs of a run as a graph: what each needs and sees, how each ends, and what that ends."""

    def _spec_of(self, job_id: str) -> JobSpec | None:
        """The declared job a job state runs (a combination runs its matrix job's)."""
        job = self._state.job(job_id)
        return self._jobs.get(job.matrix_of if job is not None and job.matrix_of else job_id)

    def _succeeded(self, job: JobState) -> bool:
        return job.status == JobStatus.SUCCESS or job.allowed_failure

    def _ancestors(self, job: JobState) -> list[JobState]:
        seen: dict[str, JobState] = {}
        stack = list(job.needs)
        while stack:
            job_id = stack.pop()
            if job_id in seen:
                continue
            found = self._state.job(job_id)
            if found is not None:
                seen[job_id] = found
                stack.extend(found.needs)
        return list(seen.values())

    def _job_status_functions(self, job: JobState) -> StatusFunctions:
        ancestors = self._ancestors(job)
        cancelled = self._state.cancel_requested
        return StatusFunctions(
            success=not cancelled and all(self._succeeded(a) for a in ancestors),
            failure=any(a.status == JobStatus.FAILURE and not a.allowed_failure for a in ancestors),
            cancelled=cancelled,
        )

    def _needs_context(self, job: JobState) -> dict[str, NeedResult]:
        out: dict[str, NeedResult] = {}
        for job_id in job.needs:
            need = self._state.job(job_id)
            if need is None:
                continue
            result = "success" if need.allowed_failure else need.status.value
            out[job_id] = NeedResult(result=result, outputs=dict(need.outputs))
        return out

    def _job_context(self, job: JobState) -> dict[str, object]:
        inp = self._inp
        # The same github context the job itself sees (event_name, event, actor...), and the
        # workflow_dispatch inputs, so a job ``if:`` decides on what its steps would see.
        return {
            "github": push_github_context(inp.push, inp.run_id, self._state.workflow_name),
            "env": dict(inp.spec.env) if inp.spec else {},
            "needs": {k: v.model_dump() for k, v in self._needs_context(job).items()},
            # A job naming an environment sees its variables (read when the push was listed).
            "vars": inp.job_vars(job.environment),
            "inputs": dict(inp.push.inputs),
        }

    def _strategy_context(self, job: JobState) -> dict[str, object]:
        """Where a strategy is evaluated: ``github``, ``needs``, ``inputs``."""
        return {**self._job_context(job), "inputs": dict(self._inp.push.inputs)}

    def _dependents(self, job_id: str) -> list[str]:
        """``job_id`` and every job that needs it, directly or not, in file order."""
        found = {job_id}
        job = self._state.job(job_id)
        if job is not None and job.matrix_of:
            # A combination's result is part of its matrix job's, which its dependents need.
            found.add(job.matrix_of)
        changed = True
        while changed:
            changed = False
            for job in self._state.jobs:
                if job.job_id not in found and any(n in found for n in job.needs):
                    found.add(job.job_id)
                    changed = True
        return [j.job_id for j in self._state.jobs if j.job_id in found]

    def _record_result(self, job_id: str, round_: int, result: JobResult) -> None:
        job = self._state.job(job_id)
        if job is not None and job.round == round_ and self._take_reserved(job, result.attempt):
            # A pre-granted attempt that ended before it reported its start.
            self._record_attempt(job, result.attempt, result.worker, result.started_at or workflow.now())
        if job is None or job.round != round_ or result.attempt != job.attempt:
            workflow.logger.warning("ignoring stale result of %s attempt %s", job_id, result.attempt)
            return
        att = job.current_attempt()
        if att is not None:
            att.status = result.status
            att.finished_at = result.finished_at or workflow.now()
            att.exit_code = result.exit_code
            att.error = result.error
            att.steps = result.steps
            att.log = result.log
        job.exit_code = result.exit_code
        job.outputs = dict(result.outputs)
        if result.status == AttemptStatus.SUCCESS:
            self._finish_job(job, JobStatus.SUCCESS)
        elif result.status == AttemptStatus.CANCELLED:
            self._finish_job(job, JobStatus.CANCELLED, error=result.error)
        else:
            self._finish_job(job, JobStatus.FAILURE, error=result.error)

    def _record_error(self, job_id: str, round_: int, err: ActivityError) -> None:
        job = self._state.job(job_id)
        if job is None or job.round != round_:
            return
        cause = err.cause
        if isinstance(cause, CancelledError):
            self._record_cancelled(job_id, round_, "cancelled")
            return
        if isinstance(cause, ActivityTimeoutError):
            message = f"job activity timed out ({cause.type.name if cause.type else 'timeout'}): worker lost"
        elif cause is not None:
            message = str(cause)
        else:
            message = str(err)
        reserved = self._reserved.pop(job_id, None)
        never_started = isinstance(cause, ActivityTimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_START
        if reserved is not None and reserved[0] == round_ and not never_started:
            # The pre-granted attempt ran (the activity failed) without reporting its start.
            self._record_attempt(job, reserved[1], err.identity or "", None)
        att = job.current_attempt()
        if att is not None and att.status == AttemptStatus.RUNNING:
            att.status = AttemptStatus.LOST if isinstance(cause, ActivityTimeoutError) else AttemptStatus.ERROR
            att.finished_at = workflow.now()
            att.error = message
        self._finish_job(job, JobStatus.FAILURE, error=message)

    def _record_cancelled(self, job_id: str, round_: int, message: str) -> None:
        job = self._state.job(job_id)
        if job is None or job.round != round_:
            return
        att = job.current_attempt()
        if att is not None and att.status == AttemptStatus.RUNNING:
            att.status = AttemptStatus.CANCELLED
            att.finished_at = workflow.now()
        self._finish_job(job, JobStatus.CANCELLED, error=message)

    def _finish_job(self, job: JobState, status: JobStatus, error: str | None = None) -> None:
        job.status = status
        job.finished_at = workflow.now()
        if error is not None:
            job.error = error
        if status == JobStatus.CANCELLED and job.job_id in self._cancel_reasons:
            job.error = self._cancel_reasons.pop(job.job_id)
        # As the round ran it: continue-on-error may have come from an expression.
        spec = self._round_specs.get(job.job_id) or self._spec_of(job.job_id)
        job.allowed_failure = status == JobStatus.FAILURE and spec is not None and spec.continue_on_error
        self._dirty = True
        self._snapshots.changed()
        if job.matrix_of:
            self._combination_finished(job)
        for child_id in job.combinations:
            # A matrix job that ended before its combinations did (skipped, cancelled, or failed
            # to expand again on a retry): none of them may stay waiting in a finished run.
            child = self._state.job(child_id)
            if child is not None and child.status not in JOB_FINAL_STATUSES:
                child.status = JobStatus.SKIPPED if status == JobStatus.SUCCESS else status
                child.finished_at = workflow.now()
                child.error = f"its matrix job ended {status.value}"

    def _finish(self) -> None:
        state = self._state
        if state.cancel_requested:
            status = RunStatus.CANCELLED
        elif any(j.status == JobStatus.FAILURE and not j.allowed_failure for j in state.jobs):
            status = RunStatus.FAILURE
        else:
            status = RunStatus.SUCCESS
        state.finished_at = workflow.now()
        self._set_status(status)
        self._snapshots.changed()

    def _expand(self, job: JobState, spec: JobSpec) -> None:
        """A ready matrix job: evaluate its strategy now (``fromJSON`` over ``needs`` outputs, as
        GitHub does when the job starts) and list one job per combination after it. A retried
        dependent matrix job reuses its combinations' ids by index."""
        assert spec.strategy is not None
        context = self._strategy_context(job)
        existing = list(job.combinations)
        # The run's bounds hold across all its matrix jobs (a retried one's own count again).
        others = sum(len(j.combinations) for j in self._state.jobs if j is not job)
        other_bytes = sum(
            len(json.dumps(j.matrix, default=str))
            for j in self._state.jobs
            if j.matrix_of and j.matrix_of != job.job_id
        )
        try:
            resolved = resolve_strategy(
                spec.strategy, context, MAX_RUN_COMBINATIONS - others, MAX_MATRIX_BYTES - other_bytes
            )
            names = [combination_name(spec.name, combo, context) for combo in resolved.combinations]
        except (MatrixError, ExpressionError) as exc:
            self._finish_job(job, JobStatus.FAILURE, error=f"jobs.{job.job_id}.strategy: {exc}")
            return
        self._strategies[job.job_id] = resolved
        total = len(resolved.combinations)
        taken = {j.job_id for j in self._state.jobs}
        ids = existing[:total] + combination_ids(
            job.job_id, max(0, total - len(existing)), taken, start=len(existing) + 1
        )
        added: list[JobState] = []
        for index, (child_id, combo, name) in enumerate(zip(ids, resolved.combinations, names, strict=True)):
            child = self._state.job(child_id)
            if child is None:
                child = JobState(
                    job_id=child_id,
                    name=name,
                    needs=list(job.needs),
                    runs_on=list(spec.runs_on),
                    idempotency_key=idempotency_key(self._inp.run_id, child_id),
                    environment=spec.environment,
                    secret_names=list(spec.secrets),
                    matrix_of=job.job_id,
                )
                added.append(child)
            child.name = name
            child.matrix = dict(combo)
            child.job_index = index
            child.job_total = total
        at = self._state.jobs.index(job) + 1 + len(existing)
        self._state.jobs[at:at] = added
        job.combinations = existing + [c.job_id for c in added]
        self._reopen(job)
        job.queued_at = workflow.now()
        for stale_id in existing[total:]:
            stale = self._state.job(stale_id)
            if stale is not None and stale.status not in JOB_FINAL_STATUSES:
                stale.status = JobStatus.SKIPPED
                stale.finished_at = workflow.now()
                stale.error = "no longer a combination of the matrix"
        self._dirty = True
        self._snapshots.changed()

    def _combination_may_start(self, job: JobState) -> bool:
        """Only once its matrix job is expanded, and while fewer than ``max-parallel`` siblings run."""
        parent = self._state.job(job.matrix_of or "")
        if parent is None or parent.status != JobStatus.IN_PROGRESS:
            return False
        resolved = self._strategies.get(parent.job_id)
        if resolved is None or resolved.max_parallel is None:
            return True
        active = (JobStatus.QUEUED, JobStatus.IN_PROGRESS, JobStatus.AWAITING_APPROVAL)
        running = sum(1 for c in parent.combinations if (s := self._state.job(c)) is not None and s.status in active)
        return running < resolved.max_parallel

    def _combination_finished(self, job: JobState) -> None:
        parent = self._state.job(job.matrix_of or "")
        if parent is None:
            return
        # GitHub takes a matrix job's outputs from the combinations in the order they finish:
        # a later one's value replaces an earlier one's for the same name.
        parent.outputs.update({k: v for k, v in job.outputs.items() if v})
        resolved = self._strategies.get(parent.job_id)
        if job.status == JobStatus.FAILURE and not job.allowed_failure and resolved is not None and resolved.fail_fast:
            self._fail_fast(parent, job)
        self._aggregate(parent)

    def _fail_fast(self, parent: JobState, failed: JobState) -> None:
        """``fail-fast``: one combination failed, so the others still waiting or running are cancelled."""
        reason = f"cancelled: {failed.name} failed (fail-fast)"
        for child_id in parent.combinations:
            child = self._state.job(child_id)
            if child is None or child is failed or child.status in JOB_FINAL_STATUSES:
                continue
            self._cancel_reasons[child_id] = reason
            if child_id in self._handles:
                self._cancelling.add(child_id)
                self._handles[child_id].cancel()
            elif child_id in self._tasks:
                self._abort_wait.add(child_id)
            else:
                self._finish_job(child, JobStatus.CANCELLED)

    def _aggregate(self, parent: JobState) -> None:
        """A matrix job's status is its combinations': final once all are (``aggregate_result``)."""
        children = [c for c in (self._state.job(i) for i in parent.combinations) if c is not None]
        if parent.status in JOB_FINAL_STATUSES or any(c.status not in JOB_FINAL_STATUSES for c in children):
            return
        results = ["success" if c.allowed_failure else c.status.value for c in children]
        status = JobStatus(aggregate_result(results))
        failed = sum(1 for r in results if r == "failure")
        started = [c.started_at for c in children if c.started_at is not None]
        parent.started_at = min(started) if started else parent.started_at
        self._finish_job(parent, status, error=f"{failed} of {len(children)} combinations failed" if failed else None)

    def _reopen(self, job: JobState) -> None:
        """A matrix job some of whose combinations run again: it is in progress until they end."""
        job.status = JobStatus.IN_PROGRESS
        job.allowed_failure = False
        job.finished_at = None
        job.error = None

    def _cancel_jobs(self) -> None:
        """Cancel the run: running jobs are told to stop, waiting ones stop waiting."""
        self._state.cancel_requested = True
        for job_id, handle in list(self._handles.items()):
            self._cancelling.add(job_id)
            handle.cancel()
        for job_id in list(self._tasks):
            # Still waiting for a slot of the tenant's cap (no activity yet): stop waiting.
            if job_id not in self._handles:
                self._abort_wait.add(job_id)
        for job in self._state.jobs:
            if job.status == JobStatus.AWAITING_APPROVAL:
                self._finish_job(job, JobStatus.CANCELLED, error="cancelled while awaiting approval")
        self._dirty = True
        self._snapshots.changed()
