"""Worker Versioning on the real dev server (``docs/versioning.md``): the orchestration worker runs
as this build's deployment version with versioned routing, and a tenant semaphore, pinned to
the build that started it, moves to a newly promoted build at its next task, through
continue-as-new, carrying its holders and counts. Each test uses a deployment of its own, so the
session's ``leasehold`` deployment is left alone.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.common import VersioningBehavior
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from leasehold.settings import Settings
from leasehold.worker_versioning import current_version, deployment_config, promote
from orchestrator.main import build_worker
from tests.ci_dispatch.test_semaphore_transfer import GrantHolder, until
from workflows.ci.semaphore import SIGNAL_ACQUIRE, SIGNAL_RELEASE, CITenantSemaphoreWorkflow
from workflows.ci.types.semaphore import SemaphoreState, SlotRelease, SlotRequest
from workflows.version import BUILD_ID


async def build_of(client: Client, workflow_id: str) -> tuple[str, str]:
    """(run id, build id) of the workflow's latest run, as the server routes it."""
    described = await client.get_workflow_handle(workflow_id).describe()
    info = described.raw_description.workflow_execution_info.versioning_info
    return described.run_id, info.deployment_version.build_id


async def test_the_orchestration_worker_runs_as_this_builds_version(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path, queue_prefix=f"v-{uuid.uuid4().hex[:6]}-")
    config = build_worker(temporal_env.client, settings).config().get("deployment_config")
    assert config is not None and config.use_worker_versioning
    assert config.default_versioning_behavior == VersioningBehavior.PINNED
    assert (config.version.deployment_name, config.version.build_id) == ("leasehold", BUILD_ID)
    # The build id a release names wins; turned off, the version is only reported.
    named = Settings(data_dir=tmp_path, worker_build_id="2026.12.1", worker_versioning=False)
    off = deployment_config(named, BUILD_ID, routed=True)
    assert off.version.build_id == "2026.12.1" and not off.use_worker_versioning
    assert off.default_versioning_behavior == VersioningBehavior.UNSPECIFIED
    assert not deployment_config(settings, BUILD_ID, routed=False).use_worker_versioning


async def test_a_semaphore_moves_to_the_new_build_at_its_next_task(temporal_env: WorkflowEnvironment) -> None:
    client = temporal_env.client
    tag = uuid.uuid4().hex[:8]
    queue = f"sem-version-{tag}"
    settings = Settings(worker_deployment_name=f"sem-{tag}")
    old = deployment_config(settings, "1", routed=True)
    new = deployment_config(settings, "2", routed=True)
    workflows = [CITenantSemaphoreWorkflow, GrantHolder]
    async with Worker(client, task_queue=queue, workflows=workflows, deployment_config=old):
        await promote(client, old.version, "test")
        assert await current_version(client, old.version.deployment_name) == "1"
        # Promoting the current version again changes nothing.
        await promote(client, old.version, "test")
        holder = await client.start_workflow(GrantHolder.run, id=f"{queue}-run", task_queue=queue)
        sem = await client.start_workflow(
            CITenantSemaphoreWorkflow.run, SemaphoreState(tenant_id="t", limit=1), id=f"{queue}-sem", task_queue=queue
        )
        await sem.signal(SIGNAL_ACQUIRE, SlotRequest(holder=holder.id, key="j1#0", limit=1))

        async def granted(key: str) -> bool:
            return key in await holder.query(GrantHolder.seen)

        await until(lambda: granted("j1#0"), "the first grant")
        first_run, build = await build_of(client, sem.id)
        assert build == "1"

        async with Worker(client, task_queue=queue, workflows=workflows, deployment_config=new):
            await promote(client, new.version, "test")
            assert await current_version(client, new.version.deployment_name) == "2"
            # Pinned: the semaphore stays where it is until it has a task to run.
            assert await build_of(client, sem.id) == (first_run, "1")
            await sem.signal(SIGNAL_RELEASE, SlotRelease(holder=holder.id, key="j1#0"))

            async def moved() -> bool:
                run_id, build = await build_of(client, sem.id)
                if run_id != first_run and build == "2":
                    return True
                # The server tells workers of the new current version asynchronously: the
                # release's task may have run before the semaphore could see it. A release of a
                # key nobody holds changes nothing and gives it its next task.
                nudge = client.get_workflow_handle(sem.id)  # whichever run is the latest
                await nudge.signal(SIGNAL_RELEASE, SlotRelease(holder=holder.id, key="none#0"))
                return False

            await until(moved, "the semaphore's rollover onto build 2")
            latest = client.get_workflow_handle_for(CITenantSemaphoreWorkflow.run, sem.id)
            state = await latest.query(CITenantSemaphoreWorkflow.state)
            # The counts carried over, and the slot the release freed is free.
            assert state.granted_total == 1 and not state.holders, state
            # The new build's semaphore serves the run, still pinned to build 1.
            await latest.signal(SIGNAL_ACQUIRE, SlotRequest(holder=holder.id, key="j2#0", limit=1))
            await until(lambda: granted("j2#0"), "a grant from the new build")
            assert (await build_of(client, holder.id))[1] == "1"
            await latest.terminate()
        await holder.terminate()
