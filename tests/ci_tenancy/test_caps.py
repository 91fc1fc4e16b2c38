"""Per-tenant concurrency caps with real workers: a tenant capped at one job runs its jobs one at
a time (an uncapped tenant on the same worker runs them together), and the slot comes back on
every way a job ends: success, failure, cancellation while running or while waiting."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
from temporalio.testing import WorkflowEnvironment

from clients.ci.start import run_state
from leasehold.database import init_database
from leasehold.records.ci.plans import set_plan
from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import get_run, job, push_workflow, wait_for, wait_run
from workflows.ci.ids import run_workflow_id
from workflows.ci.semaphore import CITenantSemaphoreWorkflow, semaphore_workflow_id
from workflows.ci.types.job import ACTIVITY_RUN_JOB
from workflows.ci.types.semaphore import SemaphoreState

pytestmark = pytest.mark.slow

THREE = """
name: three
on: push
jobs:
  a:
    runs-on: linux
    steps: [{run: "sleep 1.5"}]
  b:
    runs-on: linux
    steps: [{run: "sleep 1.5"}]
  c:
    runs-on: linux
    steps: [{run: "sleep 1.5; exit 1"}]
"""

LONG = """
name: long
on: push
jobs:
  one:
    runs-on: linux
    steps: [{run: "sleep 60"}]
  two:
    runs-on: linux
    steps: [{run: "sleep 60"}]
"""


def intervals(run: dict) -> list[tuple[str, str]]:
    return sorted((j["started_at"], j["finished_at"]) for j in run["jobs"] if j["started_at"])


def overlaps(spans: list[tuple[str, str]]) -> bool:
    return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans))


async def semaphore(env: WorkflowEnvironment, tenant: str) -> SemaphoreState:
    handle = env.client.get_workflow_handle_for(CITenantSemaphoreWorkflow.run, semaphore_workflow_id(tenant))
    return await handle.query(CITenantSemaphoreWorkflow.state)


async def test_cap_serialises_a_tenant_and_every_ending_releases(
    tenancy: CIStack, temporal_env: WorkflowEnvironment
) -> None:
    db = init_database(tenancy.settings.resolved_database_url)
    capped = tenancy.new_tenant()
    set_plan(db, capped.tenant_id, 2.0, 1)  # type: ignore[attr-defined]
    free = tenancy.new_tenant()

    # The uncapped tenant first, until two of its jobs hold the worker's two slots at once: pushed
    # together, the capped tenant's one running job could keep one slot through the whole run.
    control = push_workflow(tenancy, THREE, client=free)
    await asyncio.to_thread(
        wait_for,
        "two of the uncapped tenant's jobs running at once",
        lambda: sum(j["status"] == "in_progress" for j in get_run(free, control.run_id)["jobs"]) >= 2,
    )
    first = push_workflow(tenancy, THREE, client=capped)
    capped_run = await asyncio.to_thread(wait_run, capped, first.run_id)
    free_run = await asyncio.to_thread(wait_run, free, control.run_id)
    # A failing job (c) ends the run as a failure; the slots still went round.
    assert capped_run["status"] == free_run["status"] == "failure"
    assert {j["status"] for j in capped_run["jobs"]} == {"success", "failure"}
    assert not overlaps(intervals(capped_run)), intervals(capped_run)
    assert overlaps(intervals(free_run)), "an uncapped tenant's jobs run together on the 2-slot worker"
    # Each job dispatched with the tenant as fairness key and its plan's weight.
    history = await temporal_env.client.get_workflow_handle(run_workflow_id(first.run_id)).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.priority
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        # The job activities (the run also schedules its read-model writes).
        and e.activity_task_scheduled_event_attributes.activity_type.name == ACTIVITY_RUN_JOB
    ]
    assert len(scheduled) == 3
    assert {(p.fairness_key, p.fairness_weight) for p in scheduled} == {(capped.tenant_id, 2.0)}  # type: ignore[attr-defined]

    # Cancel while one job runs and the other waits for the slot: both slots come back.
    second = push_workflow(tenancy, LONG, client=capped)
    running = await asyncio.to_thread(
        wait_for,
        "one of the jobs to run",
        lambda: [j["id"] for j in get_run(capped, second.run_id)["jobs"] if j["status"] == "in_progress"],
    )
    assert len(running) == 1
    held = await semaphore(temporal_env, capped.tenant_id)  # type: ignore[attr-defined]
    # The run holds the tenant's one slot: the other job waits in the run's own queue for it
    # and asks the semaphore for nothing.
    assert len(held.holders) == 1 and held.pending == [] and held.limit == 1, held
    (queued,) = [j for j in get_run(capped, second.run_id)["jobs"] if j["status"] == "queued"]
    assert queued["queue"]["reason"] == "tenant_cap", queued
    assert capped.post(f"/v1/runs/{second.run_id}/cancel").status_code == 202
    cancelled = await asyncio.to_thread(wait_run, capped, second.run_id)
    assert cancelled["status"] == "cancelled"
    (waiting,) = {"one", "two"} - set(running)
    assert job(cancelled, waiting)["status"] == "cancelled" and job(cancelled, waiting)["attempt"] == 0
    assert job(cancelled, running[0])["status"] == "cancelled" and job(cancelled, running[0])["attempt"] == 1

    deadline = time.monotonic() + 30
    state = await semaphore(temporal_env, capped.tenant_id)  # type: ignore[attr-defined]
    while (state.holders or state.pending) and time.monotonic() < deadline:
        await asyncio.sleep(0.3)
        state = await semaphore(temporal_env, capped.tenant_id)  # type: ignore[attr-defined]
    assert state.holders == [] and state.pending == []
    # A slot each for a, b, c and the job that ran: granted, handed on within its run by a job
    # that ended to one waiting for a grant (a transfer), or to the job that one made ready (no
    # signal: the job names the key it inherited); the waiting one never got one.
    inherited = [
        j.slot_key
        for r in (first.run_id, second.run_id)
        for j in (await run_state(temporal_env.client, r)).jobs
        if j.slot_key is not None
    ]
    assert state.granted_total + state.transferred_total + len(inherited) == 4, (state, inherited)
