"""The live-progress cache against a real dev server: single flight, one describe per job per
TTL whatever the number of readers, and an execution the engine forgot reads as gone."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from temporalio.client import Client, DescribeWorkflowInput, Interceptor, OutboundInterceptor, WorkflowExecutionStatus

from api.video.live import LiveProgress
from leasehold.settings import Settings
from tests.video_core.jobs import request, start_job


class Describes(Interceptor):
    def __init__(self) -> None:
        self.by_workflow: Counter[str] = Counter()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self)


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, owner: Describes) -> None:
        super().__init__(next)
        self.owner = owner

    async def describe_workflow(self, input: DescribeWorkflowInput) -> Any:
        self.owner.by_workflow[input.id] += 1
        return await super().describe_workflow(input)


async def test_readers_share_one_describe_per_ttl(temporal_client: Client, settings: Settings) -> None:
    # No worker polls this test's queues: the job stays open (and is terminated at the end).
    handle = await start_job(temporal_client, settings, request())
    job_id = handle.id.removeprefix("video-")
    describes = Describes()
    config = temporal_client.config()
    config["interceptors"] = [describes]
    live = LiveProgress(Client(**config), ttl=0.5)
    try:
        answers = await asyncio.gather(*(live.of(job_id) for _ in range(50)))
        assert describes.by_workflow == {handle.id: 1}
        assert all(a is answers[0] for a in answers)
        assert answers[0] is not None and answers[0].status == WorkflowExecutionStatus.RUNNING
        # Within the TTL the answer is reused; after it, one more describe serves the next readers.
        await live.of(job_id)
        assert describes.by_workflow[handle.id] == 1
        await asyncio.sleep(0.6)
        await asyncio.gather(*(live.of(job_id) for _ in range(10)))
        assert describes.by_workflow[handle.id] == 2
        # A reader that gives up does not cancel the describe the others wait for.
        await asyncio.sleep(0.6)
        impatient = asyncio.ensure_future(live.of(job_id))
        patient = asyncio.ensure_future(live.of(job_id))
        await asyncio.sleep(0)
        impatient.cancel()
        answer = await patient
        assert answer is not None and answer.status == WorkflowExecutionStatus.RUNNING
        assert describes.by_workflow[handle.id] == 3
    finally:
        await handle.terminate("test over")

    # An execution the engine does not have: known gone (the read model's row then stands).
    gone = await live.of("video_" + "0" * 32)
    assert gone is not None and gone.status is None and gone.generation is None
