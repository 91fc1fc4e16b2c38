"""The tenant cap with batched grants, chain hand-offs and spare slots handed to waiting jobs,
under a CI worker killed with kill -9 mid-burst: never more of the tenant's jobs at once than
its cap (counted from the run histories), every job ends, and every slot comes back.

Real processes on the session's dev server: an orchestration worker and two CI workers (real
bubblewrap) serving the same label; one of them is SIGKILLed while it runs jobs of the burst.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from clients.ci import start as ci_start
from testing.harness import register_repo_row, start_worker
from tests.ci_core.conftest import CIStack, Repo, git
from workflows.ci.ids import run_workflow_id
from workflows.ci.semaphore import CITenantSemaphoreWorkflow, semaphore_workflow_id
from workflows.ci.types.job import ACTIVITY_RUN_JOB, AttemptStatus
from workflows.ci.types.push import PushStatus
from workflows.ci.types.run import CIRunState, RunStatus
from workflows.ci.types.semaphore import SemaphoreState

pytestmark = pytest.mark.slow

CAP = 3
WORKFLOW_PATH = ".github/workflows/ci.yml"
# Eight independent jobs and a three-job chain, all under the tenant's cap.
BURST = (
    "on: push\njobs:\n"
    + "".join(f"  b{i}:\n    runs-on: linux\n    steps: [{{run: 'sleep 1'}}]\n" for i in range(8))
    + "".join(
        f"  c{i}:\n    runs-on: linux\n" + (f"    needs: c{i - 1}\n" if i else "") + "    steps: [{run: 'sleep 0.3'}]\n"
        for i in range(3)
    )
)


def tenant_repo(stack: CIStack, tenant: str, name: str) -> Repo:
    """A repository of ``tenant`` (a tenant of this test only: its semaphore is this test's)."""
    path = stack.tmp / "repos" / name
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    register_repo_row(stack.settings, tenant, f"repo-{name}", f"{tenant}/{name}", str(path))
    return Repo(path=path, repo_id=f"repo-{name}")


async def start_run(stack: CIStack, tenant: str, repo: Repo) -> str:
    sha = repo.commit({WORKFLOW_PATH: BURST})
    inp = stack.push_input(repo, sha)
    inp.push.tenant_id = tenant
    inp.push.max_concurrent_jobs = CAP
    push_id = await ci_start.start_push(stack.client, inp)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = await ci_start.push_state(stack.client, push_id)
        if state.status != PushStatus.LISTING:
            (ref,) = state.runs
            return ref.run_id
        await asyncio.sleep(0.2)
    raise AssertionError("push not listed")


async def job_spans(client: Client, run_id: str) -> list[tuple[float, float]]:
    """(scheduled, closed) of every job activity of the run, from its history. A job activity is
    scheduled only after its slot is granted and closes before the slot is released, so these
    spans lie inside the slot's tenure, lost attempts and retries included."""
    history = await client.get_workflow_handle(run_workflow_id(run_id)).fetch_history()
    scheduled: dict[int, float] = {}
    spans = []
    for e in history.events:
        at = e.event_time.ToDatetime().timestamp()
        if e.HasField("activity_task_scheduled_event_attributes"):
            if e.activity_task_scheduled_event_attributes.activity_type.name == ACTIVITY_RUN_JOB:
                scheduled[e.event_id] = at
            continue
        for kind in ("completed", "failed", "timed_out", "canceled"):
            name = f"activity_task_{kind}_event_attributes"
            if e.HasField(name):  # type: ignore[arg-type]
                sid = getattr(e, name).scheduled_event_id
                if sid in scheduled:
                    spans.append((scheduled.pop(sid), at))
    assert not scheduled, "every job activity of a finished run is closed"
    return spans


def most_at_once(spans: list[tuple[float, float]]) -> int:
    # An end sorts before a start at the same instant: a slot handed over is not counted twice.
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


async def test_cap_holds_when_a_worker_is_killed_mid_burst(dispatch_stack: CIStack) -> None:
    stack = dispatch_stack
    doomed = start_worker(stack.settings, "ci", stack.logs, "--labels", "linux", name="ci-doomed").wait_healthy(60)
    try:
        tenant = f"tenant-{uuid.uuid4().hex[:8]}"
        runs = [await start_run(stack, tenant, tenant_repo(stack, tenant, f"{tenant}-{i}")) for i in range(2)]

        async def doomed_runs_a_job() -> bool:
            mine = f"-{doomed.pid}"
            for run_id in runs:
                state = await ci_start.run_state(stack.client, run_id)
                for job in state.jobs:
                    att = job.current_attempt()
                    if att is not None and att.status == AttemptStatus.RUNNING and att.worker.endswith(mine):
                        return True
            return False

        deadline = time.monotonic() + 60
        while not await doomed_runs_a_job():
            assert time.monotonic() < deadline, "the doomed worker never ran a job"
            await asyncio.sleep(0.1)
        doomed.kill9()
    finally:
        doomed.stop()

    finals: list[CIRunState] = [await stack.wait_run(r, within=150) for r in runs]
    assert [f.status for f in finals] == [RunStatus.SUCCESS, RunStatus.SUCCESS], finals
    lost = [a for f in finals for j in f.jobs for a in j.attempts if a.status == AttemptStatus.LOST]
    assert lost, "the kill hit a running job: it was retried as a new attempt"

    # The dead worker's checkout mounts were detached by the live one (before its next checkout).
    mounts = await asyncio.to_thread(Path("/proc/self/mountinfo").read_text)
    assert f"/.layers/{doomed.pid}/" not in mounts

    spans = [s for r in runs for s in await job_spans(stack.client, r)]
    assert len(spans) == 2 * 11
    # Not more than the cap, and the cap was reached (so this count can see a breach).
    assert most_at_once(spans) == CAP, sorted(spans)

    handle = stack.client.get_workflow_handle_for(CITenantSemaphoreWorkflow.run, semaphore_workflow_id(tenant))
    state: SemaphoreState | None = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = await handle.query(CITenantSemaphoreWorkflow.state)
        if not state.holders and not state.pending:
            break
        await asyncio.sleep(0.3)
    assert state is not None and state.holders == [] and state.pending == [], state
    # Every job round got its slot exactly once (the retried attempts keep their round's): a
    # grant, a transfer from a round of its run that ended (a job that waited for a grant while
    # its run had a slot to spare), or the slot of the round that made it ready, handed over
    # within the run without a signal (a chain's next job, c0 -> c1 -> c2 twice at least; the
    # job names the key it inherited).
    inherited = [j.slot_key for f in finals for j in f.jobs if j.slot_key is not None]
    assert state.granted_total + state.transferred_total + len(inherited) == 2 * 11, (state, inherited)
    assert state.transferred_total + len(inherited) >= 2 * 2, (state, inherited)
    # A run of 11 jobs under a cap of 3 asks for at least its first share of slots.
    assert state.granted_total >= 3, state
