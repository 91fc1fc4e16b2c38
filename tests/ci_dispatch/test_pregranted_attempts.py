"""Attempts granted with the job activity (``PATCH_PREGRANTED_ATTEMPTS``) and a chain's slot handed
over without a signal (``PATCH_SILENT_HANDOFF``), on the real dev server with the real
``CIRunWorkflow`` and tenant semaphore. The job activity is a stand-in (its name, its input and
result types) so that each way an attempt can go is forced exactly:

* ``quick`` ends before it would report its start: its result alone records attempt 1;
* ``slow`` reports its start (signal ``attempt_running``) and sees itself in progress before it ends;
* ``flaky``'s first activity attempt fails at once, before reporting its start; the retried
  activity attempt asks with the Update and gets attempt 2; attempt 1 shows as lost;
* ``secret`` declares a secret: no pre-grant, it asks with the Update and gets a token;
* ``after`` needs ``quick``: under a cap of one it runs on ``quick``'s slot, which the semaphore
  never hears about (the job names the key); the others wait in the run's own queue for that
  slot (``PATCH_RUN_SLOT_QUEUE``) and take it in turn, again without a signal;
* ``fails`` fails in round 0 and is retried: round 1's attempt is numbered 2.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.ci.probe import CIProbeActivities
from testing.ci_runs import ask_attempt, run_input
from workflows.ci.ids import run_workflow_id
from workflows.ci.run import CIRunWorkflow
from workflows.ci.semaphore import CITenantSemaphoreWorkflow, semaphore_workflow_id
from workflows.ci.types.job import (
    ACTIVITY_RUN_JOB,
    SIGNAL_ATTEMPT_RUNNING,
    UPDATE_ATTEMPT_STARTED,
    AttemptGrant,
    AttemptRunning,
    AttemptStatus,
    JobActivityInput,
    JobResult,
)
from workflows.ci.types.projection import ACTIVITY_PROJECT_RUN, CIRunSnapshot
from workflows.ci.types.run import CIRunState, JobStatus, RetryJobRequest, RunStatus
from workflows.ci.types.spec import JobSpec, StepSpec
from workflows.queues import ci_probe_queue, ci_queue, orchestration_queue

LABEL = "pregrant"


def job(job_id: str, needs: list[str] | None = None, secrets: list[str] | None = None) -> JobSpec:
    return JobSpec(
        id=job_id,
        name=job_id,
        runs_on=[LABEL],
        needs=needs or [],
        secrets=secrets or [],
        steps=[StepSpec(index=0, name="s", run="true")],
    )


class StandIn:
    """The job activity's stand-in: what each job does, and what the slow one saw of itself."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.slow_saw: CIRunState | None = None

    async def ask(self, inp: JobActivityInput) -> AttemptGrant:
        return await ask_attempt(self.client, inp, "w-asked")

    @activity.defn(name=ACTIVITY_RUN_JOB)
    async def run_job(self, inp: JobActivityInput) -> JobResult:
        started = datetime.now(UTC)
        name = inp.job.id
        status = AttemptStatus.SUCCESS
        if name == "flaky" and activity.info().attempt == 1:
            assert inp.grant is not None
            raise ApplicationError("infrastructure hiccup before the start was reported")
        if name == "secret" or activity.info().attempt > 1:
            assert name != "secret" or inp.grant is None, "a job with secrets gets its token from the Update"
            grant = await self.ask(inp)
        else:
            assert inp.grant is not None and inp.grant.proceed, f"{name} was not pre-granted"
            grant = inp.grant
        if name == "slow":
            handle = self.client.get_workflow_handle(inp.run_workflow_id)
            await handle.signal(
                SIGNAL_ATTEMPT_RUNNING,
                AttemptRunning(
                    job_id=name, round=inp.round, attempt=grant.attempt, worker="w-slow", started_at=started
                ),
            )
            for _ in range(200):
                state = await handle.query(CIRunWorkflow.state)
                found = state.job(name)
                if found is not None and found.status == JobStatus.IN_PROGRESS:
                    self.slow_saw = state
                    break
                await asyncio.sleep(0.05)
        if name == "fails" and inp.round == 0:
            status = AttemptStatus.FAILURE
        return JobResult(
            job_id=name,
            attempt=grant.attempt,
            round=inp.round,
            status=status,
            exit_code=0 if status == AttemptStatus.SUCCESS else 1,
            started_at=started,
            finished_at=datetime.now(UTC),
            worker=f"w-{name}",
        )


@activity.defn(name=ACTIVITY_PROJECT_RUN)
async def project_ci_run(inp: CIRunSnapshot) -> bool:
    return True


