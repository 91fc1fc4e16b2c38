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
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    FailureError,
    TimeoutType,
    WorkflowAlreadyStartedError,
)
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

with workflow.unsafe.imports_passed_through():
    from activities.ci.definitions import CIJobDefinition, CIProjectionDefinition
    from workflows import search_attributes as sa
    from workflows.ci.concurrency import (
        MAX_GROUP_CHARS,
        SIGNAL_GROUP_ACQUIRE,
        SIGNAL_GROUP_NOTICE,
        SIGNAL_GROUP_RELEASE,
        CIConcurrencyGroupWorkflow,
        group_workflow_id,
    )
    from workflows.ci.event import push_github_context
    from workflows.ci.expressions import (
        ExpressionError,
        StatusFunctions,
        evaluate_condition,
        interpolate,
        to_text,
        truthy,
    )
    from workflows.ci.ids import attempt_log_prefix, idempotency_key, run_workflow_id
    from workflows.ci.matrix import (
        MAX_MATRIX_BYTES,
        MAX_RUN_COMBINATIONS,
        MatrixError,
        ResolvedStrategy,
        aggregate_result,
        combination_ids,
        combination_name,
        evaluate_minutes,
        evaluate_value,
        resolve_strategy,
    )
    from workflows.ci.semaphore import (
        SIGNAL_ACQUIRE,
        SIGNAL_ACQUIRE_MANY,
        SIGNAL_GRANTED_MANY,
        SIGNAL_RELEASE,
        SIGNAL_RELEASE_MANY,
        SIGNAL_TRANSFER,
        CITenantSemaphoreWorkflow,
        semaphore_workflow_id,
    )
    from workflows.ci.types.concurrency import GroupNotice, GroupOutcome, GroupRelease, GroupRequest, GroupState
    from workflows.ci.types.job import (
        JOB_FATAL_ERROR,
        SIGNAL_ATTEMPT_RUNNING,
        UPDATE_ATTEMPT_STARTED,
        AttemptGrant,
        AttemptRunning,
        AttemptStartRequest,
        AttemptStatus,
        JobActivityInput,
        JobResult,
        NeedResult,
    )
    from workflows.ci.types.projection import CIRunSnapshot, current_snapshot_version
    from workflows.ci.types.push import EnvironmentRule
    from workflows.ci.types.run import (
        JOB_FINAL_STATUSES,
        ApprovalDecision,
        ApprovalRejectedReason,
        ApprovalRequest,
        CIRunInput,
        CIRunState,
        JobAttemptState,
        JobState,
        JobStatus,
        RetryJobRequest,
        RetryJobResponse,
        RetryRejectedReason,
        RunStatus,
    )
    from workflows.ci.types.semaphore import (
        SemaphoreState,
        SlotGrants,
        SlotRelease,
        SlotReleases,
        SlotRequest,
        SlotRequests,
        SlotTransfer,
    )
    from workflows.ci.types.spec import ConcurrencySpec, JobSpec
    from workflows.queues import (
        CI_JOB_MAX_ATTEMPTS,
        CI_JOB_SCHEDULE_TO_START_SECONDS,
        CI_JOB_TIMEOUT_MARGIN_SECONDS,
        CI_MAX_RETRIES_PER_RUN,
        CI_PROJECTION_RETRY,
        CI_PROJECTION_SCHEDULE_TO_CLOSE,
        CI_PROJECTION_TIMEOUT,
        ci_queue,
        orchestration_queue,
    )
    from workflows.snapshots import SnapshotWriter

# Most characters of a runs-on label a job's expression may yield (a queue name is built from it).
MAX_LABEL_CHARS = 200
MAX_LABELS = 16
# timeout-minutes from an expression is capped like a written one (the parser's cap: 5 days).
MAX_JOB_MINUTES = 5 * 24 * 60.0

