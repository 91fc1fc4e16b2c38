"""Label supersets and slots only for served queues, below the end-to-end tests.

* ``ci_label_subsets``: a worker's queues are every non-empty subset of its labels, bounded.
* ``SharedSlots``: one budget for the job workers of every subset queue of a process (real
  ``Worker`` instances against the session's dev server: never more jobs at once than slots).
* The tenant semaphore grants only requests whose queue a worker polls (a stub probe activity
  answers which), past a waiter whose queue nobody serves, and grants that waiter once its
  queue is served; a waiter unserved for ``unserved_expiry_seconds`` is dropped and its run told.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.common import RawValue
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.ci_dispatch.test_semaphore_transfer import GrantHolder, held, until
from worker_ci.job_slots import SharedSlots, job_queues, job_workers
from workflows.ci.semaphore import (
    SIGNAL_ACQUIRE,
    SIGNAL_EXPIRED,
    SIGNAL_GRANTED_MANY,
    SIGNAL_RELEASE,
    SIGNAL_UNSERVED,
    CITenantSemaphoreWorkflow,
)
from workflows.ci.types.semaphore import (
    ACTIVITY_SERVED_QUEUES,
    SemaphoreState,
    ServedQueues,
    ServedQueuesInput,
    SlotGrants,
    SlotRelease,
    SlotRequest,
)
from workflows.queues import MAX_CI_WORKER_LABELS, TooManyLabels, ci_image_queue, ci_label_subsets, ci_queue


def test_subsets_of_three_labels() -> None:
    subsets = ci_label_subsets(["c", "a", "b", "a"])
    assert subsets[0] == ("a", "b", "c"), "the worker's own set comes first"
    assert sorted(subsets) == sorted([("a",), ("b",), ("c",), ("a", "b"), ("a", "c"), ("b", "c"), ("a", "b", "c")])
    assert ci_label_subsets(["linux"]) == [("linux",)]


def test_the_label_maximum() -> None:
    labels = [f"l{i}" for i in range(MAX_CI_WORKER_LABELS)]
    assert len(ci_label_subsets(labels)) == 2**MAX_CI_WORKER_LABELS - 1 == 63
    with pytest.raises(TooManyLabels, match=r"at most 6 labels .*63.*got 7"):
        ci_label_subsets([*labels, "one-more"])
    with pytest.raises(ValueError, match="at least one label"):
        ci_label_subsets([" ", ""])


def test_job_queues_keep_the_isolation_suffix() -> None:
    assert job_queues(["x64", "linux"], "p-", "bubblewrap") == ["p-ci.linux+x64", "p-ci.linux", "p-ci.x64"]
    gvisor = job_queues(["linux", "x64"], "p-", "gvisor")
    assert gvisor == ["p-ci.linux+x64@gvisor", "p-ci.linux@gvisor", "p-ci.x64@gvisor"]
    # A job's queue is still its exact label set: the worker polls it among its subsets.
    assert ci_queue(["x64"], "p-", "gvisor") in gvisor


class _Ctx:
    slot_info: Any = None
    permit: Any = None


async def test_shared_slots_hand_permits_over_in_order() -> None:
    slots = SharedSlots(2)
    ctx: Any = _Ctx()
    first, second = await slots.reserve_slot(ctx), await slots.reserve_slot(ctx)
    assert slots.out == 2 and slots.try_reserve_slot(ctx) is None
    waiter = asyncio.create_task(slots.reserve_slot(ctx))
    cancelled = asyncio.create_task(slots.reserve_slot(ctx))
    late = asyncio.create_task(slots.reserve_slot(ctx))
    await asyncio.sleep(0.05)
    assert not waiter.done() and not late.done()
    cancelled.cancel()
    await asyncio.sleep(0.05)
    release: Any = _Ctx()
    release.permit = first
    slots.release_slot(release)
    assert await asyncio.wait_for(waiter, 1) is not None
    assert not late.done(), "a released permit goes to one waiter, the oldest still waiting"
    release.permit = second
    slots.release_slot(release)
    await asyncio.wait_for(late, 1)
    assert slots.out == 2
    slots.release_slot(release)
    slots.release_slot(release)
    assert slots.out == 0


async def test_a_job_without_a_poll_permit_takes_a_free_slot_or_none() -> None:
    """``take`` (a job an image queue handed over): only a free slot nobody waits for; ``give``
    hands it to the oldest waiting poller, as a release does."""
    slots = SharedSlots(2)
    ctx: Any = _Ctx()
    polling = await slots.reserve_slot(ctx)
    assert slots.take() and (slots.out, slots.used) == (2, 1)
    assert not slots.take(), "no slot is free: the job is refused, never run beyond the budget"
    waiter = asyncio.create_task(slots.reserve_slot(ctx))
    await asyncio.sleep(0.05)
    slots.give()
    assert await asyncio.wait_for(waiter, 1) is not None
    assert (slots.out, slots.used) == (2, 0)
    release: Any = _Ctx()
    release.permit = polling
    slots.release_slot(release)
    assert slots.out == 1 and slots.take(), "the poll's slot came back: free to take"
    assert (slots.out, slots.used) == (2, 1)


class _QueueCtx:
    def __init__(self, queue: str) -> None:
        self.task_queue = queue
        self.slot_info: Any = None
        self.permit: Any = None


async def test_an_idle_queue_holds_one_permit_and_the_rest_stay_free_for_image_jobs() -> None:
    """``idle_per_queue=1``: the SDK's second reservation for a polling queue waits until the
    first permit runs a task, so an idle label queue holds one slot, not two, and the others
    stay free for what image queues hand over; another queue is not held up meanwhile."""
    slots = SharedSlots(3, idle_per_queue=1)
    first = await slots.reserve_slot(_QueueCtx("labels"))
    ahead = asyncio.create_task(slots.reserve_slot(_QueueCtx("labels")))
    await asyncio.sleep(0.05)
    assert not ahead.done() and slots.out == 1
    other = await asyncio.wait_for(slots.reserve_slot(_QueueCtx("other")), 1)
    assert slots.out == 2 and slots.take(), "a free slot goes to an image job, not to an idle poll"
    assert not slots.take(), "the budget holds: three out"
    # The first poll gets a task: its queue may poll again once a slot is free.
    used = _QueueCtx("labels")
    used.permit, used.slot_info = first, object()
    slots.mark_slot_used(used)
    await asyncio.sleep(0.05)
    assert not ahead.done(), "no slot free yet"
    slots.give()
    await asyncio.wait_for(ahead, 1)
    assert (slots.out, slots.used) == (3, 1)
    idle = _QueueCtx("other")
    idle.permit = other
    slots.release_slot(idle)
    slots.release_slot(used)
    assert slots.out == 1


def test_image_queues_name_labels_isolation_and_digest() -> None:
    digest = "sha256:" + "ab" * 32
    queue = ci_image_queue(["x64", "linux"], digest, "p-", "gvisor")
    assert queue == "p-ci.linux+x64@gvisor#" + "ab" * 16
    assert queue.startswith(ci_queue(["linux", "x64"], "p-", "gvisor") + "#")
    assert ci_image_queue(["linux"], digest) != ci_image_queue(["linux"], "sha256:" + "cd" * 32)


# Shared budget through real workers: activities on three queues, two slots.
_running = {"now": 0, "peak": 0}


@activity.defn(name="hold_a_slot")
async def hold_a_slot(seconds: float) -> str:
    _running["now"] += 1
    _running["peak"] = max(_running["peak"], _running["now"])
    try:
        await asyncio.sleep(seconds)
    finally:
        _running["now"] -= 1
    return activity.info().task_queue


@workflow.defn(sandboxed=False)
class SpreadJobs:
    """Starts one activity per queue given, all at once."""

    @workflow.run
    async def run(self, queues: list[str]) -> list[str]:
        return list(
            await asyncio.gather(
                *(
                    workflow.execute_activity(
                        hold_a_slot, 0.5, task_queue=q, start_to_close_timeout=timedelta(seconds=60)
                    )
                    for q in queues
                )
            )
        )


async def test_one_slot_budget_across_subset_queues(temporal_env: WorkflowEnvironment) -> None:
    client = temporal_env.client
    prefix = f"shared-{uuid.uuid4().hex[:8]}-"
    queues = job_queues(["a", "b"], prefix, "bubblewrap")
    assert len(queues) == 3
    slots = SharedSlots(2)
    _running.update(now=0, peak=0)
    workers = job_workers(client, queues, [hold_a_slot], slots, ThreadPoolExecutor(2), None)
    async with Worker(client, task_queue=f"{prefix}wf", workflows=[SpreadJobs]):
        for w in workers:
            await w.__aenter__()
        try:
            done = await asyncio.wait_for(
                client.execute_workflow(SpreadJobs.run, queues * 3, id=f"{prefix}spread", task_queue=f"{prefix}wf"),
                timeout=120,
            )
        finally:
            for w in workers:
                await w.__aexit__(None, None, None)
    assert sorted(done) == sorted(queues * 3), "every queue's jobs ran"
    assert _running["peak"] == 2, f"at most the budget ran at once: {_running}"


# The semaphore and its probe: a stub activity answers which queues are polled.
_polled: set[str] = set()


@activity.defn(name=ACTIVITY_SERVED_QUEUES)
async def stub_served_queues(inp: ServedQueuesInput) -> ServedQueues:
    return ServedQueues(served=[q for q in inp.queues if q in _polled])


async def test_unserved_requests_hold_nothing(temporal_env: WorkflowEnvironment) -> None:
    client = temporal_env.client
    queue = f"sem-served-{uuid.uuid4().hex[:8]}"
    probe = f"{queue}-probe"
    served_q, unserved_q = f"{queue}-ci.linux", f"{queue}-ci.gpu-none"
    _polled.clear()
    _polled.add(served_q)

    def req(holder: str, key: str, on: str) -> SlotRequest:
        return SlotRequest(holder=holder, key=key, limit=2, queue=on, probe_queue=probe)

    async with (
        Worker(client, task_queue=queue, workflows=[CITenantSemaphoreWorkflow, GrantHolder]),
        Worker(client, task_queue=probe, activities=[stub_served_queues]),
    ):
        run_u = await client.start_workflow(GrantHolder.run, id=f"{queue}-u", task_queue=queue)
        run_s = await client.start_workflow(GrantHolder.run, id=f"{queue}-s", task_queue=queue)
        u, s = run_u.id, run_s.id
        sem = await client.start_workflow(
            CITenantSemaphoreWorkflow.run,
            SemaphoreState(tenant_id="t", limit=2, pending=[req(u, "g1#0", unserved_q), req(u, "g2#0", unserved_q)]),
            id=f"{queue}-sem",
            task_queue=queue,
        )

        async def state() -> SemaphoreState:
            return await sem.query(CITenantSemaphoreWorkflow.state)

        async def probed_unserved() -> bool:
            return unserved_q in (await state()).unserved

        await until(probed_unserved, "the probe to find the unserved queue")
        assert (await state()).holders == [], "a request nobody serves holds no slot"

        # Another run's jobs on a served queue get both slots, past the waiting requests.
        for key in ("p1#0", "p2#0"):
            await sem.signal(SIGNAL_ACQUIRE, req(s, key, served_q))

        async def served_granted() -> bool:
            return held(await state()) == [(s, "p1#0"), (s, "p2#0")]

        await until(served_granted, "the served requests' grants")
        assert await run_u.query(GrantHolder.seen) == []
        probes = (await state()).probes_total
        # A third served request within the freshness window is granted without a probe.
        await sem.signal(SIGNAL_RELEASE, SlotRelease(holder=s, key="p1#0"))
        await sem.signal(SIGNAL_ACQUIRE, req(s, "p3#0", served_q))

        async def third() -> bool:
            return (s, "p3#0") in held(await state())

        await until(third, "the third served grant")
        assert (await state()).probes_total <= probes + 1, "no probe per job for a served queue"

        # A worker appears for the unserved queue: the next recheck grants its waiters.
        _polled.add(unserved_q)
        await sem.signal(SIGNAL_RELEASE, SlotRelease(holder=s, key="p2#0"))
        await sem.signal(SIGNAL_RELEASE, SlotRelease(holder=s, key="p3#0"))

        async def unserved_granted() -> bool:
            return sorted(await run_u.query(GrantHolder.seen)) == ["g1#0", "g2#0"]

        await until(unserved_granted, "the waiters' grants once their queue is served", within=30)
        assert (await state()).unserved == {}
        for handle in (run_u, run_s, sem):
            await handle.terminate()


@workflow.defn(sandboxed=False)
class ExpiryHolder:
    """Stands for a run: keeps what the semaphore tells it."""

    def __init__(self) -> None:
        self.told: dict[str, list[str]] = {}

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(dynamic=True)
    def told_of(self, name: str, args: Sequence[RawValue]) -> None:
        grants = workflow.payload_converter().from_payload(args[0].payload, SlotGrants)
        self.told.setdefault(name, []).extend(grants.keys)

    @workflow.query
    def seen(self) -> dict[str, list[str]]:
        return self.told


async def test_a_request_unserved_too_long_is_dropped_and_its_run_told(temporal_env: WorkflowEnvironment) -> None:
    client = temporal_env.client
    queue = f"sem-expiry-{uuid.uuid4().hex[:8]}"
    probe = f"{queue}-probe"
    nowhere = f"{queue}-ci.nowhere"
    async with (
        Worker(client, task_queue=queue, workflows=[CITenantSemaphoreWorkflow, ExpiryHolder]),
        Worker(client, task_queue=probe, activities=[stub_served_queues]),
    ):
        run = await client.start_workflow(ExpiryHolder.run, id=f"{queue}-r", task_queue=queue)
        request = SlotRequest(holder=run.id, key="j#0", limit=1, queue=nowhere, probe_queue=probe)
        sem = await client.start_workflow(
            CITenantSemaphoreWorkflow.run,
            SemaphoreState(tenant_id="t", limit=1, unserved_expiry_seconds=3.0),
            id=f"{queue}-sem",
            task_queue=queue,
        )
        await sem.signal(SIGNAL_ACQUIRE, request)

        async def told_unserved() -> bool:
            return (await run.query(ExpiryHolder.seen)).get(SIGNAL_UNSERVED) == ["j#0"]

        await until(told_unserved, "the run to be told its request waits unserved")

        async def expired() -> bool:
            return (await run.query(ExpiryHolder.seen)).get(SIGNAL_EXPIRED) == ["j#0"]

        await until(expired, "the request to expire", within=30)
        st = await sem.query(CITenantSemaphoreWorkflow.state)
        assert st.pending == [] and st.holders == []
        assert SIGNAL_GRANTED_MANY not in await run.query(ExpiryHolder.seen)
        for handle in (run, sem):
            await handle.terminate()