async def test_pregranted_attempts_and_a_silent_handoff(temporal_env: WorkflowEnvironment) -> None:
    client = temporal_env.client
    prefix = f"pregrant-{uuid.uuid4().hex[:6]}-"
    tenant = f"{prefix}tenant"
    stand_in = StandIn(client)
    jobs = [
        job("quick"),
        job("after", needs=["quick"]),
        job("slow"),
        job("flaky"),
        job("secret", secrets=["TOKEN"]),
        job("fails"),
    ]
    inp = run_input(prefix, jobs, retry_window_seconds=5.0, max_concurrent_jobs=1)
    orchestration = Worker(
        client,
        task_queue=orchestration_queue(prefix),
        workflows=[CIRunWorkflow, CITenantSemaphoreWorkflow],
        activities=[project_ci_run],
    )
    ci = Worker(client, task_queue=ci_queue([LABEL], prefix), activities=[stand_in.run_job])
    # What every CI worker also serves: the semaphore asks it whether the job queue is polled.
    probe = Worker(client, task_queue=ci_probe_queue(prefix), activities=[CIProbeActivities(client).served_queues])
    async with orchestration, ci, probe:
        handle = await client.start_workflow(
            CIRunWorkflow.run, inp, id=run_workflow_id(inp.run_id), task_queue=orchestration_queue(prefix)
        )
        for _ in range(400):
            state = await handle.query(CIRunWorkflow.state)
            failed = state.job("fails")
            if state.status != RunStatus.IN_PROGRESS and failed is not None and failed.status == JobStatus.FAILURE:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"the first pass did not end: {state}")
        await handle.execute_update(CIRunWorkflow.retry_job, RetryJobRequest(job_id="fails"))
        final = await asyncio.wait_for(handle.result(), 60)
        sem = client.get_workflow_handle_for(CITenantSemaphoreWorkflow.run, semaphore_workflow_id(tenant))
        for _ in range(200):
            sem_state = await sem.query(CITenantSemaphoreWorkflow.state)
            if not sem_state.holders and not sem_state.pending:
                break
            await asyncio.sleep(0.05)
        await sem.terminate("test over")

    assert final.status == RunStatus.SUCCESS, final

    def attempts(job_id: str) -> list[tuple[int, int, AttemptStatus, str]]:
        found = final.job(job_id)
        assert found is not None
        return [(a.attempt, a.round, a.status, a.worker) for a in found.attempts]

    quick = final.job("quick")
    assert quick is not None and quick.started_at is not None and quick.attempt == 1
    assert attempts("quick") == [(1, 0, AttemptStatus.SUCCESS, "w-quick")]
    assert quick.attempts[0].log_prefix.endswith("/quick/attempt-1/")

    # The slow job's start notice made it in progress, with its worker, while it ran.
    assert stand_in.slow_saw is not None, "the slow job never saw itself in progress"
    seen = stand_in.slow_saw.job("slow")
    assert seen is not None and [(a.attempt, a.status, a.worker) for a in seen.attempts] == [
        (1, AttemptStatus.RUNNING, "w-slow")
    ]
    assert attempts("slow") == [(1, 0, AttemptStatus.SUCCESS, "w-slow")]

    # The first activity attempt failed before reporting: it shows lost; the retry asked and got 2.
    flaky = final.job("flaky")
    assert flaky is not None and flaky.attempt == 2
    assert [(a.attempt, a.status) for a in flaky.attempts] == [(1, AttemptStatus.LOST), (2, AttemptStatus.SUCCESS)]
    assert "before it reported its start" in (flaky.attempts[0].error or ""), flaky.attempts[0]

    secret = final.job("secret")
    assert secret is not None and [(a.attempt, a.status) for a in secret.attempts] == [(1, AttemptStatus.SUCCESS)]
    assert secret.attempts[0].secrets_token_sha256, "the Update issued a secrets token"

    # Retried: round 1's attempt has a number of its own.
    assert attempts("fails") == [(1, 0, AttemptStatus.FAILURE, "w-fails"), (2, 1, AttemptStatus.SUCCESS, "w-fails")]

    # Only the retried flaky attempt and the job with a secret asked with the Update.
    history = await handle.fetch_history()
    updates = [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        for e in history.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    assert sorted(updates) == sorted([UPDATE_ATTEMPT_STARTED, UPDATE_ATTEMPT_STARTED, "retry_job"]), updates

    # One slot under a cap of one, asked for once: ``after`` (made ready by ``quick``) ran on
    # ``quick``'s slot, and the jobs that waited in the run's own queue took it in turn, all
    # without a signal (the run never asked for more than the cap left it). ``fails``' first
    # round ran on it too; its retried round asked anew. Every slot was released.
    after = final.job("after")
    assert after is not None and after.slot_key == "quick#0", after
    inherited = [j.job_id for j in final.jobs if j.slot_key is not None]
    assert inherited == ["after", "slow", "flaky", "secret"], inherited
    assert not any(j.run_slot_wait for j in final.jobs)
    assert not sem_state.holders and not sem_state.pending, sem_state
    assert (sem_state.granted_total, sem_state.transferred_total) == (2, 0), sem_state
