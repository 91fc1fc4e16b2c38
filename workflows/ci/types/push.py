"""A push turned into runs: the push workflow's input and state, and the listing activity's I/O."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from workflows.ci.types.spec import WorkflowFile

# The activity that reads the workflow files at a pushed commit (a CI worker holds the mirrors).
ACTIVITY_LIST_WORKFLOWS = "ci_list_workflows"
# Error type of a push whose workflow files could not be read (the push workflow fails with it).
PUSH_GIT_FAILED = "CIPushGitFailed"


class PullRequestInfo(BaseModel):
    """The pull request a ``pull_request`` run builds (its head commit)."""

    number: int
    # Branch names (not full refs) of the head and the base.
    head_ref: str
    base_ref: str
    head_repo: str
    base_repo: str
    action: str = "opened"

    @property
    def from_fork(self) -> bool:
        """Code from outside the repository: it runs without the tenant's secrets."""
        return self.head_repo.lower() != self.base_repo.lower()


class PushContext(BaseModel):
    """What a push is, and how its work runs: built once by the API (or the reconciler) and
    carried unchanged by the push, each of its runs and each of their jobs (``push`` of
    ``CIPushInput``, ``CIRunInput`` and ``JobActivityInput``)."""

    tenant_id: str
    repo_id: str
    # "owner/name": GITHUB_REPOSITORY and ``github.repository``.
    repo_full_name: str
    clone_url: str
    commit_sha: str
    # Full ref, e.g. "refs/heads/main" or "refs/tags/v1".
    ref: str
    # The deployment's task-queue prefix (settings.queue_prefix).
    queue_prefix: str = ""
    # settings.ci_heartbeat_timeout_seconds etc., resolved by the API.
    heartbeat_timeout_seconds: float = 15.0
    cancel_grace_seconds: float = 5.0
    # How long a finished run stays open for job retries before its workflow completes.
    retry_window_seconds: float = 3 * 24 * 3600
    # "push" or "pull_request" (then ``ref`` is ``refs/pull/<n>/head`` and ``pull_request`` is set).
    event: str = "push"
    pull_request: PullRequestInfo | None = None
    # The tenant's plan when the push was accepted: its jobs dispatch with this fairness
    # weight, and at most this many of the tenant's jobs run at once (None: uncapped).
    fairness_weight: float | None = None
    max_concurrent_jobs: int | None = None
    # The sandbox backend the tenant's plan asks for (``leasehold plans isolation``): its jobs
    # go to that backend's queue (``workflows.queues.ci_queue``).
    isolation: str = "bubblewrap"
    # The ``vars`` context (configuration variables, read when the push was accepted; bounded
    # by ``leasehold.records.ci.variables``): every job of its runs sees the same values.
    variables: dict[str, str] = Field(default_factory=dict)
    # False dispatches the jobs FIFO with everyone else's (no fairness key): a benchmark
    # baseline and an operator's escape hatch.
    fair_share: bool = True
    # Image affinity (``settings.ci_image_affinity_seconds``): how long a ``container:`` job
    # whose image was pinned waits for a worker holding that image before any worker of its
    # labels may take it; 0 (and pushes accepted before it existed): no affinity.
    image_affinity_seconds: float = 0.0
    # The repository's default branch (caches of other refs fall back to its scope).
    default_branch: str | None = None
    # Who pushed (the webhook's sender login, else the pusher's name): ``github.actor``; empty
    # when unknown (a reconciled push), then the repository owner stands in.
    actor: str = ""
    # The webhook payload as ``github.event`` and ``$GITHUB_EVENT_PATH`` show it, bounded by
    # ``clients.ci.event`` (None: the job builds a minimal one from the fields above).
    event_payload: dict[str, Any] | None = None
    # ``workflow_dispatch`` inputs (``inputs`` context), by name.
    inputs: dict[str, str | bool | float] = Field(default_factory=dict)
    # The push's ``before`` (the webhook's, or the head the reconciler saw last): what
    # ``on.push.paths`` diffs against. Empty or all zeros: the commit's first parent.
    before: str = ""
    # A ``workflow_dispatch`` (``event``): the workflow file asked for (a path or a file name
    # under .github/workflows) and the dispatch's key (the caller's Idempotency-Key, else a
    # fresh one: every dispatch is a new run). ``commit_sha`` is empty and ``ref`` as the caller
    # wrote it until the listing resolves them; ``inputs`` are as given until it checks them.
    dispatch_workflow: str = ""
    dispatch_key: str = ""
    # The webhook's activity type for events without a pull request (``release`` published,
    # ``merge_group`` checks_requested); a pull request's is ``pull_request.action``.
    action: str = ""
    # A ``workflow_run`` push: how many workflow_run levels led here (1 for the first), and the
    # triggering run's workflow name and head branch (what ``on.workflow_run`` filters match).
    workflow_run_depth: int = 0
    triggering_workflow: str = ""
    triggering_branch: str = ""

    def vars_with(self, environment_variables: Mapping[str, str]) -> dict[str, str]:
        """The ``vars`` context of a job: its environment's variables (``environment:``, read
        when the push was listed) over the push's, as GitHub layers them."""
        return {**self.variables, **environment_variables}


_PUSH_FIELDS = frozenset(PushContext.model_fields)


