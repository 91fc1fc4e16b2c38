"""Activities of the CI reconciler (``CIReconcileWorkflow``): list repositories, and per repository
fetch its mirror and push the new heads of watched branches through ``ci_start.start_push``.

They run on CI workers (control queue): those hold the mirrors, the database and a client.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from sqlalchemy.orm import sessionmaker
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from actions_language.loader import MAX_WORKFLOW_BYTES
from actions_language.parser import parse_workflow
from actions_language.schema import WorkflowSpecError
from actions_language.triggers import push_triggers
from activities.ci.definitions import CIReconcileDefinition
from activities.ci.git import GitError, GitMirror, InvalidRequest
from clients.ci.push_input import push_input
from clients.ci.start import start_push
from leasehold.db_retry import in_activity
from leasehold.records.ci.heads import known_heads, record_head
from leasehold.records.ci.plans import get_plan
from leasehold.records.ci.repos import RepoRecord, all_repos
from leasehold.records.ci.variables import variables_for
from leasehold.settings import Settings
from workflows.ci.types.reconcile import (
    ACTIVITY_RECONCILE_LIST,
    ACTIVITY_RECONCILE_REPO,
    ReconciledPush,
    ReconcileInput,
    ReconcileRepoInput,
    ReconcileRepoResult,
    ReconcileRepos,
)

log = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 30.0
# Delivery id the reconciler's pushes carry (webhooks carry the host's).
RECONCILER_DELIVERY = "reconciler"


class CIReconcileActivities(CIReconcileDefinition):
    """Built once per CI worker with its settings, database, mirrors and Temporal client."""

    def __init__(
        self,
        settings: Settings,
        db: sessionmaker,
        mirror: GitMirror,
        client: Client,
        loop: asyncio.AbstractEventLoop,
        failover_seconds: float | None = None,
    ) -> None:
        self._settings = settings
        # A failover is waited out in place; both activities are idempotent, so a try that met
        # it starts again from the top.
        self._failover_seconds = (
            failover_seconds if failover_seconds is not None else settings.database_failover_seconds
        )
        self._db = db
        self._mirror = mirror
        self._client = client
        self._loop = loop

    @activity.defn(name=ACTIVITY_RECONCILE_LIST)
    def list_repos(self, inp: ReconcileInput) -> ReconcileRepos:
        """The registered repositories (all tenants), oldest first."""
        found = in_activity(lambda: all_repos(self._db, inp.repo_ids), self._failover_seconds, "repositories", log)
        return ReconcileRepos(repo_ids=[r.id for r in found])

    def _watched(self, repo: RepoRecord, sha: str, branch: str, mirror: Path) -> bool:
        """The default branch, or a branch some workflow file at its head triggers on."""
        if branch == repo.default_branch:
            return True
        ref = f"refs/heads/{branch}"
        found = self._mirror.workflow_files(mirror, sha, MAX_WORKFLOW_BYTES)
        for path, content in found:
            if content is None:
                return True  # an unreadable file still gets a (failing) run, as on delivery
            try:
                # Read as the listing reads it, reusable workflows it calls included.
                if push_triggers(parse_workflow(path, content, dict(found).get).on_push, ref):
                    return True
            except WorkflowSpecError:
                return True
        return False

    @activity.defn(name=ACTIVITY_RECONCILE_REPO)
    def reconcile_repo(self, inp: ReconcileRepoInput) -> ReconcileRepoResult:
        """Push every changed head of a watched branch (idempotent: re-running it pushes the
        same ids, which exist already)."""
        return in_activity(lambda: self._reconcile(inp), self._failover_seconds, f"reconcile {inp.repo_id}", log)

    def _reconcile(self, inp: ReconcileRepoInput) -> ReconcileRepoResult:
        result = ReconcileRepoResult(repo_id=inp.repo_id)
        found = all_repos(self._db, [inp.repo_id])
        if not found:
            return result  # deleted meanwhile
        repo = found[0]
        try:
            mirror, heads = self._mirror.fetch_heads(repo.id, repo.clone_url, activity.heartbeat)
        except InvalidRequest as exc:
            raise ApplicationError(str(exc), type="CIReconcileInvalidRepo", non_retryable=True) from exc
        except GitError as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__) from exc
        known = known_heads(self._db, repo.id)
        plan = None
        variables: dict[str, str] | None = None
        for branch, sha in sorted(heads.items()):
            ref = f"refs/heads/{branch}"
            if known.get(ref) == sha:
                continue
            activity.heartbeat()
            if not self._watched(repo, sha, branch, mirror):
                result.unwatched.append(ref)
                record_head(self._db, repo.id, ref, sha)
                continue
            plan = plan or get_plan(self._db, self._settings, repo.tenant_id)
            variables = variables if variables is not None else variables_for(self._db, repo.tenant_id, repo.id)
            # The head seen last is the push's ``before``, so ``paths`` filters see the same diff
            # a webhook would have given (none known: the commit's first parent).
            push = push_input(
                self._settings,
                repo,
                sha,
                ref,
                RECONCILER_DELIVERY,
                plan=plan,
                before=known.get(ref),
                variables=variables,
            )
            future = asyncio.run_coroutine_threadsafe(start_push(self._client, push), self._loop)
            pid = future.result(timeout=START_TIMEOUT_SECONDS)
            # Recorded only once the push is durable: a crash before this pushes it again (same id).
            record_head(self._db, repo.id, ref, sha)
            log.info("reconciler pushed %s %s@%s as %s", repo.id, ref, sha[:12], pid)
            result.pushes.append(ReconciledPush(repo_id=repo.id, ref=ref, commit_sha=sha, push_id=pid))
        return result
