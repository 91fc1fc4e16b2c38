"""Record CI workflow histories for the replay test: ``python -m tests.ci_core.record_histories [DIR]``.

Real runs on a real dev server, with the real orchestration worker (versioned, as deployed) and
CI worker (bubblewrap) as processes: every history holds what those workers really wrote. They
go to ``histories/<BUILD_ID>/`` (``workflows/version.py``): the record of what this build's
workflows issue, which the replay test holds the code to until the build id changes
(``docs/versioning.md``). Existing files are never overwritten; a new scenario adds a file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client, WorkflowHandle

from clients.ci import start as ci_start
from leasehold.database import init_database
from leasehold.records.ci.environments import set_environment
from testing.temporal import start_local_environment
from tests.ci_core import test_concurrency, test_control, test_matrix_runs
from tests.ci_core.conftest import CIStack, Repo, engine_stack
from tests.ci_tenancy import test_approvals
from workflows.ci.concurrency import CIConcurrencyGroupWorkflow, group_workflow_id
from workflows.ci.ids import push_workflow_id, run_workflow_id
from workflows.ci.reconcile import CIReconcileWorkflow
from workflows.ci.semaphore import CITenantSemaphoreWorkflow, semaphore_workflow_id
from workflows.ci.types.push import CIPushState
from workflows.ci.types.reconcile import ReconcileInput
from workflows.ci.types.run import ApprovalRequest, CIRunState, JobStatus, RunStatus
from workflows.queues import orchestration_queue
from workflows.version import BUILD_ID

HISTORIES = Path(__file__).parent / "histories"
WORKFLOW_PATH = ".github/workflows/ci.yml"
# A finished run stays open this long for retries; short, so each recorded run closes soon.
RETRY_WINDOW_SECONDS = 2.0
TENANT = "tenant-a"  # the tenant of every CIStack repository

log = logging.getLogger(__name__)

# A DAG: build -> (test, lint); lint fails, so deploy is skipped and report (always()) runs.
DAG_FAILURE = """
name: dag
on: push
jobs:
  build:
    runs-on: linux
    outputs:
      artifact: ${{ steps.make.outputs.artifact }}
    steps:
      - id: make
        run: echo "artifact=build-${{ github.sha }}" >> "$GITHUB_OUTPUT"
  test:
    needs: build
    runs-on: linux
    steps:
      - run: echo "testing ${{ needs.build.outputs.artifact }}"
  lint:
    needs: build
    runs-on: linux
    steps:
      - run: echo lint failed; exit 3
  deploy:
    needs: [test, lint]
    runs-on: linux
    steps:
      - run: echo never
  report:
    needs: [test, lint]
    if: always()
    runs-on: linux
    steps:
      - run: echo "lint was ${{ needs.lint.result }}"
"""

SIMPLE = """
on: push
jobs:
  one:
    runs-on: linux
    steps: [{run: echo one}]
"""

NAMED_CI = """
name: CI
on: push
jobs:
  one:
    runs-on: linux
    steps: [{run: echo ci}]
"""

AFTER_CI = """
on:
  workflow_run:
    workflows: [CI]
    types: [completed]
jobs:
  after:
    runs-on: linux
    steps: [{run: echo after}]
"""

NIGHTLY = """
on:
  schedule:
    - cron: '0 3 * * *'
jobs:
  nightly:
    runs-on: linux
    steps: [{run: echo nightly}]
"""

NOT_TRIGGERED = """
on:
  push:
    branches: [other]
jobs:
  never:
    runs-on: linux
    steps: [{run: echo never}]
"""

# Still gets a run, which fails at once with the file's error.
INVALID = """
on: push
jobs:
  node:
    runs-on: linux
    steps:
      - uses: actions/setup-node@v4
"""


CANCEL = """
on: push
jobs:
  long:
    runs-on: linux
    steps:
      - run: echo started; sleep 600
  next:
    needs: long
    runs-on: linux
    steps: [{run: echo never}]
  cleanup:
    needs: long
    if: always()
    runs-on: linux
    steps:
      - run: echo "cleanup after ${{ needs.long.result }}"