class PushScoped(BaseModel):
    """A payload about one push, whose context it nests as ``push``.

    Payloads written before the context was nested (running executions, recorded histories)
    carry its fields flat: they are folded into ``push`` on the way in, and so are flat names
    given to the constructor or to ``model_copy(update=...)``. On the way out the fields are
    written both nested and flat, so a worker still on the previous version reads the payload;
    the flat copy can go once no such worker runs.
    """

    push: PushContext

    @model_validator(mode="before")
    @classmethod
    def _fold_flat_fields(cls, data: Any) -> Any:
        if isinstance(data, dict) and "push" not in data:
            return {
                **{k: v for k, v in data.items() if k not in _PUSH_FIELDS},
                "push": {k: v for k, v in data.items() if k in _PUSH_FIELDS},
            }
        return data

    @model_serializer(mode="wrap")
    def _also_flat(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and isinstance(data.get("push"), dict):
            return {**data["push"], **data}
        return data

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        if update and _PUSH_FIELDS.intersection(update):
            rest = {k: v for k, v in update.items() if k not in _PUSH_FIELDS}
            push = rest.get("push", self.push).model_copy(update={k: v for k, v in update.items() if k in _PUSH_FIELDS})
            update = {**rest, "push": push}
        return super().model_copy(update=update, deep=deep)


class CIPushInput(PushScoped):
    """Start input of ``CIPushWorkflow`` (built by the API; queues and timeouts from settings)."""

    received_at: datetime
    delivery_id: str | None = None


class RunRef(BaseModel):
    """A run created (or found) by a push."""

    run_id: str
    workflow_id: str
    workflow_path: str
    # False when the run already existed (same repo + commit + workflow file).
    created: bool = True


class PushStatus(StrEnum):
    LISTING = "listing"
    DONE = "done"
    FAILED = "failed"


class CIPushState(BaseModel):
    """Answer of ``CIPushWorkflow.state`` (and its result)."""

    push_id: str
    status: PushStatus = PushStatus.LISTING
    runs: list[RunRef] = Field(default_factory=list)
    # Workflow files whose ``on.push`` did not match this ref.
    not_triggered: list[str] = Field(default_factory=list)
    error: str | None = None


class ListWorkflowsInput(BaseModel):
    """Input of the control activity that fetches the mirror and reads workflow files."""

    repo_id: str
    clone_url: str
    commit_sha: str
    ref: str
    event: str = "push"
    # For pull requests: the base branch the ``on.pull_request`` filters match, and the action.
    base_ref: str | None = None
    action: str | None = None
    # Whose repository: the activity reads its protected environments.
    tenant_id: str | None = None
    # The push's ``before`` (see ``PushContext.before``), for ``paths`` filters.
    before: str | None = None
    # A ``workflow_dispatch``: the file asked for and the inputs given (``commit_sha`` is empty
    # and ``ref`` a branch or tag name or full ref: the activity resolves it).
    dispatch_workflow: str | None = None
    inputs: dict[str, str | bool | float] = Field(default_factory=dict)
    # The push's dispatch key (``PushContext.dispatch_key``): part of its runs' ids, which the
    # activity numbers.
    dispatch_key: str = ""
    # A ``workflow_run``: the triggering run's workflow name and head branch.
    triggering_workflow: str = ""
    triggering_branch: str = ""
    # What the push's own ``vars`` take of the per-run bound (``variables_size``): the
    # environments' variables the activity reads get the rest.
    variables_bytes: int = 0
    # The push itself: what an ``environment:`` name written with ``${{ }}`` is evaluated over
    # (``github``, ``vars``, ``inputs``, as its runs' jobs see them). None in inputs written
    # before it was carried: such a name is then refused.
    push: PushContext | None = None


def variables_size(variables: Mapping[str, str]) -> int:
    """What ``variables`` take of a run's bound on them, counted as
    ``leasehold.records.ci.variables`` counts them: names and values' UTF-8 bytes."""
    return sum(len(name) + len(value.encode()) for name, value in variables.items())


class EnvironmentRule(BaseModel):
    """A repository's protection of one deployment environment, as a run sees it."""

    name: str
    required_approval: bool = False
    # User ids of the tenant who may approve; empty: any user of the tenant.
    approvers: list[str] = Field(default_factory=list)


class ListWorkflowsResult(BaseModel):
    files: list[WorkflowFile] = Field(default_factory=list)
    # The repository's protected environments that the files' jobs name (lower-case names).
    environments: dict[str, EnvironmentRule] = Field(default_factory=dict)
    # The configuration variables of the environments the files' jobs name (lower-case name ->
    # name -> value; those without any left out): a job naming one sees them over ``vars``.
    environment_variables: dict[str, dict[str, str]] = Field(default_factory=dict)
    # A ``workflow_dispatch``: the commit and full ref it resolved to, and its inputs as the
    # ``inputs`` context holds them (defaults applied, typed). None for other events.
    commit_sha: str | None = None
    ref: str | None = None
    inputs: dict[str, str | bool | float] | None = None
    # ``github.run_number`` of each file that makes a run (path -> number), assigned once per
    # run id; empty when the activity has no counter (then runs show 1).
    run_numbers: dict[str, int] = Field(default_factory=dict)
    # The repository has a status reporter (its runs report to the git host).
    report_status: bool = False
    # The files whose workflow some listed file's ``on.workflow_run`` names: their runs start
    # ``workflow_run`` pushes (``workflows.ci.run_triggers``).
    workflow_run_listened: list[str] = Field(default_factory=list)


# Error type of a dispatch the workflow file refuses (unknown ref or file, no
# ``workflow_dispatch`` trigger, a bad input); its details are the field at fault.
DISPATCH_REJECTED = "CIDispatchRejected"
