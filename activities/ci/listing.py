"""Control activity of CI: read and parse the workflow files at a pushed commit."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.ci.actions import ActionResolver, ActionSource
from activities.ci.definitions import CIListingDefinition
from activities.ci.git import GitError, GitMirror, InvalidRequest
from activities.ci.spec import (
    MAX_WORKFLOW_BYTES,
    WorkflowSpecError,
    parse_workflow,
    pull_request_triggers,
    push_triggers,
)
from leasehold.records.ci.environments import CIEnvironment
from workflows.ci.types.push import (
    ACTIVITY_LIST_WORKFLOWS,
    PUSH_GIT_FAILED,
    EnvironmentRule,
    ListWorkflowsInput,
    ListWorkflowsResult,
)
from workflows.ci.types.spec import SpecError, WorkflowFile

# (tenant, repo, environment names) -> the rules of those that require approval.
EnvironmentRules = Callable[[str, str, Iterable[str]], dict[str, EnvironmentRule]]


class CIListingActivities(CIListingDefinition):
    """Runs on CI workers (they hold the git mirrors), on the control queue."""

    def __init__(
        self, mirror: GitMirror, environments: EnvironmentRules | None = None, actions: ActionSource | None = None
    ) -> None:
        self._mirror = mirror
        self._environments = environments
        # Where `owner/repo@ref` actions come from; None: only local `./path` actions resolve.
        self._actions = actions

    @activity.defn(name=ACTIVITY_LIST_WORKFLOWS)
    def list_workflows(self, inp: ListWorkflowsInput) -> ListWorkflowsResult:
        """Fetch the mirror, then parse each ``.github/workflows/*.yml|yaml`` and match ``on.push``."""
        try:
            mirror = self._mirror.ensure_commit(inp.repo_id, inp.clone_url, inp.commit_sha, activity.heartbeat)
            found = self._mirror.workflow_files(mirror, inp.commit_sha, MAX_WORKFLOW_BYTES)
        except InvalidRequest as exc:
            raise ApplicationError(str(exc), type=PUSH_GIT_FAILED, non_retryable=True) from exc
        except GitError as exc:
            # Transient (network, a fetch racing a push): Temporal retries, then the push fails.
            raise ApplicationError(str(exc), type=type(exc).__name__) from exc
        files = []
        for path, content in found:
            if content is None:
                error = SpecError(file=path, message=f"file is larger than {MAX_WORKFLOW_BYTES} bytes")
                files.append(WorkflowFile(path=path, error=error))
                continue
            try:
                spec = parse_workflow(path, content)
                # Each file's actions on their own: a bad action fails only the file using it.
                ActionResolver(
                    self._actions, self._mirror, mirror, inp.commit_sha, activity.heartbeat
                ).resolve_workflow(spec)
            except WorkflowSpecError as exc:
                # The run is still created, and fails with this message.
                files.append(WorkflowFile(path=path, error=exc.error))
                continue
            if inp.event == "pull_request":
                triggered = pull_request_triggers(spec.on_pull_request, inp.base_ref or "", inp.action or "opened")
            else:
                triggered = push_triggers(spec.on_push, inp.ref)
            files.append(WorkflowFile(path=path, spec=spec, triggered=triggered))
        named = {j.environment for f in files if f.spec and f.triggered for j in f.spec.jobs if j.environment}
        rules: dict[str, EnvironmentRule] = {}
        if named and inp.tenant_id and self._environments is not None:
            # Read with the listing, so the run carries its protection rules from the start.
            rules = self._environments(inp.tenant_id, inp.repo_id, named)
        return ListWorkflowsResult(files=files, environments=rules)


def environment_rules(
    factory: sessionmaker, tenant_id: str, repo_id: str, names: Iterable[str]
) -> dict[str, EnvironmentRule]:
    """The protection rules of the named environments that require approval (lower-case names),
    as the run workflow's payload (the records module knows nothing of workflows)."""
    wanted = {n.lower() for n in names}
    if not wanted:
        return {}
    with factory() as session:
        rows = session.scalars(
            select(CIEnvironment).where(
                CIEnvironment.tenant_id == tenant_id,
                CIEnvironment.repo_id == repo_id,
                CIEnvironment.name.in_(wanted),
                CIEnvironment.required_approval.is_(True),
            )
        ).all()
    return {
        r.name: EnvironmentRule(name=r.display_name, required_approval=True, approvers=list(json.loads(r.approvers)))
        for r in rows
    }
