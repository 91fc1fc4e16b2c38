"""The tenant semaphore's ``transfer`` when a run hands a spare slot to one of its job rounds that
already asked for a slot: the request is dropped and the slot changes key (the count does not);
and when the semaphore granted that request before the transfer arrived, the handed slot is
freed instead, so the round never counts twice. Against the real dev server; a stub workflow
stands for the run and keeps the grants it is sent.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from workflows.ci.semaphore import (
    SIGNAL_ACQUIRE,
    SIGNAL_GRANTED_MANY,
    SIGNAL_RELEASE,
    SIGNAL_TRANSFER,
    CITenantSemaphoreWorkflow,
)
from workflows.ci.types.semaphore import SemaphoreState, SlotGrants, SlotRelease, SlotRequest, SlotTransfer


@workflow.defn(sandboxed=False)
class GrantHolder:
    """Stands for a run: keeps the keys it is granted."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name=SIGNAL_GRANTED_MANY)
    def granted(self, grants: SlotGrants) -> None:
        self.keys.extend(grants.keys)

    @workflow.query
    def seen(self) -> list[str]:
        return self.keys


async def until(check: Callable[[], Awaitable[bool]], what: str, within: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def held(state: SemaphoreState) -> list[tuple[str, str]]:
    return sorted((h.holder, h.key) for h in state.holders)


async def test_transfer_to_a_waiting_request_keeps_the_count_exact(temporal_env: WorkflowEnvironment) -> None:
    client = temporal_env.client
    queue = f"sem-transfer-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[CITenantSemaphoreWorkflow, GrantHolder]):
        run_a = await client.start_workflow(GrantHolder.run, id=f"{queue}-a", task_queue=queue)
        run_b = await client.start_workflow(GrantHolder.run, id=f"{queue}-b", task_queue=queue)
        a, b = run_a.id, run_b.id
        sem = await client.start_workflow(
            CITenantSemaphoreWorkflow.run,
            SemaphoreState(
                tenant_id="t",
                limit=2,
                holders=[SlotRequest(holder=a, key="j1#0", limit=2), SlotRequest(holder=a, key="j2#0", limit=2)],
                pending=[SlotRequest(holder=a, key="j3#0", limit=2), SlotRequest(holder=b, key="x#0", limit=2)],
            ),
            id=f"{queue}-sem",
            task_queue=queue,
        )

        async def state() -> SemaphoreState:
            return await sem.query(CITenantSemaphoreWorkflow.state)

        # j1 ended and run A hands its slot to j3, which was waiting: swapped, request dropped.
        await sem.signal(SIGNAL_TRANSFER, SlotTransfer(holder=a, from_key="j1#0", to_key="j3#0", limit=2))

        async def swapped() -> bool:
            return held(await state()) == [(a, "j2#0"), (a, "j3#0")]

        await until(swapped, "the transfer to the waiting request")
        st = await state()
        assert [(p.holder, p.key) for p in st.pending] == [(b, "x#0")]

        # j2 ends with nothing of run A waiting: released, and run B's request is granted.
        await sem.signal(SIGNAL_RELEASE, SlotRelease(holder=a, key="j2#0"))

        async def b_granted() -> bool:
            return await run_b.query(GrantHolder.seen) == ["x#0"]

        await until(b_granted, "run B's grant")
        assert held(await state()) == [(a, "j3#0"), (b, "x#0")]
        # j3 was never granted on its own: it holds the slot the transfer gave it.
        assert await run_a.query(GrantHolder.seen) == []

        # Run A asks for j4; B lets go, so j4 is granted; a transfer j3 -> j4 sent before run A
        # heard of that grant arrives after it: j3's slot is freed, j4 counts once.
        await sem.signal(SIGNAL_ACQUIRE, SlotRequest(holder=a, key="j4#0", limit=2))
        await sem.signal(SIGNAL_RELEASE, SlotRelease(holder=b, key="x#0"))

        async def j4_granted() -> bool:
            return held(await state()) == [(a, "j3#0"), (a, "j4#0")]

        await until(j4_granted, "j4's grant")
        await sem.signal(SIGNAL_TRANSFER, SlotTransfer(holder=a, from_key="j3#0", to_key="j4#0", limit=2))

        async def one_left() -> bool:
            return held(await state()) == [(a, "j4#0")]

        await until(one_left, "the transferred slot to be freed")
        st = await state()
        assert st.pending == [] and st.limit == 2
        for handle in (run_a, run_b, sem):
            await handle.terminate()
