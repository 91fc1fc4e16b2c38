"""``CIRunWorkflow``: one CI run (repository + commit + workflow file) as a DAG of job activities.

How the API drives CI (the contract; ``clients/ci/start.py`` wraps each call):

* **Push** (webhook or ``POST /v1/hooks/push``): the API builds a ``CIPushInput`` around a
  ``PushContext`` (tenant, repo id and full name, clone URL, commit sha, full ref,
  ``queue_prefix`` and the CI timeouts from settings; every run and job carries it unchanged)
  and calls ``ci_start.start_push``: ``CIPushWorkflow`` with id ``ci-push:<push id>``
  (``ci_ids.push_id(repo, sha, ref)``) on the orchestration queue,
  ``id_conflict_policy=USE_EXISTING``. That start is the durable acceptance (no git in the
  API). The push workflow's first activity (``ci_list_workflows`` on
  ``queues.ci_control_queue(prefix)``, served by CI workers) fetches the repository's bare
  mirror, lists ``.github/workflows/*.yml|yaml`` at the commit, parses them and applies the
  ``on.push`` filters; then one child ``CIRunWorkflow`` per triggered file is started with id
  ``ci-run:<run id>`` where ``run id = ci_ids.run_id(repo_id, sha, workflow path)``: one run
  per repo + commit + file, whatever the number of deliveries or refs. A file that is invalid
  (YAML error, unsupported key, cycle, unknown need, ``secrets``) still gets a run, which
  fails at once with ``error = "<file>:<line>: <key>: <message>"``. ``ci_start.push_state``
  (query ``CIPushWorkflow.state``) tells which run ids a push produced (``status == done``).
* **State**: ``ci_start.run_state(client, run_id)`` = query ``CIRunWorkflow.state`` ->
  ``CIRunState`` (run status, error, timings; per job: status, attempts with their status,
  worker, timings, exit code, error, steps and ``log_prefix``; ``attempt`` = the winning
  attempt). Lists use visibility: ``WorkflowType = 'CIRunWorkflow' AND TenantId = '<t>'``
  plus ``RepoId`` / ``CommitSha`` / ``RunState`` (the ``RunStatus`` values).
* **Cancel**: ``ci_start.cancel_run`` = Temporal workflow cancellation. Waiting jobs are
  cancelled (unless their ``if`` holds under ``cancelled()``, e.g. ``always()``: those still
  run); running jobs get SIGTERM on their whole process tree, SIGKILL after
  ``cancel_grace_seconds``; the run ends ``cancelled``. Cancelling a finished run changes
  nothing (it only closes its retry window).
* **Retry**: ``ci_start.retry_job`` = Update ``CIRunWorkflow.retry_job(RetryJobRequest)`` ->
  ``RetryJobResponse``. Refused (``WorkflowUpdateFailedError`` whose cause is an
  ``ApplicationError`` with ``type`` in ``RetryRejectedReason``) for an unknown job, a job
  that is not failed/cancelled or has a running dependent, or past ``CI_MAX_RETRIES_PER_RUN``.
  A finished run stays open for ``retry_window_seconds``; after that its workflow is closed
  and an update fails with ``RPCError`` NOT_FOUND/"workflow execution already completed".
  ``ci_start.rerun`` = Update ``CIRunWorkflow.rerun(RerunRequest)`` -> ``RerunResponse``:
  every job of a finished run (successful ones too) runs again as the run's next attempt
  (``github.run_attempt``); refused with ``RUN_NOT_FINISHED`` while the run is going.
* **Approvals**: a job whose ``environment:`` is protected (``CIRunInput.environments``, read
  from the repository's rules when the push was listed) becomes ``awaiting_approval`` when it
  is ready, instead of starting. ``ci_start.decide_job`` = Update
  ``CIRunWorkflow.decide(ApprovalRequest)`` -> the job's ``JobState``: approve starts it (this
  round only: a retried job asks again), reject fails it (its dependents are skipped). Refused
  (``ApplicationError.type`` in ``ApprovalRejectedReason``) for an unknown job, a job not
  awaiting approval, or a user outside the environment's approvers. Every decision (who, when,
  approve/reject, comment, round) stays in ``JobState.approvals``. Cancelling the run cancels
  jobs awaiting approval.
* **Matrix**: a job with ``strategy.matrix`` is expanded when it becomes ready (its ``needs``
  final, its ``if`` true): the strategy is evaluated then (``fromJSON`` over ``needs`` outputs,
  ``github``, ``inputs``), and one ``JobState`` per combination (id ``<job>-<n>``, GitHub's
  name, ``matrix_of``, ``matrix``, ``job_index``, ``job_total``) is listed after the matrix
  job's own, which aggregates them (``matrix.aggregate_result``; outputs merged in finishing
  order). ``fail-fast`` cancels the siblings of a failed combination; ``max-parallel`` holds
  the rest waiting. Retrying a combination re-runs it; retrying the matrix job re-runs its
  failed and cancelled ones; a retried dependent matrix job expands again.
* **Concurrency**: ``concurrency:`` makes the run (workflow level, before any job) or a job
  round (job level, before its slot) a member of ``CIConcurrencyGroupWorkflow`` for
  tenant + group: granted, superseded while pending (ends cancelled without running), or
  preempted by ``cancel-in-progress`` (cancelled like a cancel request). Membership is
  released on every way out, like the tenant cap's slot.
* **Logs**: attempt ``n`` of job ``j`` writes raw output chunks to
  ``ci/<tenant>/<run id>/<job id>/attempt-<n>/<seq:08d>.log`` (seq from 0, gap-free, each an
  atomic write-once put, every ~0.5 s or 64 KiB). A chunk that could not be stored after
  retries leaves its seq missing, with a best-effort ``<seq:08d>.gap`` marker, and is listed in
  ``end.json`` and in the attempt's ``LogSummary.gaps``. ``attempt-<n>/end.json`` (a
  ``LogEnd``) marks the end of the log; while it is absent and the attempt is ``running`` the
  log may still grow. ``ci_ids`` builds and parses these keys.

Exactly-once, honestly: a job runs at least once; the server refuses completion from a stale
activity attempt, attempt numbers come from this workflow (Update ``attempt_started``; an
older round's attempt is told not to proceed), logs are attempt-scoped, and the state points
at the attempt whose result was recorded. ``CI_IDEMPOTENCY_KEY = <run id>/<job id>`` is stable
across attempts for external side effects.

Read model: the state the ``state`` query answers is also written to SQL (``ci_runs``,
``ci_jobs``, ``ci_attempts``) by a background ``SnapshotWriter``: one write in flight, and
while jobs run at most one per interval (0.5 s, or 50 ms per job up to 5 s: each write carries
every job), the newest state each time, a final write before the workflow returns, so the API
serves the run after the engine forgets it. No job ever waits on it.

History bound: at most ``MAX_JOBS_PER_WORKFLOW`` jobs and ``CI_MAX_RETRIES_PER_RUN`` retries,
each job round costing about ten events (and at most about 18 more for its read-model writes,
fewer when transitions coalesce), keeps a run below Temporal's limits, so the workflow does
not continue-as-new.

Code: ``CIRunWorkflow`` keeps its ``__init__``, the ``state`` query and the main loop; the rest
comes from one class per role, each building on the one before it, all on the fields declared
in ``run_fields``: ``run_projection`` (read-model writes), ``run_attempts`` (attempt numbers),
``run_graph`` (needs, contexts, results, matrix jobs, cancellation), ``run_slots`` (the tenant
semaphore), ``run_groups`` (concurrency groups), ``run_rounds`` (retries and approvals) and
``run_scheduling`` (job rounds).
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.ci.definitions import CIStatusDefinition
    from workflows import search_attributes as sa
    from workflows.ci.run_fields import initial_state
    from workflows.ci.run_scheduling import RunScheduling
    from workflows.ci.run_triggers import start_workflow_run_push, workflow_run_push
    from workflows.ci.types.projection import current_snapshot_version
    from workflows.ci.types.run import CIRunInput, CIRunState, RunStatus
    from workflows.ci.types.status import STATUS_RETRY, STATUS_SCHEDULE_TO_CLOSE, STATUS_START_TO_CLOSE, StatusReport
    from workflows.queues import orchestration_queue
    from workflows.snapshots import SnapshotWriter


# Pinned (the orchestration worker's default): a run finishes on the build that started it,
# and stays open for its retry window, so that build's workers drain that long
# (docs/versioning.md).
@workflow.defn
class CIRunWorkflow(RunScheduling):
    """Runs the jobs of one workflow file at one commit; see the module docstring."""

    # The last report to the git host queued (each waits for the one before it).
    _last_report: asyncio.Task[None] | None

    @workflow.init
    def __init__(self, inp: CIRunInput) -> None:
        self._inp = inp
        spec = inp.spec
        self._jobs = {j.id: j for j in spec.jobs} if spec else {}
        self._state = initial_state(inp)
        self._handles = {}
        self._tasks = {}
        self._cancelling = set()
        self._dirty = False
        self._retry_pending = False
        self._granted = set()
        self._abort_wait = set()
        self._releases = []
        self._spare_slots = []
        self._acquire_batch = []
        self._acquire_flush = None
        self._slot_moves = {}
        self._awaiting_grant = {}
        self._snapshots = SnapshotWriter(
            self._write_snapshot,
            f"run {inp.run_id}",
            lambda: current_snapshot_version(workflow.info()),
            pace=self._pace_snapshot,
        )
        self._last_snapshot_at = None
        self._strategies = {}
        self._group_keys = {}
        self._group_notices = {}
        self._preempted = set()
        self._job_groups = {}
        self._round_specs = {}
        self._run_group = None
        self._cancel_reasons = {}
        self._requested = set()
        self._slot_queue = []
        self._slot_gifts = {}
        self._reserved = {}
        self._issued = {}
        self._served_queues = set()
        self._unserved_asks = set()
        self._expired_asks = set()
        self._image_probes = {}
        self._last_report = None

    @workflow.query
    def state(self) -> CIRunState:
        """The run and its jobs, attempts, timings, exit codes and errors."""
        return self._state

    @workflow.run
    async def run(self, inp: CIRunInput) -> CIRunState:
        self._snapshots.start()
        workflow.upsert_search_attributes(
            [
                sa.TENANT_ID.value_set(inp.push.tenant_id),
                sa.REPO_ID.value_set(inp.push.repo_id),
                sa.COMMIT_SHA.value_set(inp.push.commit_sha),
                sa.RUN_STATE.value_set(self._state.status.value),
            ]
        )
        if inp.spec is None or inp.spec_error is not None:
            self._state.error = inp.spec_error.render() if inp.spec_error else "workflow file could not be read"
            self._state.finished_at = workflow.now()
            self._set_status(RunStatus.FAILURE)
            self._report(0, final=True)
            await self._reports_sent()
            await self._close_snapshots()
            return self._state
        for round_number in itertools.count():
            self._retry_pending = False
            self._run_group = None
            self._report(round_number, final=False)
            self._announce(round_number, "requested")
            if inp.spec.concurrency is None or await self._enter_run_group():
                await self._execute()
            self._finish()
            self._report(round_number, final=True)
            self._announce(round_number, "completed")
            if self._run_group is not None:
                self._leave_group(*self._run_group)
            try:
                await workflow.wait_condition(
                    lambda: self._retry_pending, timeout=timedelta(seconds=inp.push.retry_window_seconds)
                )
            except (TimeoutError, asyncio.CancelledError):
                # Window over, or the finished run was cancelled: nothing more can happen.
                break
        # Every slot's release is delivered before the run closes.
        await asyncio.gather(*self._releases)
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self._reports_sent()
        await self._close_snapshots()
        return self._state

    def _report(self, round_number: int, final: bool) -> None:
        """Queue a report of the round to the git host, after the one before it: a slow or
        rate-limited host never lets a round's final state arrive before its ``pending``. The
        run never waits for it, and a host that refuses changes nothing about the run."""
        if not self._inp.report_status:
            return
        before = self._last_report
        report = StatusReport(state=self._state.model_copy(deep=True), round=round_number, final=final)

        async def send() -> None:
            if before is not None:
                await before
            try:
                await workflow.execute_activity_method(
                    CIStatusDefinition.report_status,
                    report,
                    task_queue=orchestration_queue(self._inp.push.queue_prefix),
                    start_to_close_timeout=STATUS_START_TO_CLOSE,
                    schedule_to_close_timeout=STATUS_SCHEDULE_TO_CLOSE,
                    retry_policy=STATUS_RETRY,
                )
            except ActivityError as err:
                workflow.logger.warning("run %s: status report not delivered: %s", self._inp.run_id, err.cause)

        self._last_report = asyncio.create_task(send())

    def _announce(self, round_number: int, action: str) -> None:
        """Start the ``workflow_run`` push of this round's start or end, if a file listens for
        this workflow (``workflows.ci.run_triggers``); delivered before the run closes."""
        triggered = workflow_run_push(self._inp, self._state, round_number, action)
        if triggered is not None:
            self._releases.append(asyncio.create_task(start_workflow_run_push(triggered)))

    async def _reports_sent(self) -> None:
        """Every queued report delivered (or given up) before the run closes."""
        if self._last_report is not None:
            await self._last_report

    async def _execute(self) -> None:
        """Start ready jobs until every job is final and no activity runs."""
        while True:
            try:
                self._schedule_ready()
                self._release_spare_slots()
                # A job awaiting approval keeps the run open until someone decides (or cancels).
                if not self._tasks and not self._awaiting_approval():
                    return
                self._dirty = False
                await workflow.wait_condition(lambda: self._dirty)
            except asyncio.CancelledError:
                self._on_cancel()

    def _on_cancel(self) -> None:
        task = asyncio.current_task()
        if task is not None:
            # Cancellation is handled, not propagated: later awaits (always() jobs) must work.
            task.uncancel()
        self._cancel_jobs()
