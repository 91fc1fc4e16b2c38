"""``CIReconcileWorkflow``: find commits whose webhook was lost and push them, like a delivery would.

Started by a Temporal Schedule (``ci_start.ensure_reconcile_schedule``, every
``settings.ci_reconcile_interval_seconds``). It lists the registered repositories, then per
repository (a few at a time, on the control queue where the mirrors are) fetches the mirror,
compares each branch head with the last one it saw, and hands changed heads of watched branches
(the default branch, and branches some workflow's ``on.push`` matches) to
``ci_start.start_push``. Push and run ids are derived from repository + commit (+ ref), so a
head that a webhook also delivered still makes exactly one push and one run per workflow file.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError
from temporalio.types import MethodSyncSingleParam

with workflow.unsafe.imports_passed_through():
    from activities.ci.definitions import CIReconcileDefinition
    from workflows.ci.types.reconcile import (
        ReconcileInput,
        ReconcileRepoInput,
        ReconcileRepoResult,
        ReconcileResult,
    )
    from workflows.queues import (
        CI_RECONCILE_HEARTBEAT_SECONDS,
        CI_RECONCILE_MAX_ATTEMPTS,
        CI_RECONCILE_PARALLEL_REPOS,
        CI_RECONCILE_REPO_TIMEOUT_SECONDS,
        CI_RECONCILE_REPOS_PER_RUN,
        ci_control_queue,
    )

A = TypeVar("A")
R = TypeVar("R")


# Pinned (the orchestration worker's default): a pass is short; its continue-as-new pages stay
# on the same build.
@workflow.defn
class CIReconcileWorkflow:
    """See the module docstring."""

    @workflow.run
    async def run(self, inp: ReconcileInput) -> ReconcileResult:
        listed = await self._activity(CIReconcileDefinition.list_repos, inp, inp.queue_prefix)
        ids = listed.repo_ids
        now, later = ids[:CI_RECONCILE_REPOS_PER_RUN], ids[CI_RECONCILE_REPOS_PER_RUN:]
        result = ReconcileResult(repos=len(now))
        for start in range(0, len(now), CI_RECONCILE_PARALLEL_REPOS):
            batch = now[start : start + CI_RECONCILE_PARALLEL_REPOS]
            answers = await asyncio.gather(
                *(
                    self._activity(
                        CIReconcileDefinition.reconcile_repo, ReconcileRepoInput(repo_id=r), inp.queue_prefix
                    )
                    for r in batch
                ),
                return_exceptions=True,
            )
            for repo_id, answer in zip(batch, answers, strict=True):
                if isinstance(answer, ReconcileRepoResult):
                    result.pushes.extend(answer.pushes)
                elif isinstance(answer, ActivityError):
                    # One unreachable repository must not hold up the others; the next run retries.
                    result.errors[repo_id] = str(answer.cause or answer)
                elif isinstance(answer, BaseException):
                    raise answer
        if later:
            workflow.continue_as_new(ReconcileInput(queue_prefix=inp.queue_prefix, repo_ids=later))
        return result

    async def _activity(self, activity: MethodSyncSingleParam[Any, A, R], arg: A, prefix: str) -> R:
        return await workflow.execute_activity_method(
            activity,
            arg,
            task_queue=ci_control_queue(prefix),
            start_to_close_timeout=timedelta(seconds=CI_RECONCILE_REPO_TIMEOUT_SECONDS),
            heartbeat_timeout=timedelta(seconds=CI_RECONCILE_HEARTBEAT_SECONDS),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2), maximum_attempts=CI_RECONCILE_MAX_ATTEMPTS),
        )
