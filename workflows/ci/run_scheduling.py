"""A run's scheduler: ready jobs start as job rounds (group, slot, activity, result)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

with workflow.unsafe.imports_passed_through():
    from activities.ci.definitions import CIJobDefinition, CIProbeDefinition
    from workflows.ci.expressions import ExpressionError, evaluate_condition, to_text, truthy
    from workflows.ci.ids import run_workflow_id
    from workflows.ci.matrix import evaluate_minutes, evaluate_value
    from workflows.ci.run_rounds import RunRounds
    from workflows.ci.types.concurrency import GroupOutcome
    from workflows.ci.types.job import (
        IMAGE_WORKER_FULL_ERROR,
        JOB_FATAL_ERROR,
        AttemptGrant,
        JobActivityInput,
        JobResult,
    )
    from workflows.ci.types.run import JOB_FINAL_STATUSES, JobState, JobStatus
    from workflows.ci.types.semaphore import ServedQueuesInput
    from workflows.ci.types.spec import JobSpec
    from workflows.queues import (
        CI_IMAGE_PROBE_FRESH,
        CI_JOB_MAX_ATTEMPTS,
        CI_JOB_SCHEDULE_TO_START_SECONDS,
        CI_JOB_TIMEOUT_MARGIN_SECONDS,
        CI_PROBE_RETRY,
        CI_PROBE_TIMEOUT,
        ci_image_queue,
        ci_probe_queue,
        ci_queue,
    )

# Most characters of a runs-on label a job's expression may yield (a queue name is built from it).
MAX_LABEL_CHARS = 200
MAX_LABELS = 16
# timeout-minutes from an expression is capped like a written one (the parser's cap: 5 days).
MAX_JOB_MINUTES = 5 * 24 * 60.0


class RunScheduling(RunRounds):
    """Starts ready jobs and runs each job round to its result."""

    def _schedule_ready(self) -> None:
        progressed = True
        while progressed:
            progressed = False
            # A copy: expanding a matrix job adds its combinations to the list.
            for job in list(self._state.jobs):
                if job.status != JobStatus.WAITING:
                    continue
                needs = [self._state.job(n) for n in job.needs]
                if any(n is None or n.status not in JOB_FINAL_STATUSES for n in needs):
                    continue
                if job.matrix_of and not self._combination_may_start(job):
                    continue
                spec = self._spec_of(job.job_id)
                assert spec is not None
                try:
                    run_it = evaluate_condition(spec.if_expr, self._job_status_functions(job), self._job_context(job))
                except ExpressionError as exc:
                    self._finish_job(job, JobStatus.FAILURE, error=f"jobs.{job.job_id}.if: {exc}")
                    progressed = True
                    continue
                if not run_it:
                    status = JobStatus.CANCELLED if self._state.cancel_requested else JobStatus.SKIPPED
                    self._finish_job(job, status)
                    progressed = True
                    continue
                if spec.strategy is not None and not job.matrix_of:
                    self._expand(job, spec)
                    progressed = True
                    continue
                if self._approval_rule(job.job_id) is not None and not any(
                    d.approved and d.round == job.round for d in job.approvals
                ):
                    job.status = JobStatus.AWAITING_APPROVAL
                    self._snapshots.changed()
                    continue
                self._start_job(job, spec)

    def _start_job(self, job: JobState, spec: JobSpec) -> None:
        inp = self._inp
        assert inp.spec is not None
        if spec.concurrency is not None:
            try:
                self._job_groups[job.job_id] = self._evaluate_group(spec.concurrency, self._job_group_context(job))
            except ExpressionError as exc:
                self._finish_job(job, JobStatus.FAILURE, error=f"jobs.{spec.id}.concurrency: {exc}")
                return
            job.concurrency_group = self._job_groups[job.job_id][0]
        try:
            spec = self._specialise(job, spec)
        except ExpressionError as exc:
            self._finish_job(job, JobStatus.FAILURE, error=f"jobs.{spec.id}: {exc}")
            return
        job.status = JobStatus.QUEUED
        job.queued_at = workflow.now()
        self._snapshots.changed()
        self._cancelling.discard(job.job_id)
        self._abort_wait.discard(job.job_id)
        act = JobActivityInput(
            push=inp.push,
            run_id=inp.run_id,
            run_workflow_id=run_workflow_id(inp.run_id),
            workflow_name=inp.spec.name,
            workflow_path=inp.workflow_path,
            job=spec,
            workflow_env=dict(inp.spec.env),
            needs=self._needs_context(job),
            round=job.round,
            secrets_allowed=self._state.secrets_allowed,
            run_number=inp.run_number,
            matrix=dict(job.matrix),
            job_index=job.job_index,
            job_total=job.job_total,
            matrix_job_id=job.matrix_of,
            environment_variables=inp.environment_vars(job.environment),
        )
        inherited: str | None = None
        if (
            self._spare_slots
            and inp.push.max_concurrent_jobs is not None
            and job.job_id not in self._job_groups
            and self._may_take_over(job.job_id)
        ):
            # Same condition as when the slot was kept (``_run_job``: capped, no job-level group),
            # and a queue a worker serves (a round no worker serves asks, and waits unheld).
            inherited = self._spare_slots.pop(0)
        self._tasks[job.job_id] = asyncio.create_task(self._run_job(job.job_id, job.round, spec, act, inherited))

    def _specialise(self, job: JobState, spec: JobSpec) -> JobSpec:
        """The spec this job round runs: a combination as a job of its own (its id for log keys,
        secrets and attempts; its name), and ``runs-on``, ``timeout-minutes`` and
        ``continue-on-error`` expressions evaluated (``${{ matrix.x }}``). Kept for the round's
        result (``continue-on-error``)."""
        update: dict[str, object] = {}
        if job.matrix_of:
            update.update(id=job.job_id, name=job.name)
        needs_context = any("${{" in label for label in spec.runs_on)
        if needs_context or spec.timeout_minutes_expr or spec.continue_on_error_expr:
            context = self._job_group_context(job)
            if needs_context:
                labels: list[str] = []
                for label in spec.runs_on:
                    value = evaluate_value(label, dict(context))
                    labels.extend(to_text(v) for v in (value if isinstance(value, list) else [value]))
                if not 0 < len(labels) <= MAX_LABELS or any(not x.strip() or len(x) > MAX_LABEL_CHARS for x in labels):
                    raise ExpressionError(f"runs-on evaluated to {labels!r}: labels must be non-empty and short")
                update["runs_on"] = labels
                job.runs_on = labels
            if spec.timeout_minutes_expr:
                update["timeout_minutes"] = evaluate_minutes(spec.timeout_minutes_expr, context, MAX_JOB_MINUTES)
            if spec.continue_on_error_expr:
                update["continue_on_error"] = truthy(evaluate_value(spec.continue_on_error_expr, dict(context)))
        if not update:
            return spec
        specialised = spec.model_copy(update=update)
        self._round_specs[job.job_id] = specialised
        return specialised

    async def _dispatch(self, job_id: str, round_: int, spec: JobSpec, act: JobActivityInput) -> JobResult:
        """The round's activity, to its result: first on the queue of the workers holding its
        image where that applies (``_run_on_image_queue``), else on its labels' queue with its
        attempt number granted up front when it fetches no secrets (no token to hand out)."""
        image_queue = self._image_queue(spec)
        if image_queue is not None and not await self._image_queue_polled(image_queue):
            image_queue = None  # no worker holds the image: straight to the labels' queue
        if job_id in self._abort_wait:
            raise asyncio.CancelledError  # cancelled while the probe was out
        if image_queue is not None:
            return await self._run_on_image_queue(job_id, round_, spec, act, image_queue)
        if not spec.secrets:
            job = self._state.job(job_id)
            assert job is not None
            n = self._next_attempt(job)
            self._reserved[job_id] = (round_, n)
            act.grant = AttemptGrant(proceed=True, attempt=n, notice_seconds=self._snapshot_interval())
        self._start_activity(job_id, round_, spec, act)
        return await self._handles[job_id]

    def _image_queue(self, spec: JobSpec) -> str | None:
        """The queue of the workers holding the job's image, which the job tries first (image
        affinity): a ``container:`` job whose image was pinned, on a deployment that routes by
        image (``PushContext.image_affinity_seconds``); ``None`` for every other job."""
        push = self._inp.push
        if push.image_affinity_seconds <= 0 or spec.container is None or spec.container.digest is None:
            return None
        return ci_image_queue(spec.runs_on, spec.container.digest, push.queue_prefix, push.isolation)

    async def _image_queue_polled(self, queue: str) -> bool:
        """Whether a worker polls ``queue`` (holds the image), asked of a CI worker's probe queue
        and kept ``CI_IMAGE_PROBE_FRESH``; a probe nobody answers counts as not polled, so a
        job never waits for workers that may not exist."""
        now = workflow.now()
        known = self._image_probes.get(queue)
        if known is not None and now - known[0] < CI_IMAGE_PROBE_FRESH:
            return known[1]
        try:
            answer = await workflow.execute_activity_method(
                CIProbeDefinition.served_queues,
                ServedQueuesInput(queues=[queue]),
                task_queue=ci_probe_queue(self._inp.push.queue_prefix),
                schedule_to_close_timeout=CI_PROBE_TIMEOUT,
                retry_policy=CI_PROBE_RETRY,
            )
            polled = queue in answer.served
        except ActivityError:
            polled = False
        self._image_probes[queue] = (workflow.now(), polled)
        return polled

    async def _run_on_image_queue(
        self, job_id: str, round_: int, spec: JobSpec, act: JobActivityInput, image_queue: str
    ) -> JobResult:
        """The job round on a worker that holds its image if one takes it within the affinity
        wait and has a free slot, else on the queue of its labels, where any worker may (a cold
        image never waits for a busy hot worker). Both ask for their attempt number when they
        start (nothing is pre-granted), so a try nobody took is no attempt."""
        wait = self._inp.push.image_affinity_seconds
        self._start_activity(job_id, round_, spec, act, queue=image_queue, wait_seconds=wait, suffix="@image")
        try:
            return await self._handles[job_id]
        except ActivityError as err:
            cause = err.cause
            unclaimed = isinstance(cause, ActivityTimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_START
            full = isinstance(cause, ApplicationError) and cause.type == IMAGE_WORKER_FULL_ERROR
            if not (unclaimed or full):
                raise
        self._start_activity(job_id, round_, spec, act)
        return await self._handles[job_id]

    def _start_activity(
        self,
        job_id: str,
        round_: int,
        spec: JobSpec,
        act: JobActivityInput,
        queue: str | None = None,
        wait_seconds: float = CI_JOB_SCHEDULE_TO_START_SECONDS,
        suffix: str = "",
    ) -> None:
        """The round's job activity on ``queue`` (default: its labels' queue), waiting at most
        ``wait_seconds`` for a worker to take it."""
        inp = self._inp
        self._handles[job_id] = workflow.start_activity_method(
            CIJobDefinition.run_job,
            act,
            activity_id=f"{job_id}#{round_}{suffix}",
            task_queue=queue or ci_queue(spec.runs_on, inp.push.queue_prefix, inp.push.isolation),
            start_to_close_timeout=timedelta(seconds=spec.timeout_minutes * 60 + CI_JOB_TIMEOUT_MARGIN_SECONDS),
            schedule_to_start_timeout=timedelta(seconds=wait_seconds),
            heartbeat_timeout=timedelta(seconds=inp.push.heartbeat_timeout_seconds),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=1),
                maximum_attempts=CI_JOB_MAX_ATTEMPTS,
                non_retryable_error_types=[JOB_FATAL_ERROR],
            ),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            # Fair share: the server dispatches round-robin across tenants, by plan weight.
            priority=Priority(fairness_key=inp.push.tenant_id[:64], fairness_weight=inp.push.fairness_weight)
            if inp.push.fair_share
            else Priority(),
        )

    def _record_no_worker(self, job_id: str, round_: int, spec: JobSpec) -> None:
        """The round's slot request waited a day on a queue no worker polls: it fails as its
        activity did when it waited that long for a worker."""
        job = self._state.job(job_id)
        if job is not None and job.round == round_:
            labels = ", ".join(sorted(set(spec.runs_on)))
            error = f"no worker serves runs-on [{labels}]: gave up waiting for one"
            self._finish_job(job, JobStatus.FAILURE, error=error)

    async def _run_job(
        self, job_id: str, round_: int, spec: JobSpec, act: JobActivityInput, inherited: str | None = None
    ) -> None:
        """One job round: a slot under the tenant's cap (when capped; ``inherited``: the slot of a
        round of this run that just ended, handed over), the activity, the result; the slot is
        released (or kept for the next scheduling pass to hand over) on every way out of here."""
        key = f"{job_id}#{round_}"
        # The key of the slot this round holds: its own, or the one it inherited silently.
        slot = key
        capped = self._inp.push.max_concurrent_jobs is not None
        group = self._job_groups.get(job_id)
        try:
            if group is not None:
                outcome = await self._enter_group(group[0], key, group[1], job_id)
                if outcome is None:
                    raise asyncio.CancelledError
                if outcome != GroupOutcome.GRANTED or key in self._preempted:
                    self._record_cancelled(job_id, round_, self._group_reason(group[0]))
                    return
            if capped and inherited is not None:
                # The semaphore counts the slot under the key it granted: who uses it is this
                # run's business, so nothing is signalled. Its release (or next hand-over) names
                # that key; the job records it for the queue explanation.
                slot = inherited
                self._granted.add(slot)
                job_state = self._state.job(job_id)
                if job_state is not None:
                    job_state.slot_key = slot
            elif capped:
                slot = await self._acquire_slot(job_id, key)
                if slot != key:
                    job_state = self._state.job(job_id)
                    if job_state is not None:
                        job_state.slot_key = slot
            if job_id in self._abort_wait:
                raise asyncio.CancelledError
            if slot in self._expired_asks:
                self._record_no_worker(job_id, round_, spec)
                return
            if capped:
                # Held: the semaphore granted it for this queue, or it came from a round that did.
                self._served_queues.add(self._job_queue(job_id))
            result = await self._dispatch(job_id, round_, spec, act)
            self._record_result(job_id, round_, result)
        except ActivityError as err:
            self._record_error(job_id, round_, err)
        except asyncio.CancelledError:
            self._record_cancelled(job_id, round_, "cancelled before it started")
        finally:
            self._handles.pop(job_id, None)
            self._tasks.pop(job_id, None)
            self._cancelling.discard(job_id)
            self._dirty = True
            if capped:
                held = slot in self._granted
                self._granted.discard(slot)
                asked = key in self._requested
                self._requested.discard(key)
                if held and group is None:
                    # Held until this pass of the scheduler: a job it makes ready takes it over.
                    self._spare_slots.append(slot)
                elif held or asked:
                    self._releases.append(asyncio.create_task(self._release_slot(slot)))
            if group is not None:
                self._leave_group(group[0], key)
