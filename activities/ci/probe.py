"""Which CI job queues a live worker polls: the tenant semaphore's ``ci_served_queues``.

Run on every CI worker's probe queue (``queues.ci_probe_queue``), with the worker's own client.
``DescribeTaskQueue`` lists the pollers the engine's matching service saw on a queue within its
poller TTL (about five minutes), so a worker that died counts as serving for up to that long.
The API's queue explanation asks the same question the same way (``has_pollers``).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from temporalio import activity
from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from activities.ci.definitions import CIProbeDefinition
from workflows.ci.types.semaphore import ACTIVITY_SERVED_QUEUES, ServedQueues, ServedQueuesInput

log = logging.getLogger(__name__)

# Each description gives up after this long (the probe as a whole has CI_PROBE_TIMEOUT).
DESCRIBE_TIMEOUT = timedelta(seconds=3)


async def has_pollers(client: Client, queue: str, rpc_timeout: timedelta = DESCRIBE_TIMEOUT) -> bool:
    """Whether any worker polled the activity queue ``queue`` within the engine's poller TTL.
    Raises ``RPCError`` when the engine does not answer (a queue nobody ever used is described
    as empty, not missing)."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    )
    described = await client.workflow_service.describe_task_queue(request, timeout=rpc_timeout)
    return len(described.pollers) > 0


class CIProbeActivities(CIProbeDefinition):
    """Built once per CI worker with its Temporal client."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name=ACTIVITY_SERVED_QUEUES)
    async def served_queues(self, inp: ServedQueuesInput) -> ServedQueues:
        answers = await asyncio.gather(*(has_pollers(self.client, q) for q in inp.queues), return_exceptions=True)
        served: list[str] = []
        for queue, answer in zip(inp.queues, answers, strict=True):
            if isinstance(answer, BaseException):
                log.warning("describing %s failed: %s", queue, answer)
            elif answer:
                served.append(queue)
        return ServedQueues(served=served)
