"""``on.workflow_run``: a run's rounds trigger the files that listen for its workflow.

When a round of a run starts (``requested``) and when it ends (``completed``), a run whose push
listed some file with ``on.workflow_run`` naming this workflow (``CIRunInput.notify_workflow_run``,
from the listing's ``workflow_run_listened``)
starts a push of event ``workflow_run`` on the repository's default branch: as on GitHub, the
listening workflow runs at the default branch's head (its commit resolved when that push is
listed), with ``github.event.workflow_run`` describing the triggering run (name, branch, commit,
event, status, conclusion). The push is a child workflow under a deterministic id (run + round
+ action), so a replayed task or a repeated round starts nothing twice. Chains stop after three
levels (GitHub's limit): a run started by a third-level ``workflow_run`` triggers nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from workflows import search_attributes as sa
    from workflows.ci.ids import push_id, push_workflow_id
    from workflows.ci.types.push import CIPushInput
    from workflows.ci.types.run import CIRunInput, CIRunState, RunStatus
    from workflows.queues import orchestration_queue

# GitHub: "You can't use workflow_run to chain together more than three levels of workflows."
MAX_WORKFLOW_RUN_DEPTH = 3
PUSH_WORKFLOW = "CIPushWorkflow"


def _conclusion(status: RunStatus) -> str | None:
    return {RunStatus.SUCCESS: "success", RunStatus.FAILURE: "failure", RunStatus.CANCELLED: "cancelled"}.get(status)


def event_payload(inp: CIRunInput, state: CIRunState, action: str, at: datetime) -> dict[str, Any]:
    """``github.event`` of the triggered runs: the fields of GitHub's ``workflow_run`` payload
    a listening workflow reads."""
    push = inp.push
    head_branch = push.pull_request.head_ref if push.pull_request else push.ref.removeprefix("refs/heads/")
    run = {
        "id": inp.run_id,
        "name": state.workflow_name,
        "path": inp.workflow_path,
        "display_title": state.display_title or state.workflow_name,
        "run_number": inp.run_number or 1,
        "run_attempt": state.retries + 1,
        "event": push.event,
        "status": "completed" if action == "completed" else "requested",
        "conclusion": _conclusion(state.status) if action == "completed" else None,
        "head_branch": head_branch,
        "head_sha": push.commit_sha,
        "created_at": inp.created_at.isoformat(),
        "updated_at": at.isoformat(),
    }
    return {
        "action": action,
        "workflow_run": run,
        "workflow": {"name": state.workflow_name, "path": inp.workflow_path},
        "repository": {"full_name": push.repo_full_name},
        "sender": {"login": push.actor or push.repo_full_name.split("/")[0]},
    }


def workflow_run_push(inp: CIRunInput, state: CIRunState, round_number: int, action: str) -> CIPushInput | None:
    """The ``workflow_run`` push of this round's ``action``, or None when nothing listens (or
    the chain is three levels deep already). Built at once: the state is read as it is now."""
    push = inp.push
    depth = push.workflow_run_depth + 1 if push.event == "workflow_run" else 1
    if not inp.notify_workflow_run or depth > MAX_WORKFLOW_RUN_DEPTH or not push.default_branch:
        return None
    payload = event_payload(inp, state, action, workflow.now())
    triggered = push.model_copy(
        update={
            "event": "workflow_run",
            "ref": f"refs/heads/{push.default_branch}",
            "commit_sha": "",
            "before": "",
            "pull_request": None,
            "dispatch_workflow": "",
            "dispatch_key": f"workflow_run:{inp.run_id}:{round_number}:{action}",
            "inputs": {},
            "action": action,
            "event_payload": payload,
            "workflow_run_depth": depth,
            "triggering_workflow": state.workflow_name,
            "triggering_branch": payload["workflow_run"]["head_branch"],
        }
    )
    return CIPushInput(push=triggered, received_at=workflow.now())


async def start_workflow_run_push(triggered: CIPushInput) -> None:
    """Start that push (once: a replayed task or a repeated start finds it started)."""
    push = triggered.push
    pid = push_id(push.repo_id, "", push.ref, push.dispatch_key)
    try:
        await workflow.start_child_workflow(
            PUSH_WORKFLOW,
            triggered,
            id=push_workflow_id(pid),
            task_queue=orchestration_queue(push.queue_prefix),
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(sa.TENANT_ID, push.tenant_id), SearchAttributePair(sa.REPO_ID, push.repo_id)]
            ),
        )
    except WorkflowAlreadyStartedError:
        pass  # this round's action was already announced
