"""Record the dispatch paths' histories for the replay test: ``python -m tests.ci_dispatch.record_histories [DIR]``.

A capped run (cap 2) of one independent job and a three-job chain: the run asks for the slots
of a pass in one ``acquire_many`` signal, the tenant semaphore grants a round's slots in one
task and one ``slots_granted`` signal per run, each job's attempt is granted with its activity
(no ``attempt_started`` Update; ``solo`` runs long enough to send ``attempt_running``), and the
chain's next job takes over its predecessor's slot without telling the semaphore:
``run-capped_chain`` and ``semaphore-capped_chain``. Then three independent jobs under a cap of
one: the run asks for one slot, the other two wait in its own queue and take that slot in turn
(no transfer): ``run-slot_queue`` and ``semaphore-slot_queue`` (the semaphore's whole history,
both runs).

Real processes (orchestration and CI worker with bubblewrap) on a fresh dev server, written to
``histories/<BUILD_ID>/``; existing files are never overwritten (see
``tests/ci_core/record_histories.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import tempfile
from pathlib import Path

from testing.temporal import start_local_environment
from tests.ci_core.conftest import engine_stack
from tests.ci_core.record_histories import TENANT, WORKFLOW_PATH, push, run_handle, until
from workflows.ci.semaphore import CITenantSemaphoreWorkflow, semaphore_workflow_id
from workflows.ci.types.run import RunStatus
from workflows.version import BUILD_ID

HISTORIES = Path(__file__).parent / "histories"

CHAIN = """
on: push
jobs:
  solo:
    runs-on: linux
    steps: [{run: echo solo; sleep 1}]
  first:
    runs-on: linux
    steps: [{run: echo first}]
  second:
    needs: first
    runs-on: linux
    steps: [{run: echo second}]
  third:
    needs: second
    runs-on: linux
    steps: [{run: echo third}]
"""

SPARE = """
on: push
jobs:
  a:
    runs-on: linux
    steps: [{run: echo a}]
  b:
    runs-on: linux
    steps: [{run: echo b}]
  c:
    runs-on: linux
    steps: [{run: echo c}]
"""

log = logging.getLogger(__name__)


async def keep(out: Path, name: str, handle: object) -> None:
    path = out / f"{name}.json"
    if path.exists():
        log.info("kept %s (exists)", path.name)
        return
    path.write_text((await handle.fetch_history()).to_json())  # type: ignore[attr-defined]
    log.info("wrote %s", path.name)


async def main(out: Path) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    env = await start_local_environment()
    extra = {"ci_retry_window_seconds": 2.0, "ci_reconcile_interval_seconds": 86400.0}
    try:
        with tempfile.TemporaryDirectory() as tmp, engine_stack(env, Path(tmp), **extra) as stack:
            repo = stack.repo("chain")
            _, state = await push(stack, repo, repo.commit({WORKFLOW_PATH: CHAIN}), max_concurrent_jobs=2)
            run = run_handle(stack.client, state.runs[0].run_id)
            assert (await run.result()).status == RunStatus.SUCCESS
            semaphore = stack.client.get_workflow_handle_for(
                CITenantSemaphoreWorkflow.run, semaphore_workflow_id(TENANT)
            )

            async def idle() -> bool:
                sem = await semaphore.query(CITenantSemaphoreWorkflow.state)
                # The chain's hand-overs are silent: the semaphore granted solo and first only.
                return not sem.holders and not sem.pending and sem.granted_total == 2

            await until("semaphore: chain handed over, every slot released", idle)
            for name, handle in (("run-capped_chain", run), ("semaphore-capped_chain", semaphore)):
                await keep(out, name, handle)
            granted = (await semaphore.query(CITenantSemaphoreWorkflow.state)).granted_total

            spare = stack.repo("spare")
            _, state = await push(stack, spare, spare.commit({WORKFLOW_PATH: SPARE}), max_concurrent_jobs=1)
            run = run_handle(stack.client, state.runs[0].run_id)
            assert (await run.result()).status == RunStatus.SUCCESS

            async def handed_on() -> bool:
                sem = await semaphore.query(CITenantSemaphoreWorkflow.state)
                # One grant; the run's own queue took the slot in turn.
                return not sem.holders and not sem.pending and sem.granted_total == granted + 1

            await until("semaphore: one slot for the run, handed on within it, released", handed_on)
            await keep(out, "run-slot_queue", run)
            await keep(out, "semaphore-slot_queue", semaphore)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HISTORIES / BUILD_ID
    target.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(target))
    logging.shutdown()
    # As in tests/ci_core/record_histories.py: skip a teardown the Temporal core's threads can abort.
    os._exit(0)
