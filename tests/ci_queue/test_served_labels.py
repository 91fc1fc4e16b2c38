"""Runner labels matched as a superset, and slots only for jobs a live worker serves, through
the real API, dev server and CI worker processes.

* A 2-job run with ``runs-on: [a, b]``: a worker serving only ``a`` never takes it (its jobs
  wait, holding no slot, and say no worker serves their labels); a worker serving ``a, b, c``
  starts and runs both (it polls the queue of every subset of its labels).
* A tenant capped at 2 whose run waits for a label nobody serves (two jobs, as many as the cap)
  still runs that run's served job, and another run's jobs at its full cap; the unserved jobs
  explain that no worker serves them and that they hold no slot, and they run once a worker
  with that label starts.
* A job whose labels stay unserved past the semaphore's expiry (a day; seconds here) fails.
* A worker with more labels than the maximum refuses to start, saying so.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys

import httpx
import pytest

from leasehold.database import init_database
from leasehold.records.ci.plans import set_plan
from leasehold.temporal import connect
from testing.harness import ManagedProcess, process_env, start_worker
from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import get_run, job, push_workflow, wait_for, wait_run
from workflows.ci.semaphore import CITenantSemaphoreWorkflow, semaphore_workflow_id
from workflows.ci.types.semaphore import SemaphoreState
from workflows.queues import MAX_CI_WORKER_LABELS, ci_probe_queue, orchestration_queue

pytestmark = pytest.mark.slow


def _worker(stack: CIStack, labels: list[str], slots: int) -> ManagedProcess:
    """A CI worker of ``labels`` beside the stack's own (stopped with the stack)."""
    settings = stack.settings.model_copy(update={"ci_max_concurrent_jobs": slots})
    name = "worker-ci-" + "-".join(labels)[:40]
    proc = start_worker(settings, "ci", stack.logs, "--labels", ",".join(labels), name=name)
    stack.workers.append(proc)
    proc.wait_healthy(60)
    return proc


def _stop(stack: CIStack, proc: ManagedProcess) -> None:
    proc.stop()
    stack.workers.remove(proc)


def _queue(run: dict, job_id: str) -> dict:
    return job(run, job_id)["queue"] or {}


def _both_wait_for_a_worker(client: httpx.Client, rid: str, jobs: tuple[str, ...], counted: bool = False) -> dict:
    """The run once every one of ``jobs`` waits for a worker (``counted``: in a reading that
    also counts the tenant's slots in use, which a semaphore slow to answer under load leaves
    out of one)."""
    return wait_for(
        "the jobs to wait for a worker",
        lambda: (
            (r := get_run(client, rid))
            and all(
                job(r, j)["status"] == "queued"
                and _queue(r, j).get("reason") == "no_worker"
                and (not counted or _queue(r, j).get("slots_in_use") is not None)
                for j in jobs
            )
            and r
        ),
    )


def test_a_job_runs_on_a_worker_with_all_its_labels(queue_stack: CIStack) -> None:
    a, b, c = (f"{x}-{secrets.token_hex(3)}" for x in "abc")
    tenant = queue_stack.new_tenant()
    only_a = _worker(queue_stack, [a], 2)
    workflow = f"""
name: superset
on: push
jobs:
  one:
    runs-on: [{a}, {b}]
    steps: [{{run: "echo one"}}]
  two:
    runs-on: [{b}, {a}]
    steps: [{{run: "echo two"}}]
"""
    pushed = push_workflow(queue_stack, workflow, client=tenant)
    superset: ManagedProcess | None = None
    try:
        waiting = _both_wait_for_a_worker(tenant, pushed.run_id, ("one", "two"), counted=True)
        for j in ("one", "two"):
            q = _queue(waiting, j)
            assert q["labels_served"] is False and "holds no slot" in q["message"], q
            assert q["slots_in_use"] == 0, "a job no worker serves holds no slot"
        # Seven queues (every subset of three labels): slots enough for all to be polled.
        superset = _worker(queue_stack, [a, b, c], 8)
        done = wait_run(tenant, pushed.run_id, timeout=240)
        assert done["status"] == "success", done
        for j in ("one", "two"):
            (attempt,) = job(done, j)["attempts"]
            assert attempt["worker"].endswith(f"-{superset.pid}"), attempt
    finally:
        if get_run(tenant, pushed.run_id)["status"] not in ("success", "failure", "cancelled"):
            tenant.post(f"/v1/runs/{pushed.run_id}/cancel")
        _stop(queue_stack, only_a)
        if superset is not None:
            _stop(queue_stack, superset)