# The interval between the starts of two read-model writes of a running run: a write carries
# the whole state (every job), so a larger run writes less often; its final state is written
# at once. Status shown by the API trails the engine by at most this much while jobs run.
SNAPSHOT_INTERVAL_MIN_SECONDS = 0.5
SNAPSHOT_INTERVAL_PER_JOB_SECONDS = 0.05
SNAPSHOT_INTERVAL_MAX_SECONDS = 5.0


MAX_DISPLAY_TITLE_CHARS = 1024


def _display_title(inp: CIRunInput, run_name: str | None) -> str:
    """The file's ``run-name`` over github, inputs and vars; "" without one or when it cannot be
    evaluated (GitHub falls back to its default title then too)."""
    if not run_name:
        return ""
    context: dict[str, object] = {
        "github": push_github_context(inp.push, inp.run_id, inp.spec.name if inp.spec else inp.workflow_path),
        "vars": dict(inp.push.variables),
        "inputs": dict(inp.push.inputs),
    }
    try:
        return interpolate(run_name, context)[:MAX_DISPLAY_TITLE_CHARS]
    except ExpressionError:
        return ""


def _initial_state(inp: CIRunInput) -> CIRunState:
    """The run's state at its start: every job of the file pending."""
    spec = inp.spec
    pr = inp.push.pull_request
    from_fork = pr is not None and pr.from_fork
    return CIRunState(
        run_id=inp.run_id,
        tenant_id=inp.push.tenant_id,
        repo_id=inp.push.repo_id,
        repo_full_name=inp.push.repo_full_name,
        commit_sha=inp.push.commit_sha,
        ref=inp.push.ref,
        workflow_path=inp.workflow_path,
        workflow_name=spec.name if spec else inp.workflow_path,
        created_at=inp.created_at,
        event=inp.push.event,
        pull_request=pr,
        secrets_allowed=not from_fork,
        isolation=inp.push.isolation,
        display_title=_display_title(inp, spec.run_name if spec else None),
        notice=(
            f"pull request #{pr.number} comes from a fork ({pr.head_repo}): its jobs run without secrets"
            if pr is not None and from_fork
            else None
        ),
        jobs=[
            JobState(
                job_id=j.id,
                name=j.name,
                needs=list(j.needs),
                runs_on=list(j.runs_on),
                idempotency_key=idempotency_key(inp.run_id, j.id),
                environment=j.environment,
                secret_names=list(j.secrets),
            )
            for j in (spec.jobs if spec else [])
        ],
    )