"""


# Two independent jobs under a cap of one: the second waits for the first one's slot.
CAPPED = """
on: push
jobs:
  left:
    runs-on: linux
    steps: [{run: echo left; sleep 1}]
  right:
    runs-on: linux
    steps: [{run: echo right; sleep 1}]
"""


async def until(what: str, check: Callable[[], object], within: float = 90) -> None:
    """Poll ``check`` (sync or async) until it returns something true."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        answer = check()
        if asyncio.iscoroutine(answer):
            answer = await answer
        if answer:
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{what}: not in {within}s")


async def push(
    stack: CIStack,
    repo: Repo,
    sha: str,
    retry_window: float = RETRY_WINDOW_SECONDS,
    max_concurrent_jobs: int | None = None,
    default_branch: str | None = None,
) -> tuple[WorkflowHandle[object, CIPushState], CIPushState]:
    """Start a push and wait for its workflow to close (its runs are started by then)."""
    inp = stack.push_input(repo, sha)
    # Assigned, not model_copy(update=...): a field that moves again raises here, not ignored.
    inp.push.retry_window_seconds = retry_window
    inp.push.max_concurrent_jobs = max_concurrent_jobs
    inp.push.default_branch = default_branch
    pid = await ci_start.start_push(stack.client, inp)
    handle = stack.client.get_workflow_handle(push_workflow_id(pid), result_type=CIPushState)
    return handle, await handle.result()


def run_handle(client: Client, run_id: str) -> WorkflowHandle[object, CIRunState]:
    return client.get_workflow_handle(run_workflow_id(run_id), result_type=CIRunState)


async def one_run(stack: CIStack, name: str, text: str, **kw: object) -> str:
    repo = stack.repo(name)
    _, state = await push(stack, repo, repo.commit({WORKFLOW_PATH: text}), **kw)  # type: ignore[arg-type]
    (ref,) = state.runs
    return ref.run_id


async def job_is(stack: CIStack, run_id: str, job_id: str, status: JobStatus) -> bool:
    job = (await ci_start.run_state(stack.client, run_id)).job(job_id)
    return job is not None and job.status == status


