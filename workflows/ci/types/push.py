"""A push turned into runs: the push workflow's input and state, and the listing activity's I/O."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

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


class CIPushInput(BaseModel):
    """Start input of ``CIPushWorkflow`` (built by the API; queues and timeouts from settings)."""

    tenant_id: str
    repo_id: str
    # "owner/name": GITHUB_REPOSITORY and ``github.repository``.
    repo_full_name: str
    clone_url: str
    commit_sha: str
    # Full ref, e.g. "refs/heads/main" or "refs/tags/v1".
    ref: str
    received_at: datetime
    # The deployment's task-queue prefix (settings.queue_prefix).
    queue_prefix: str = ""
    # settings.ci_heartbeat_timeout_seconds etc., resolved by the API.
    heartbeat_timeout_seconds: float = 15.0
    cancel_grace_seconds: float = 5.0
    retry_window_seconds: float = 3 * 24 * 3600
    delivery_id: str | None = None
    # "push" or "pull_request" (then ``ref`` is ``refs/pull/<n>/head`` and ``pull_request`` is set).
    event: str = "push"
    pull_request: PullRequestInfo | None = None
    # The tenant's plan when the push was accepted: its jobs dispatch with this fairness
    # weight, and at most this many of the tenant's jobs run at once (None: uncapped).
    fairness_weight: float | None = None
    max_concurrent_jobs: int | None = None
    # False dispatches the jobs FIFO with everyone else's (no fairness key): a benchmark
    # baseline and an operator's escape hatch.
    fair_share: bool = True
    # The repository's default branch (caches of other refs fall back to its scope).
    default_branch: str | None = None


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