def test_jobs_nobody_serves_leave_the_cap_to_the_tenants_other_runs(queue_stack: CIStack) -> None:
    lonely = f"lonely-{secrets.token_hex(3)}"
    tenant = queue_stack.new_tenant()
    set_plan(init_database(queue_stack.settings.resolved_database_url), tenant.tenant_id, 1.0, 2)  # type: ignore[attr-defined]
    stuck = push_workflow(
        queue_stack,
        f"""
name: stuck
on: push
jobs:
  far:
    runs-on: [linux, {lonely}]
    steps: [{{run: "echo far"}}]
  away:
    runs-on: [{lonely}]
    steps: [{{run: "echo away"}}]
  near:
    runs-on: linux
    steps: [{{run: "echo near"}}]
""",
        client=tenant,
    )
    late: ManagedProcess | None = None
    try:
        _both_wait_for_a_worker(tenant, stuck.run_id, ("far", "away"))
        # The run's own served job is not held back by its requests nobody serves (they fill
        # the run's share of the cap until the semaphore says so).
        wait_for(
            "the served job of the stuck run", lambda: job(get_run(tenant, stuck.run_id), "near")["status"] == "success"
        )
        # Served jobs of another run (three of them, two at a time) run at the full cap.
        served = push_workflow(
            queue_stack,
            """
name: served
on: push
jobs:
  x: {runs-on: linux, steps: [{run: "sleep 1"}]}
  y: {runs-on: linux, steps: [{run: "sleep 1"}]}
  z: {runs-on: linux, needs: [x], steps: [{run: "true"}]}
""",
            client=tenant,
        )
        done = wait_run(tenant, served.run_id, timeout=180)
        assert done["status"] == "success", done
        starts = sorted(job(done, j)["started_at"] for j in ("x", "y"))
        ends = sorted(job(done, j)["finished_at"] for j in ("x", "y"))
        assert starts[1] < ends[0], "both slots of the cap ran at once"

        still = get_run(tenant, stuck.run_id)
        for j in ("far", "away"):
            q = _queue(still, j)
            assert job(still, j)["status"] == "queued" and q["reason"] == "no_worker", q
            assert "no worker serves runs-on [" in q["message"] and "holds no slot" in q["message"], q
            assert q["position"] is None
        # A worker with the label appears: the waiting jobs get slots and run.
        late = _worker(queue_stack, ["linux", lonely], 4)
        finished = wait_run(tenant, stuck.run_id, timeout=240)
        assert finished["status"] == "success", finished
    finally:
        for rid in (stuck.run_id,):
            if get_run(tenant, rid)["status"] not in ("success", "failure", "cancelled"):
                tenant.post(f"/v1/runs/{rid}/cancel")
        if late is not None:
            _stop(queue_stack, late)


def test_a_job_nobody_serves_fails_once_its_wait_expires(queue_stack: CIStack) -> None:
    """The tenant's semaphore is started first with a 3 s expiry (a day by default): the job's
    request is dropped and the job fails, saying that no worker serves its labels."""
    tenant = queue_stack.new_tenant()
    tenant_id: str = tenant.tenant_id  # type: ignore[attr-defined]
    set_plan(init_database(queue_stack.settings.resolved_database_url), tenant_id, 1.0, 2)
    prefix = queue_stack.settings.queue_prefix

    async def start_semaphore() -> None:
        client = await connect(queue_stack.settings)
        state = SemaphoreState(
            tenant_id=tenant_id, limit=2, unserved_expiry_seconds=3.0, probe_queue=ci_probe_queue(prefix)
        )
        await client.start_workflow(
            CITenantSemaphoreWorkflow.run,
            state,
            id=semaphore_workflow_id(tenant_id),
            task_queue=orchestration_queue(prefix),
        )

    asyncio.run(start_semaphore())
    nowhere = f"nowhere-{secrets.token_hex(3)}"
    pushed = push_workflow(
        queue_stack,
        f"""
name: expires
on: push
jobs:
  lost:
    runs-on: [{nowhere}]
    steps: [{{run: "true"}}]
""",
        client=tenant,
    )
    done = wait_run(tenant, pushed.run_id, timeout=240)
    assert done["status"] == "failure", done
    lost = job(done, "lost")
    assert lost["status"] == "failure" and lost["attempts"] == []
    assert lost["error"] == f"no worker serves runs-on [{nowhere}]: gave up waiting for one"


def test_a_worker_with_more_labels_than_the_maximum_refuses_to_start(queue_stack: CIStack) -> None:
    labels = ",".join(f"l{i}" for i in range(MAX_CI_WORKER_LABELS + 1))
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "worker", "ci", "--labels", labels],
        env=process_env(queue_stack.settings),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "a CI worker serves at most 6 labels" in done.stderr and "got 7" in done.stderr, done.stderr[-2000:]