async def record(stack: CIStack) -> dict[str, WorkflowHandle]:  # type: ignore[type-arg]
    """Drive every scenario to its end; returns the handles to save, by file name."""
    client = stack.client
    out: dict[str, WorkflowHandle] = {}  # type: ignore[type-arg]

    # A push of one file: a DAG with a failing job, a skipped dependent and an always() job.
    repo = stack.repo("dag")
    pushed, state = await push(stack, repo, repo.commit({WORKFLOW_PATH: DAG_FAILURE}))
    out["push-one_file"] = pushed
    dag = run_handle(client, state.runs[0].run_id)
    assert (await dag.result()).status == RunStatus.FAILURE
    out["run-dag_failure"] = dag

    # A push of several files: two triggered, one filtered out by branch, one invalid.
    repo = stack.repo("several")
    files = {
        ".github/workflows/a.yml": SIMPLE,
        ".github/workflows/b.yaml": SIMPLE,
        ".github/workflows/other-branch.yml": NOT_TRIGGERED,
        ".github/workflows/invalid.yml": INVALID,
    }
    pushed, state = await push(stack, repo, repo.commit(files))
    assert len(state.runs) == 3 and state.not_triggered, state
    out["push-several_files"] = pushed
    for ref in state.runs:
        finished = await run_handle(client, ref.run_id).result()
        if ref.workflow_path.endswith("invalid.yml"):
            assert finished.status == RunStatus.FAILURE and finished.error, finished
            out["run-invalid_file"] = run_handle(client, ref.run_id)

    # A push to the default branch: its files' schedules synced; a run another file follows
    # (on.workflow_run) starts that file's push when its round starts and ends.
    repo = stack.repo("default-branch")
    files = {
        ".github/workflows/ci.yml": NAMED_CI,
        ".github/workflows/after.yml": AFTER_CI,
        ".github/workflows/nightly.yml": NIGHTLY,
    }
    pushed, state = await push(stack, repo, repo.commit(files), default_branch="main")
    out["push-default_branch"] = pushed
    (ci_ref,) = [r for r in state.runs if r.workflow_path.endswith("ci.yml")]
    followed = run_handle(client, ci_ref.run_id)
    assert (await followed.result()).status == RunStatus.SUCCESS
    out["run-workflow_run_followed"] = followed

    # A failed job retried (Update retry_job): a second round, its dependent runs after it.
    rid = await one_run(stack, "retry", test_control.RETRY, retry_window=30.0)
    await until("retry: first round failed", lambda: job_is(stack, rid, "deploy", JobStatus.SKIPPED))
    await ci_start.retry_job(client, rid, "flaky", requested_by="recorder")
    await until("retry: second round done", lambda: job_is(stack, rid, "deploy", JobStatus.SUCCESS))
    # Closing now, not after the window: a cancel of a finished run only ends its window.
    await ci_start.cancel_run(client, rid)
    assert (await run_handle(client, rid).result()).status == RunStatus.SUCCESS
    out["run-retried"] = run_handle(client, rid)

    # Cancelled while a job sleeps: the job is cancelled, its dependent too, always() still runs.
    rid = await one_run(stack, "cancel", CANCEL)
    await until("cancel: long job running", lambda: job_is(stack, rid, "long", JobStatus.IN_PROGRESS))
    await asyncio.sleep(1.5)
    await ci_start.cancel_run(client, rid)
    cancelled = await run_handle(client, rid).result()
    assert cancelled.status == RunStatus.CANCELLED, cancelled
    out["run-cancelled"] = run_handle(client, rid)

    # A protected environment: the deploy job waits for an approver, then runs.
    repo = stack.repo("approval")
    db = init_database(stack.settings.resolved_database_url)
    set_environment(db, TENANT, repo.repo_id, "Production", True, ["approver"])
    _, state = await push(stack, repo, repo.commit({WORKFLOW_PATH: test_approvals.DEPLOY}))
    rid = state.runs[0].run_id
    await until("approval: deploy waiting", lambda: job_is(stack, rid, "deploy", JobStatus.AWAITING_APPROVAL))
    await ci_start.decide_job(
        client, rid, ApprovalRequest(job_id="deploy", approved=True, user_id="approver", comment="ship it")
    )
    approved = await run_handle(client, rid).result()
    assert approved.status == RunStatus.SUCCESS, approved
    out["run-approved"] = run_handle(client, rid)

    # Two concurrent jobs under a tenant cap of one: acquire, wait, grant, release through the
    # tenant's semaphore (which keeps running: its history is saved as it is once idle).
    rid = await one_run(stack, "capped", CAPPED, max_concurrent_jobs=1)
    capped = await run_handle(client, rid).result()
    assert capped.status == RunStatus.SUCCESS, capped
    out["run-capped"] = run_handle(client, rid)
    semaphore = client.get_workflow_handle_for(CITenantSemaphoreWorkflow.run, semaphore_workflow_id(TENANT))

    async def idle() -> bool:
        sem = await semaphore.query(CITenantSemaphoreWorkflow.state)
        # One grant: the second job waited in the run's own queue and took the first one's slot.
        return not sem.holders and not sem.pending and sem.granted_total == 1

    await until("semaphore: every slot released", idle)
    out["semaphore-two_jobs"] = semaphore

    # One reconciler pass over a repository whose webhook never came: it pushes the commit.
    repo = stack.repo("reconciled")
    sha = repo.commit({WORKFLOW_PATH: SIMPLE})
    prefix = stack.settings.queue_prefix
    reconcile = await client.start_workflow(
        CIReconcileWorkflow.run,
        ReconcileInput(queue_prefix=prefix, repo_ids=[repo.repo_id]),
        id=f"{prefix}record-reconcile",
        task_queue=orchestration_queue(prefix),
        execution_timeout=timedelta(seconds=120),
    )
    result = await reconcile.result()
    assert [p.commit_sha for p in result.pushes] == [sha] and not result.errors, result
    out["reconcile-one_repo"] = reconcile

    # A matrix job (include/exclude, max-parallel 1) and a dependent seeing the aggregate.
    rid = await one_run(stack, "matrix", test_matrix_runs.MATRIX)
    assert (await run_handle(client, rid).result()).status == RunStatus.SUCCESS
    out["run-matrix"] = run_handle(client, rid)

    # A matrix from fromJSON: one combination fails, fail-fast cancels the others; the matrix
    # job is retried (its failed and cancelled combinations run again).
    rid = await one_run(stack, "failfast", test_matrix_runs.FAILFAST, retry_window=30.0)
    await until("failfast: report ran", lambda: job_is(stack, rid, "report", JobStatus.SUCCESS))
    await ci_start.retry_job(client, rid, "t", requested_by="recorder")
    await until("failfast: retried", lambda: job_is(stack, rid, "t", JobStatus.SUCCESS))
    await until("failfast: report again", lambda: job_is(stack, rid, "report", JobStatus.SUCCESS))
    await ci_start.cancel_run(client, rid)
    assert (await run_handle(client, rid).result()).status == RunStatus.SUCCESS
    out["run-matrix_failfast_retried"] = run_handle(client, rid)

    # A workflow-level concurrency group with cancel-in-progress: the second push's run cancels
    # the first while its job runs, then runs once the first let go (the group keeps running).
    repo = stack.repo("concurrency")
    text = test_concurrency.CANCEL_IN_PROGRESS
    _, state = await push(stack, repo, repo.commit({WORKFLOW_PATH: text.format(tag="one", sleep=60)}))
    first = state.runs[0].run_id
    await until("concurrency: first running", lambda: job_is(stack, first, "d", JobStatus.IN_PROGRESS))
    _, state = await push(stack, repo, repo.commit({WORKFLOW_PATH: text.format(tag="two", sleep=0)}))
    second = state.runs[0].run_id
    assert (await run_handle(client, first).result()).status == RunStatus.CANCELLED
    assert (await run_handle(client, second).result()).status == RunStatus.SUCCESS
    out["run-concurrency_preempted"] = run_handle(client, first)
    out["run-concurrency_granted"] = run_handle(client, second)
    group = client.get_workflow_handle_for(
        CIConcurrencyGroupWorkflow.run, group_workflow_id(TENANT, "cip-refs/heads/main")
    )

    async def group_idle() -> bool:
        st = await group.query(CIConcurrencyGroupWorkflow.state)
        return st.running is None and st.pending is None and st.granted_total == 2

    await until("concurrency group: both released", group_idle)
    out["concurrency-group"] = group
    return out


async def main(out: Path) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the workers' health polls
    env = await start_local_environment()
    # A long reconcile interval: the worker's own schedule stays out of the recorded pass.
    extra = {"ci_retry_window_seconds": RETRY_WINDOW_SECONDS, "ci_reconcile_interval_seconds": 86400.0}
    try:
        with tempfile.TemporaryDirectory() as tmp, engine_stack(env, Path(tmp), **extra) as stack:
            handles = await record(stack)
            for name, handle in handles.items():
                path = out / f"{name}.json"
                if path.exists():
                    log.info("kept %s (exists)", path.name)
                    continue
                path.write_text((await handle.fetch_history()).to_json())
                log.info("wrote %s", path.name)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    # Another directory (first argument) for a trial run that leaves the recorded files alone.
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HISTORIES / BUILD_ID
    target.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(target))
    logging.shutdown()
    # Skip interpreter teardown: the Temporal core's threads can abort it ("PyGILState_Release",
    # temporalio/sdk-python#300) after every file is written, which would read as a failed run.
    os._exit(0)
