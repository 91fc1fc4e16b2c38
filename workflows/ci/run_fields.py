"""What a ``CIRunWorkflow`` keeps: the run's state at its start (``initial_state``), and the
fields its parts (``workflows.ci.run_*``) share, declared here and assigned in
``CIRunWorkflow.__init__``."""

from __future__ import annotations

import asyncio
from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows import search_attributes as sa
    from workflows.ci.event import push_github_context
    from workflows.ci.expressions import ExpressionError, interpolate
    from workflows.ci.ids import idempotency_key
    from workflows.ci.matrix import ResolvedStrategy
    from workflows.ci.types.concurrency import GroupOutcome
    from workflows.ci.types.job import JobResult
    from workflows.ci.types.run import CIRunInput, CIRunState, JobState, RunStatus
    from workflows.ci.types.semaphore import SlotRequest
    from workflows.ci.types.spec import JobSpec
    from workflows.snapshots import SnapshotWriter

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


def initial_state(inp: CIRunInput) -> CIRunState:
    """The run's state at its start: every job of the file pending."""
    spec = inp.spec
    pr = inp.push.pull_request
    # pull_request_target builds the base repository's own commit: a fork's pull request
    # cannot change what runs, so secrets are allowed (as on GitHub).
    from_fork = pr is not None and pr.from_fork and inp.push.event == "pull_request"
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


class RunFields:
    """The fields of a run workflow, declared once for the classes it is built from."""

    _inp: CIRunInput
    # The file's jobs by id (a combination runs its matrix job's).
    _jobs: dict[str, JobSpec]
    _state: CIRunState
    _handles: dict[str, workflow.ActivityHandle[JobResult]]
    _tasks: dict[str, asyncio.Task[None]]
    # Jobs whose running activity was asked to cancel (their attempts must not start).
    _cancelling: set[str]
    _dirty: bool
    _retry_pending: bool
    # Job rounds holding a slot of the tenant's cap, and release signals in flight.
    _granted: set[str]
    # Jobs told to stop waiting for a slot (the run was cancelled meanwhile).
    _abort_wait: set[str]
    _releases: list[asyncio.Task[None]]
    # Slots of job rounds that just ended, kept until the next scheduling pass: a job made
    # ready by it inherits one (``SlotTransfer``); the rest are released after the pass.
    _spare_slots: list[str]
    # Slot requests of this pass not yet sent, and the task that sends them in one signal.
    _acquire_batch: list[SlotRequest]
    _acquire_flush: asyncio.Task[None] | None
    # Transfers not awaited by the job that inherited the slot, by the key they made held:
    # anything that later sends that key (release, next transfer) waits for it first.
    _slot_moves: dict[str, asyncio.Task[None]]
    # Job rounds whose slot request the semaphore has acknowledged and that wait for its
    # grant (key -> job id, oldest first): a spare slot of this run may go to them instead.
    _awaiting_grant: dict[str, str]
    # The read model's copy of ``_state``: written in the background, never awaited by
    # a job (see ``SnapshotWriter``).
    _snapshots: SnapshotWriter
    _last_snapshot_at: datetime | None
    # Matrix jobs: the evaluated strategy of each expanded one (rebuilt by replay).
    _strategies: dict[str, ResolvedStrategy]
    # Concurrency groups: member key -> job id ("" for the whole run), the group's answer,
    # the members told to cancel, the job-level group (and cancel-in-progress) per job.
    _group_keys: dict[str, str]
    _group_notices: dict[str, GroupOutcome]
    _preempted: set[str]
    _job_groups: dict[str, tuple[str, bool]]
    # Specs as the last round of a job started them, where they differ from the file's.
    _round_specs: dict[str, JobSpec]
    # The run's own place in its workflow-level group this round: (group, key).
    _run_group: tuple[str, str] | None
    # Why a job about to end cancelled was cancelled (fail-fast, a concurrency group).
    _cancel_reasons: dict[str, str]
    # Slot requests sent (or about to be) and not granted, transferred or withdrawn yet; the
    # job rounds waiting in the run's own queue for a slot it holds (job ids, oldest first);
    # and the slots handed to them, not taken yet (job id -> slot key).
    _requested: set[str]
    _slot_queue: list[str]
    _slot_gifts: dict[str, str]
    # Attempts granted with their activity and not recorded yet (job id -> (round, attempt)),
    # and the highest attempt number ever issued per job (a number is never issued twice).
    _reserved: dict[str, tuple[int, int]]
    _issued: dict[str, int]
    # Job queues this run has had a slot granted for (a live worker polled them then): a slot
    # of the run moves (hand-over, transfer, inheritance) only to a job round on one of them,
    # so a round no worker serves never holds one.
    _served_queues: set[str]
    # Requests the semaphore said wait on a queue no worker polls (keys): not counted in play.
    _unserved_asks: set[str]
    # Requests the semaphore dropped after a day on an unserved queue (keys): their rounds fail.
    _expired_asks: set[str]
    # Image queues probed for pollers (``RunScheduling._image_queue_polled``): queue -> (when,
    # polled then); an answer is used for ``IMAGE_PROBE_FRESH``.
    _image_probes: dict[str, tuple[datetime, bool]]

    def _set_status(self, status: RunStatus) -> None:
        if self._state.status != status:
            self._state.status = status
            workflow.upsert_search_attributes([sa.RUN_STATE.value_set(status.value)])
            self._snapshots.changed()
