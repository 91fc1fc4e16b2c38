"""The reconciler of lost webhooks (``CIReconcileWorkflow``): its input, activities and result."""

from __future__ import annotations

from pydantic import BaseModel, Field

# Its activities (on the control queue, where the mirrors are).
ACTIVITY_RECONCILE_LIST = "ci_reconcile_list_repos"
ACTIVITY_RECONCILE_REPO = "ci_reconcile_repo"


class ReconcileInput(BaseModel):
    """Input of ``CIReconcileWorkflow`` (the schedule's action holds one)."""

    queue_prefix: str = ""
    # Only these repositories (None: every registered one).
    repo_ids: list[str] | None = None


class ReconcileRepos(BaseModel):
    """The repositories to look at, oldest first."""

    repo_ids: list[str] = Field(default_factory=list)


class ReconcileRepoInput(BaseModel):
    repo_id: str


class ReconciledPush(BaseModel):
    """A branch head the reconciler pushed (``ci_start.start_push``: a no-op when a webhook
    already delivered the same repository + commit + ref)."""

    repo_id: str
    ref: str
    commit_sha: str
    push_id: str


class ReconcileRepoResult(BaseModel):
    repo_id: str
    pushes: list[ReconciledPush] = Field(default_factory=list)
    # Changed heads of branches no workflow watches (recorded, not pushed).
    unwatched: list[str] = Field(default_factory=list)


class ReconcileResult(BaseModel):
    repos: int = 0
    pushes: list[ReconciledPush] = Field(default_factory=list)
    # repo id -> why it could not be reconciled this time (tried again next interval).
    errors: dict[str, str] = Field(default_factory=dict)