# Pinned (the orchestration worker's default): a run finishes on the build that started it,
# and stays open for its retry window, so that build's workers drain that long
# (docs/versioning.md).
@workflow.defn
class CIRunWorkflow:
    """Runs the jobs of one workflow file at one commit; see the module docstring."""

    @workflow.init
    def __init__(self, inp: CIRunInput) -> None:
        self._inp = inp
        spec = inp.spec
        self._jobs: dict[str, JobSpec] = {j.id: j for j in spec.jobs} if spec else {}
        self._state = _initial_state(inp)
        self._handles: dict[str, workflow.ActivityHandle[JobResult]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # Jobs whose running activity was asked to cancel (their attempts must not start).
        self._cancelling: set[str] = set()
        self._dirty = False
        self._retry_pending = False
        # Job rounds holding a slot of the tenant's cap, and release signals in flight.
        self._granted: set[str] = set()
        # Jobs told to stop waiting for a slot (the run was cancelled meanwhile).
        self._abort_wait: set[str] = set()
        self._releases: list[asyncio.Task[None]] = []
        # Slots of job rounds that just ended, kept until the next scheduling pass: a job made
        # ready by it inherits one (``SlotTransfer``); the rest are released after the pass.
        self._spare_slots: list[str] = []
        # Slot requests of this pass not yet sent, and the task that sends them in one signal.
        self._acquire_batch: list[SlotRequest] = []
        self._acquire_flush: asyncio.Task[None] | None = None
        # Transfers not awaited by the job that inherited the slot, by the key they made held:
        # anything that later sends that key (release, next transfer) waits for it first.
        self._slot_moves: dict[str, asyncio.Task[None]] = {}
        # Job rounds whose slot request the semaphore has acknowledged and that wait for its
        # grant (key -> job id, oldest first): a spare slot of this run may go to them instead.
        self._awaiting_grant: dict[str, str] = {}
        # The read model's copy of ``self._state``: written in the background, never awaited by
        # a job (see ``SnapshotWriter``).
        self._snapshots = SnapshotWriter(
            self._write_snapshot,
            f"run {inp.run_id}",
            lambda: current_snapshot_version(workflow.info()),
            pace=self._pace_snapshot,
        )
        self._last_snapshot_at: datetime | None = None
        # Matrix jobs: the evaluated strategy of each expanded one (rebuilt by replay).
        self._strategies: dict[str, ResolvedStrategy] = {}
        # Concurrency groups: member key -> job id ("" for the whole run), the group's answer,
        # the members told to cancel, the job-level group (and cancel-in-progress) per job.
        self._group_keys: dict[str, str] = {}
        self._group_notices: dict[str, GroupOutcome] = {}
        self._preempted: set[str] = set()
        self._job_groups: dict[str, tuple[str, bool]] = {}
        # Specs as the last round of a job started them, where they differ from the file's.
        self._round_specs: dict[str, JobSpec] = {}
        # The run's own place in its workflow-level group this round: (group, key).
        self._run_group: tuple[str, str] | None = None
        # Why a job about to end cancelled was cancelled (fail-fast, a concurrency group).
        self._cancel_reasons: dict[str, str] = {}
        # Slot requests sent (or about to be) and not granted, transferred or withdrawn yet; the
        # job rounds waiting in the run's own queue for a slot it holds (job ids, oldest first);
        # and the slots handed to them, not taken yet (job id -> slot key).
        self._requested: set[str] = set()
        self._slot_queue: list[str] = []
        self._slot_gifts: dict[str, str] = {}
        # Attempts granted with their activity and not recorded yet (job id -> (round, attempt)),
        # and the highest attempt number ever issued per job (a number is never issued twice).
        self._reserved: dict[str, tuple[int, int]] = {}
        self._issued: dict[str, int] = {}

    # Queries and updates ----------------------------------------------------------------

    @workflow.query
    def state(self) -> CIRunState:
        """The run and its jobs, attempts, timings, exit codes and errors."""
        return self._state

    @workflow.update(name=UPDATE_ATTEMPT_STARTED)
    def attempt_started(self, req: AttemptStartRequest) -> AttemptGrant:
        """A worker is about to run a job: issue its attempt number, or tell a stale one to stop."""
        job = self._state.job(req.job_id)
        if job is None or req.round != job.round or job.status not in (JobStatus.QUEUED, JobStatus.IN_PROGRESS):
            return AttemptGrant(proceed=False, reason="stale attempt")
        if req.job_id in self._cancelling:
            return AttemptGrant(proceed=False, reason="cancelled")
        now = workflow.now()
        reserved = self._reserved.pop(job.job_id, None)
        if reserved is not None and reserved[0] == job.round and req.activity_attempt == 1:
            # The first activity attempt of a pre-granted round asks anyway (a worker from before
            # pre-granting): it gets the number its input carries.
            n = reserved[1]
        else:
            if reserved is not None and reserved[0] == job.round:
                # The pre-granted attempt ran (or was lost) without reporting its start.
                self._record_attempt(job, reserved[1], "", None)
            for a in job.attempts:
                if a.status == AttemptStatus.RUNNING:
                    # The server re-dispatched the activity: the earlier attempt lost its lease.
                    a.status = AttemptStatus.LOST
                    a.finished_at = now
                    a.error = (
                        "worker lost (no heartbeat); superseded by a new attempt"
                        if a.started_at is not None
                        else "ended or lost its worker before it reported its start; superseded by a new attempt"
                    )
            n = self._next_attempt(job)
        # Random per attempt (the workflow's seeded RNG: replay gives the same value); only its
        # hash is kept in the state that queries show.
        token = workflow.uuid4().hex + workflow.uuid4().hex
        self._record_attempt(job, n, req.worker, now, hashlib.sha256(token.encode()).hexdigest())
        return AttemptGrant(proceed=True, attempt=n, secrets_token=token)

    def _next_attempt(self, job: JobState) -> int:
        """A number no attempt of this job had (recorded, or granted with an activity)."""
        n = max(max((a.attempt for a in job.attempts), default=0), self._issued.get(job.job_id, 0)) + 1
        self._issued[job.job_id] = n
        return n

    def _record_attempt(
        self, job: JobState, n: int, worker: str, started_at: datetime | None, token_sha256: str | None = None
    ) -> JobAttemptState:
        """Attempt ``n`` of the job's current round runs (or ran): the state points at it."""
        att = JobAttemptState(
            attempt=n,
            round=job.round,
            worker=worker,
            started_at=started_at,
            log_prefix=attempt_log_prefix(self._inp.push.tenant_id, self._inp.run_id, job.job_id, n),
            secrets_token_sha256=token_sha256,
        )
        job.attempts.append(att)
        self._issued[job.job_id] = max(self._issued.get(job.job_id, 0), n)
        job.attempt = n
        if started_at is not None:
            job.status = JobStatus.IN_PROGRESS
            job.started_at = job.started_at or started_at
            if self._state.started_at is None:
                self._state.started_at = started_at
            self._set_status(RunStatus.IN_PROGRESS)
        self._snapshots.changed()
        return att

    def _take_reserved(self, job: JobState, attempt: int) -> bool:
        """The pre-granted ``attempt`` of the job's current round, if it is not recorded yet."""
        if self._reserved.get(job.job_id) == (job.round, attempt):
            del self._reserved[job.job_id]
            return True
        return False

    @workflow.signal(name=SIGNAL_ATTEMPT_RUNNING)
    def attempt_running(self, notice: AttemptRunning) -> None:
        """A pre-granted attempt has been running a moment: the job is in progress on its worker."""
        job = self._state.job(notice.job_id)
        if job is None or job.round != notice.round or job.status != JobStatus.QUEUED:
            return
        if self._take_reserved(job, notice.attempt):
            self._record_attempt(job, notice.attempt, notice.worker, notice.started_at)

    @workflow.update
    def retry_job(self, req: RetryJobRequest) -> RetryJobResponse:
        """Re-run a failed or cancelled job and every job that depends on it, as new attempts."""
        target = self._state.job(req.job_id)
        assert target is not None
        reset: list[str] = []
        for job_id in self._dependents(req.job_id):
            job = self._state.job(job_id)
            assert job is not None
            if job_id in reset:
                continue
            if job.combinations and job_id in (req.job_id, target.matrix_of):
                # The matrix job asked for (its failed and cancelled combinations run again) or
                # the one whose combination was asked for: it reopens, its strategy kept.
                for child_id in job.combinations:
                    child = self._state.job(child_id)
                    if child is not None and (
                        child_id == req.job_id
                        or (job_id == req.job_id and child.status in (JobStatus.FAILURE, JobStatus.CANCELLED))
                    ):
                        self._reset_job(child)
                        reset.append(child_id)
                self._reopen(job)
                reset.append(job_id)
                continue
            if job_id == req.job_id or not job.matrix_of:
                self._reset_job(job)
                reset.append(job_id)
            # A dependent matrix job is expanded again (its needs' outputs may change): every
            # combination waits for that.
            for child_id in job.combinations:
                child = self._state.job(child_id)
                if child is not None and child_id not in reset:
                    self._reset_job(child)
                    reset.append(child_id)
        self._state.retries += 1
        self._state.cancel_requested = False
        self._state.finished_at = None
        self._set_status(RunStatus.IN_PROGRESS)
        self._retry_pending = True
        self._dirty = True
        self._snapshots.changed()
        return RetryJobResponse(run_id=self._inp.run_id, job_id=req.job_id, round=target.round, reset_jobs=reset)

    def _reset_job(self, job: JobState) -> None:
        self._round_specs.pop(job.job_id, None)
        self._reserved.pop(job.job_id, None)
        job.slot_key = None
        self._cancel_reasons.pop(job.job_id, None)
        job.round += 1
        job.status = JobStatus.WAITING
        job.attempt = 0
        job.allowed_failure = False
        job.queued_at = job.started_at = job.finished_at = None
        job.exit_code = None
        job.error = None
        job.outputs = {}

    def _reopen(self, job: JobState) -> None:
        """A matrix job some of whose combinations run again: it is in progress until they end."""
        job.status = JobStatus.IN_PROGRESS
        job.allowed_failure = False
        job.finished_at = None
        job.error = None

    @retry_job.validator
    def _validate_retry(self, req: RetryJobRequest) -> None:
        job = self._state.job(req.job_id)
        if job is None:
            raise ApplicationError(f"no job {req.job_id!r} in this run", type=RetryRejectedReason.UNKNOWN_JOB)
        if job.status not in (JobStatus.FAILURE, JobStatus.CANCELLED):
            raise ApplicationError(
                f"job {req.job_id!r} is {job.status.value}; only failed or cancelled jobs can be retried",
                type=RetryRejectedReason.NOT_RETRYABLE,
            )
        if self._state.cancel_requested and self._state.finished_at is None:
            raise ApplicationError("the run is being cancelled", type=RetryRejectedReason.NOT_RETRYABLE)
        for job_id in self._dependents(req.job_id):
            dep = self._state.job(job_id)
            if dep is not None and dep.status in (JobStatus.QUEUED, JobStatus.IN_PROGRESS):
                raise ApplicationError(
                    f"job {job_id!r} depends on {req.job_id!r} and is still running",
                    type=RetryRejectedReason.NOT_RETRYABLE,
                )
        if self._state.retries >= CI_MAX_RETRIES_PER_RUN:
            raise ApplicationError(f"at most {CI_MAX_RETRIES_PER_RUN} retries per run", type=RetryRejectedReason.LIMIT)

    @workflow.update
    def decide(self, req: ApprovalRequest) -> JobState:
        """Approve or reject a job awaiting approval; the decision is kept in the job's state."""
        job = self._state.job(req.job_id)
        assert job is not None and job.environment is not None
        job.approvals.append(
            ApprovalDecision(
                job_id=job.job_id,
                round=job.round,
                environment=job.environment,
                approved=req.approved,
                user_id=req.user_id,
                at=workflow.now(),
                comment=req.comment,
            )
        )
        if req.approved:
            # Ready again; the scheduler now finds this round approved and starts it.
            job.status = JobStatus.WAITING
        else:
            reason = f"rejected by {req.user_id}" + (f": {req.comment}" if req.comment else "")
            self._finish_job(job, JobStatus.FAILURE, error=reason)
        self._dirty = True
        self._snapshots.changed()
        return job

    @decide.validator
    def _validate_decide(self, req: ApprovalRequest) -> None:
        job = self._state.job(req.job_id)
        if job is None:
            raise ApplicationError(f"no job {req.job_id!r} in this run", type=ApprovalRejectedReason.UNKNOWN_JOB)
        if job.status != JobStatus.AWAITING_APPROVAL:
            raise ApplicationError(
                f"job {req.job_id!r} is {job.status.value}, not awaiting approval",
                type=ApprovalRejectedReason.NOT_AWAITING,
            )
        rule = self._approval_rule(job.job_id)
        if rule is not None and rule.approvers and req.user_id not in rule.approvers:
            raise ApplicationError(
                f"{req.user_id!r} may not approve deployments to {rule.name!r}",
                type=ApprovalRejectedReason.NOT_APPROVER,
            )

    def _spec_of(self, job_id: str) -> JobSpec | None:
        """The declared job a job state runs (a combination runs its matrix job's)."""
        job = self._state.job(job_id)
        return self._jobs.get(job.matrix_of if job is not None and job.matrix_of else job_id)

    def _approval_rule(self, job_id: str) -> EnvironmentRule | None:
        spec = self._spec_of(job_id)
        if spec is None or spec.environment is None:
            return None
        rule = self._inp.environments.get(spec.environment.lower())
        return rule if rule is not None and rule.required_approval else None

    def _awaiting_approval(self) -> bool:
        return any(j.status == JobStatus.AWAITING_APPROVAL for j in self._state.jobs)

    # Main loop --------------------------------------------------------------------------

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
            await self._close_snapshots()
            return self._state
        while True:
            self._retry_pending = False
            self._run_group = None
            if inp.spec.concurrency is None or await self._enter_run_group():
                await self._execute()
            self._finish()
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
        await self._close_snapshots()
        return self._state

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
        )
        inherited: str | None = None
        if self._spare_slots and inp.push.max_concurrent_jobs is not None and job.job_id not in self._job_groups:
            # Same condition as when the slot was kept (``_run_job``: capped, no job-level group).
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

    def _start_activity(self, job_id: str, round_: int, spec: JobSpec, act: JobActivityInput) -> None:
        inp = self._inp
        self._handles[job_id] = workflow.start_activity_method(
            CIJobDefinition.run_job,
            act,
            activity_id=f"{job_id}#{round_}",
            task_queue=ci_queue(spec.runs_on, inp.push.queue_prefix, inp.push.isolation),
            start_to_close_timeout=timedelta(seconds=spec.timeout_minutes * 60 + CI_JOB_TIMEOUT_MARGIN_SECONDS),
            schedule_to_start_timeout=timedelta(seconds=CI_JOB_SCHEDULE_TO_START_SECONDS),
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
            if not spec.secrets:
                # No secrets to fetch, so no token: the attempt's number travels with the activity.
                job = self._state.job(job_id)
                assert job is not None
                n = self._next_attempt(job)
                self._reserved[job_id] = (round_, n)
                act.grant = AttemptGrant(proceed=True, attempt=n, notice_seconds=self._snapshot_interval())
            self._start_activity(job_id, round_, spec, act)
            result = await self._handles[job_id]
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

    def _slots_in_play(self) -> int:
        """Slots this run holds, has asked for, or is handing over: never more than the cap."""
        return len(self._granted) + len(self._spare_slots) + len(self._slot_gifts) + len(self._requested)

    async def _wait_in_run_queue(self, job_id: str, limit: int) -> str | None:
        """Wait in the run's own queue: a slot of the run handed over (its key), or ``None`` when
        the round may ask the semaphore itself (room under the cap) or must stop (cancelled)."""
        job = self._state.job(job_id)
        self._slot_queue.append(job_id)
        if job is not None:
            job.run_slot_wait = True
            self._snapshots.changed()
        try:
            await workflow.wait_condition(
                lambda: (
                    job_id in self._slot_gifts
                    or job_id in self._abort_wait
                    or (self._slot_queue[:1] == [job_id] and self._slots_in_play() < limit)
                )
            )
        finally:
            if job_id in self._slot_queue:
                self._slot_queue.remove(job_id)
            if job is not None:
                job.run_slot_wait = False
                self._snapshots.changed()
        return self._slot_gifts.pop(job_id, None)

    async def _acquire_slot(self, job_id: str, key: str) -> str:
        """A slot for the job round: its own key once granted, or a slot of the run handed over."""
        inp = self._inp
        assert inp.push.max_concurrent_jobs is not None
        if self._slots_in_play() >= inp.push.max_concurrent_jobs:
            gift = await self._wait_in_run_queue(job_id, inp.push.max_concurrent_jobs)
            if gift is not None:
                self._granted.add(gift)
                return gift
            if job_id in self._abort_wait:
                return key
        self._requested.add(key)
        req = SlotRequest(holder=workflow.info().workflow_id, key=key, limit=inp.push.max_concurrent_jobs)
        # Jobs started in one pass run their tasks one after the other before the flush task
        # created by the first of them: it sends all their requests in one signal.
        self._acquire_batch.append(req)
        if self._acquire_flush is None:
            self._acquire_flush = asyncio.create_task(self._flush_acquires())
            self._releases.append(self._acquire_flush)
        # Sent before waiting: a release of this key can never overtake its request.
        await asyncio.shield(self._acquire_flush)
        # Acknowledged: a transfer to this key reaches the semaphore after the request did.
        self._awaiting_grant[key] = job_id
        try:
            await workflow.wait_condition(lambda: key in self._granted or job_id in self._abort_wait)
        finally:
            self._awaiting_grant.pop(key, None)
        return key

    async def _flush_acquires(self) -> None:
        reqs, self._acquire_batch, self._acquire_flush = self._acquire_batch, [], None
        await self._send_acquire(SIGNAL_ACQUIRE_MANY, SlotRequests(requests=reqs), reqs)

    async def _send_acquire(self, signal: str, payload: SlotRequest | SlotRequests, reqs: list[SlotRequest]) -> None:
        inp = self._inp
        assert inp.push.max_concurrent_jobs is not None
        sem_id = semaphore_workflow_id(inp.push.tenant_id)
        try:
            await workflow.get_external_workflow_handle(sem_id).signal(signal, payload)
        except FailureError:
            # No semaphore yet (or it just rolled over): start it holding these requests. It
            # outlives this run; a concurrent start by another run makes us signal instead.
            try:
                await workflow.start_child_workflow(
                    CITenantSemaphoreWorkflow.run,
                    SemaphoreState(tenant_id=inp.push.tenant_id, limit=inp.push.max_concurrent_jobs, pending=reqs),
                    id=sem_id,
                    task_queue=orchestration_queue(inp.push.queue_prefix),
                    parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                )
            except WorkflowAlreadyStartedError:
                await workflow.get_external_workflow_handle(sem_id).signal(signal, payload)

    async def _send_transfer(self, job_id: str, spare: str, key: str) -> None:
        """The hand-off's signal (the job already runs): after the one that made ``spare`` held."""
        inp = self._inp
        assert inp.push.max_concurrent_jobs is not None
        earlier = self._slot_moves.pop(spare, None)
        if earlier is not None:
            await earlier
        move = SlotTransfer(
            holder=workflow.info().workflow_id, from_key=spare, to_key=key, limit=inp.push.max_concurrent_jobs
        )
        try:
            await workflow.get_external_workflow_handle(semaphore_workflow_id(inp.push.tenant_id)).signal(
                SIGNAL_TRANSFER, move
            )
        except FailureError:
            # The semaphore was ended from outside (its holders with it): have a new one count
            # this round, which is already running.
            req = SlotRequest(holder=workflow.info().workflow_id, key=key, limit=inp.push.max_concurrent_jobs)
            await self._send_acquire(SIGNAL_ACQUIRE, req, [req])

    async def _moved(self, keys: list[str]) -> None:
        """Wait for the transfers that made ``keys`` held (a release must not overtake them)."""
        for key in keys:
            move = self._slot_moves.pop(key, None)
            if move is not None:
                await move

    def _release_spare_slots(self) -> None:
        """Slots no job of this pass took over go to this run's job rounds waiting in its own
        queue (no signal), then to those waiting for a grant (oldest first, a ``transfer`` each),
        and the rest back to the tenant (in one signal)."""
        for job_id in [j for j in self._slot_queue if j not in self._abort_wait]:
            if not self._spare_slots:
                break
            # Held all along: the semaphore's count is right as it is.
            self._slot_queue.remove(job_id)
            self._slot_gifts[job_id] = self._spare_slots.pop(0)
        waiting = [
            (key, job_id)
            for key, job_id in self._awaiting_grant.items()
            if key not in self._granted and job_id not in self._abort_wait
        ]
        if self._spare_slots and waiting:
            for key, job_id in waiting[: len(self._spare_slots)]:
                spare = self._spare_slots.pop(0)
                self._requested.discard(key)
                # Held from now on (the job's task wakes in this activation); the semaphore
                # swaps the keys and drops the request, or, if it granted the request meanwhile,
                # frees ``spare``: either way the count stays exact. A release of ``key`` waits
                # for this signal (``_slot_moves``).
                self._granted.add(key)
                move = asyncio.create_task(self._send_transfer(job_id, spare, key))
                self._slot_moves[key] = move
                self._releases.append(move)
        if len(self._spare_slots) > 1:
            keys, self._spare_slots = self._spare_slots, []
            self._releases.append(asyncio.create_task(self._release_slots(keys)))
        while self._spare_slots:
            self._releases.append(asyncio.create_task(self._release_slot(self._spare_slots.pop(0))))

    async def _release_slots(self, keys: list[str]) -> None:
        await self._moved(keys)
        try:
            await workflow.get_external_workflow_handle(semaphore_workflow_id(self._inp.push.tenant_id)).signal(
                SIGNAL_RELEASE_MANY, SlotReleases(holder=workflow.info().workflow_id, keys=keys)
            )
        except FailureError:
            workflow.logger.warning("tenant semaphore gone; nothing to release for %s", keys)

    async def _release_slot(self, key: str) -> None:
        await self._moved([key])
        try:
            await workflow.get_external_workflow_handle(semaphore_workflow_id(self._inp.push.tenant_id)).signal(
                SIGNAL_RELEASE, SlotRelease(holder=workflow.info().workflow_id, key=key)
            )
        except FailureError:
            workflow.logger.warning("tenant semaphore gone; nothing to release for %s", key)

    @workflow.signal(name=SIGNAL_GRANTED_MANY)
    def slots_granted(self, grants: SlotGrants) -> None:
        """The tenant semaphore granted slots to several job rounds of this run at once."""
        self._granted.update(grants.keys)
        self._requested.difference_update(grants.keys)

    # Matrix jobs ----------------------------------------------------------------------------

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

    def _strategy_context(self, job: JobState) -> dict[str, object]:
        """Where a strategy is evaluated: ``github``, ``needs``, ``inputs``."""
        return {**self._job_context(job), "inputs": dict(self._inp.push.inputs)}

    # Concurrency groups ---------------------------------------------------------------------

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
        group_id = group_workflow_id(inp.push.tenant_id, group)
        try:
            await workflow.get_external_workflow_handle(group_id).signal(SIGNAL_GROUP_ACQUIRE, req)
        except FailureError:
            # No such group yet (or it ended idle): start it holding this request.
            try:
                await workflow.start_child_workflow(
                    CIConcurrencyGroupWorkflow.run,
                    GroupState(tenant_id=inp.push.tenant_id, group=group, pending=req),
                    id=group_id,
                    task_queue=orchestration_queue(inp.push.queue_prefix),
                    parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                )
            except WorkflowAlreadyStartedError:
                await workflow.get_external_workflow_handle(group_id).signal(SIGNAL_GROUP_ACQUIRE, req)
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

    # Recording ----------------------------------------------------------------------------

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

    def _set_status(self, status: RunStatus) -> None:
        if self._state.status != status:
            self._state.status = status
            workflow.upsert_search_attributes([sa.RUN_STATE.value_set(status.value)])
            self._snapshots.changed()

    # Expression contexts ------------------------------------------------------------------

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
            "vars": dict(inp.push.variables),
            "inputs": dict(inp.push.inputs),
        }

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
