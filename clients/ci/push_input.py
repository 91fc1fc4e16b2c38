"""Building the ``CIPushInput`` of a push: the one place the webhook API and the reconciler share,
so a commit reaches ``ci_start.start_push`` the same way (and under the same push id) from both."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from leasehold.records.ci.plans import TenantPlan
from leasehold.records.ci.repos import RepoRecord
from leasehold.settings import Settings
from workflows.ci.event import bounded_event, event_actor
from workflows.ci.types.push import CIPushInput, PullRequestInfo, PushContext
from workflows.queues import DEFAULT_CI_ISOLATION

SHA = re.compile(r"^(?:[0-9a-fA-F]{40}|[0-9a-fA-F]{64})$")


def push_input(
    settings: Settings,
    repo: RepoRecord,
    sha: str,
    ref: str,
    delivery: str | None,
    pull_request: PullRequestInfo | None = None,
    plan: TenantPlan | None = None,
    event: dict[str, Any] | None = None,
    before: str | None = None,
    variables: dict[str, str] | None = None,
    event_name: str | None = None,
    dispatch_key: str = "",
    action: str = "",
) -> CIPushInput:
    """The push of ``sha`` to ``ref`` with the deployment's queues and CI timeouts and the
    tenant's plan as of now; ``event`` is the webhook payload (its sender is ``github.actor``,
    its ``before`` what ``paths`` filters diff against unless ``before`` is given); ``variables``
    is the ``vars`` context its runs see (``leasehold.records.ci.variables.variables_for``).
    ``event_name`` is the GitHub event (default ``push``, or ``pull_request`` with one), and
    ``dispatch_key`` names an event that is not a push of a commit to a ref (its push and runs
    are its own: a label added to a pull request, a release, a pull_request_target run)."""
    if before is None and event is not None:
        before = event.get("before") if isinstance(event.get("before"), str) else None
    return CIPushInput(
        push=PushContext(
            tenant_id=repo.tenant_id,
            repo_id=repo.id,
            repo_full_name=repo.name,
            clone_url=repo.clone_url,
            commit_sha=sha.lower(),
            ref=ref,
            queue_prefix=settings.queue_prefix,
            heartbeat_timeout_seconds=settings.ci_heartbeat_timeout_seconds,
            cancel_grace_seconds=settings.ci_cancel_grace_seconds,
            retry_window_seconds=settings.ci_retry_window_seconds,
            event=event_name or ("pull_request" if pull_request is not None else "push"),
            pull_request=pull_request,
            fairness_weight=plan.fairness_weight if plan else None,
            max_concurrent_jobs=plan.max_concurrent_jobs if plan else None,
            isolation=plan.isolation if plan else DEFAULT_CI_ISOLATION,
            image_affinity_seconds=settings.ci_image_affinity_seconds,
            variables=dict(variables or {}),
            default_branch=repo.default_branch,
            actor=event_actor(event) if event is not None else "",
            event_payload=bounded_event(event) if event is not None else None,
            before=before.lower() if before is not None and SHA.match(before) else "",
            dispatch_key=dispatch_key,
            action=action,
        ),
        received_at=datetime.now(UTC),
        delivery_id=delivery,
    )


def dispatch_input(
    settings: Settings,
    repo: RepoRecord,
    workflow: str,
    ref: str,
    inputs: dict[str, str | bool | float],
    key: str,
    actor: str,
    plan: TenantPlan | None = None,
    variables: dict[str, str] | None = None,
) -> CIPushInput:
    """A ``workflow_dispatch`` of ``workflow`` at ``ref`` (resolved, with ``inputs`` checked,
    when the push is listed), named by ``key``, by ``actor`` (``github.actor``)."""
    inp = push_input(settings, repo, "", ref, None, plan=plan, variables=variables)
    push = inp.push.model_copy(
        update={"event": "workflow_dispatch", "dispatch_workflow": workflow, "dispatch_key": key, "inputs": inputs}
    )
    push.actor = actor[:256]
    return inp.model_copy(update={"push": push})
