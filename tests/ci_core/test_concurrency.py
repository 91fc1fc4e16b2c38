"""``concurrency:`` groups end to end: real commits, real workers and sandbox, the dev server.

* Workflow level with ``cancel-in-progress``: a second push cancels the first run while its
  job runs; the second run starts once the first has let go.
* Job level without it: while the first run's job holds the group, a second push's job waits;
  a third push replaces it (the second is cancelled, the group's pending member is the third),
  and the third runs after the first.
* Another tenant naming the same group is never held back by, nor holds back, tenant A's.
* The group outlives its orchestration worker: killed (SIGKILL) while a job holds the group and
  another waits, a new worker carries on and the waiting job runs after the holder.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from clients.ci import start as ci_start
from leasehold.storage import open_store
from testing.harness import register_repo_row, start_worker
from tests.ci_core.conftest import CIStack, Repo, ci_settings, git
from workflows.ci.concurrency import CIConcurrencyGroupWorkflow, group_workflow_id
from workflows.ci.ids import run_workflow_id
from workflows.ci.types.concurrency import GroupState
from workflows.ci.types.run import CIRunState, JobStatus, RunStatus

CANCEL_IN_PROGRESS = """
on: push
concurrency:
  group: cip-${{{{ github.ref }}}}
  cancel-in-progress: ${{{{ github.ref == 'refs/heads/main' }}}}
jobs:
  d:
    runs-on: linux
    steps:
      - run: echo "deploy {tag}"; sleep {sleep}
"""

QUEUED = """
on: push
jobs:
  d:
    runs-on: linux
    concurrency: deploy-prod
    steps:
      - run: echo "deploy {tag}"; sleep {sleep}
