"""A concurrency group started holding one request, with a second request delivered in its very
first workflow task (signal-with-start puts it there, as a busy engine did for two job rounds
of one run that entered a new group together).

Signals are applied before the run method's first step, so the group used to see its first
member still pending (the group free) and supersede it: the job that came first was cancelled
and the queue explanation of the pair never settled (the intermittent failure of
``test_queue_e2e.test_approval_needs_and_worker_explanations``). The first member must run and
the second wait behind it, as when the requests arrive one workflow task apart.
"""

from __future__ import annotations

import asyncio
import uuid

from temporalio import workflow
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from workflows.ci.concurrency import SIGNAL_GROUP_ACQUIRE, SIGNAL_GROUP_NOTICE, CIConcurrencyGroupWorkflow
from workflows.ci.types.concurrency import GroupNotice, GroupOutcome, GroupRequest, GroupState


@workflow.defn(sandboxed=False)
class NoticeHolder:
    """Stands for a run: keeps the notices its group sends it."""

    def __init__(self) -> None:
        self.notices: list[GroupNotice] = []

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name=SIGNAL_GROUP_NOTICE)
    def notice(self, notice: GroupNotice) -> None:
        self.notices.append(notice)

    @workflow.query
    def seen(self) -> list[GroupNotice]:
        return self.notices


async def until(check, within: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + within
    while True:
        value = await check()
        if value or asyncio.get_running_loop().time() > deadline:
            return value
        await asyncio.sleep(0.1)


async def test_request_in_the_first_task_waits_behind_the_member_the_group_started_with(
    temporal_env: WorkflowEnvironment,
) -> None:
    client: Client = temporal_env.client
    queue = f"group-first-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[CIConcurrencyGroupWorkflow, NoticeHolder]):
        holders = [
            await client.start_workflow(NoticeHolder.run, id=f"{queue}-run-{i}", task_queue=queue) for i in range(2)
        ]
        first = GroupRequest(holder=holders[0].id, key="first#0")
        second = GroupRequest(holder=holders[1].id, key="second#0")
        group = await client.start_workflow(
            CIConcurrencyGroupWorkflow.run,
            GroupState(tenant_id="t", group="one-at-a-time", pending=first),
            id=f"{queue}-group",
            task_queue=queue,
            start_signal=SIGNAL_GROUP_ACQUIRE,
            start_signal_args=[second],
        )

        async def settled() -> GroupState | None:
            st = await group.query(CIConcurrencyGroupWorkflow.state)
            told = [await h.query(NoticeHolder.seen) for h in holders]
            return st if st.running is not None and told[0] else None

        state = await until(settled)
        assert state is not None, "the group never granted anyone"
        assert state.running == first and state.pending == second
        assert state.granted_total == 1
        assert [n.outcome for n in await holders[0].query(NoticeHolder.seen)] == [GroupOutcome.GRANTED]
        # The waiting member is told nothing until the first lets go.
        assert await holders[1].query(NoticeHolder.seen) == []
        for h in (*holders, group):
            await h.terminate()