"""


async def group_state(stack: CIStack, tenant: str, group: str) -> GroupState:
    handle = stack.client.get_workflow_handle_for(CIConcurrencyGroupWorkflow.run, group_workflow_id(tenant, group))
    return await handle.query(CIConcurrencyGroupWorkflow.state)


async def eventually(check: Callable[[], object], within: float = 60) -> None:
    """Poll an async check until it returns truthy."""
    deadline = time.monotonic() + within
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = await check()  # type: ignore[misc]
        except Exception as exc:  # the group workflow may not exist yet
            last = exc
        if last:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"not reached in {within}s: {last!r}")


async def push_run(stack: CIStack, repo: Repo, text: str, tenant: str = "tenant-a") -> str:
    sha = repo.commit({".github/workflows/deploy.yml": text})
    inp = stack.push_input(repo, sha).model_copy(update={"tenant_id": tenant})
    pid = await ci_start.start_push(stack.client, inp)
    runs: list[str] = []

    async def listed() -> bool:
        state = await ci_start.push_state(stack.client, pid)
        runs[:] = [r.run_id for r in state.runs]
        return bool(runs)

    await eventually(listed)
    return runs[0]


async def job_status(stack: CIStack, run: str, status: JobStatus) -> CIRunState | None:
    state = await ci_start.run_state(stack.client, run)
    job = state.job("d")
    return state if job is not None and job.status == status else None


def job_log(stack: CIStack, state: CIRunState) -> str:
    job = state.job("d")
    assert job is not None
    attempt = job.current_attempt()
    assert attempt is not None
    return stack.log_text(attempt.log_prefix)


async def test_cancel_in_progress_cancels_the_running_run(ci_stack: CIStack) -> None:
    repo = ci_stack.repo("cip")
    first = await push_run(ci_stack, repo, CANCEL_IN_PROGRESS.format(tag="one", sleep=60))
    await eventually(lambda: job_status(ci_stack, first, JobStatus.IN_PROGRESS))
    second = await push_run(ci_stack, repo, CANCEL_IN_PROGRESS.format(tag="two", sleep=0))

    one = await ci_stack.wait_run(first, within=60)
    assert one.status == RunStatus.CANCELLED, one
    assert one.error == "cancelled by a newer run in concurrency group 'cip-refs/heads/main' (cancel-in-progress)"
    assert one.concurrency_group == "cip-refs/heads/main"
    job = one.job("d")
    assert job is not None and job.status == JobStatus.CANCELLED
    two = await ci_stack.wait_run(second, within=60)
    assert two.status == RunStatus.SUCCESS, two
    assert "deploy two" in job_log(ci_stack, two)
    # The second run started its job only after the first one's ended.
    two_job = two.job("d")
    assert two_job is not None and two_job.started_at is not None and job.finished_at is not None
    assert two_job.started_at >= job.finished_at


async def test_a_newer_pending_job_replaces_the_older_and_tenants_do_not_share(ci_stack: CIStack) -> None:
    repo = ci_stack.repo("queued")
    first = await push_run(ci_stack, repo, QUEUED.format(tag="one", sleep=25))
    await eventually(lambda: job_status(ci_stack, first, JobStatus.IN_PROGRESS))
    second = await push_run(ci_stack, repo, QUEUED.format(tag="two", sleep=0))

    async def pending_is(run: str) -> bool:
        state = await group_state(ci_stack, "tenant-a", "deploy-prod")
        return state.pending is not None and state.pending.holder == run_workflow_id(run)

    await eventually(lambda: pending_is(second))
    waiting = await ci_start.run_state(ci_stack.client, second)
    assert waiting.job("d") is not None and waiting.job("d").status == JobStatus.QUEUED  # type: ignore[union-attr]

    # Tenant B names the same group: it runs at once, beside tenant A's holder.
    other_path = ci_stack.tmp / "repos" / "other-tenant"
    other_path.mkdir(parents=True)
    git(other_path, "init", "-q", "-b", "main")
    register_repo_row(ci_stack.settings, "tenant-b", "repo-other-tenant", "beta/other", str(other_path))
    other = await push_run(
        ci_stack, Repo(other_path, "repo-other-tenant"), QUEUED.format(tag="b", sleep=0), tenant="tenant-b"
    )
    b = await ci_stack.wait_run(other, within=60)
    assert b.status == RunStatus.SUCCESS and "deploy b" in job_log(ci_stack, b)

    third = await push_run(ci_stack, repo, QUEUED.format(tag="three", sleep=0))
    await eventually(lambda: pending_is(third))
    two = await ci_stack.wait_run(second, within=60)
    two_job = two.job("d")
    assert two_job is not None and two_job.status == JobStatus.CANCELLED
    assert two_job.error == "cancelled: a newer run is waiting in concurrency group 'deploy-prod'"
    assert not two_job.attempts, "a replaced pending job never starts"
    # All of that while the first still held the group.
    one_now = await ci_start.run_state(ci_stack.client, first)
    assert one_now.job("d") is not None and one_now.job("d").status == JobStatus.IN_PROGRESS  # type: ignore[union-attr]
    # Tenant B's group is its own, and was free: B never waited behind A.
    b_group = await group_state(ci_stack, "tenant-b", "deploy-prod")
    assert b_group.tenant_id == "tenant-b" and b_group.granted_total == 1 and b_group.pending is None
    a_group = await group_state(ci_stack, "tenant-a", "deploy-prod")
    assert a_group.running is not None and a_group.running.holder == run_workflow_id(first)

    one = await ci_stack.wait_run(first, within=60)
    assert one.status == RunStatus.SUCCESS
    three = await ci_stack.wait_run(third, within=60)
    assert three.status == RunStatus.SUCCESS and "deploy three" in job_log(ci_stack, three)
    three_job, one_job = three.job("d"), one.job("d")
    assert three_job is not None and one_job is not None
    assert three_job.started_at is not None and one_job.finished_at is not None
    assert three_job.started_at >= one_job.finished_at
    assert three_job.concurrency_group == "deploy-prod"


async def test_a_group_survives_an_orchestration_worker_restart(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    settings = ci_settings(tmp_path, temporal_env.client.service_client.config.target_host)
    logs = tmp_path / "logs"
    orchestration = start_worker(settings, "orchestration", logs).wait_healthy(60)
    ci = start_worker(settings, "ci", logs, "--labels", "linux").wait_healthy(60)
    try:
        stack = CIStack(settings, temporal_env.client, open_store(settings), logs, tmp_path)
        repo = stack.repo("restart")
        first = await push_run(stack, repo, QUEUED.format(tag="one", sleep=8))
        await eventually(lambda: job_status(stack, first, JobStatus.IN_PROGRESS))
        second = await push_run(stack, repo, QUEUED.format(tag="two", sleep=0))

        async def second_pending() -> bool:
            state = await group_state(stack, "tenant-a", "deploy-prod")
            return state.pending is not None and state.pending.holder == run_workflow_id(second)

        await eventually(second_pending)
        orchestration.kill9()
        orchestration = start_worker(settings, "orchestration", logs).wait_healthy(60)

        one = await stack.wait_run(first, within=90)
        two = await stack.wait_run(second, within=90)
        assert one.status == RunStatus.SUCCESS and two.status == RunStatus.SUCCESS, (one, two)
        one_job, two_job = one.job("d"), two.job("d")
        assert one_job is not None and two_job is not None
        assert one_job.finished_at is not None and two_job.started_at is not None
        assert two_job.started_at >= one_job.finished_at
        assert "deploy two" in job_log(stack, two)
    finally:
        orchestration.stop()
        ci.stop()
