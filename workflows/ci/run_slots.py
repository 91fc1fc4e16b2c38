"""A run's slots under the tenant's cap: requests, grants, hand-overs and releases
(``CITenantSemaphoreWorkflow``). Each request names its job's queue, which the semaphore grants
only while a worker polls it; a slot moves within the run only to a round on a queue the run
was granted a slot for, and requests the semaphore says wait unserved (``slots_unserved``) do
not count against the run's share, so its served jobs still ask."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import FailureError, WorkflowAlreadyStartedError
from temporalio.types import MethodAsyncSingleParam

with workflow.unsafe.imports_passed_through():
    from workflows.ci.run_graph import RunGraph
    from workflows.ci.semaphore import (
        SIGNAL_ACQUIRE,
        SIGNAL_ACQUIRE_MANY,
        SIGNAL_EXPIRED,
        SIGNAL_GRANTED_MANY,
        SIGNAL_RELEASE,
        SIGNAL_RELEASE_MANY,
        SIGNAL_TRANSFER,
        SIGNAL_UNSERVED,
        CITenantSemaphoreWorkflow,
        semaphore_workflow_id,
    )
    from workflows.ci.types.semaphore import (
        SemaphoreState,
        SlotGrants,
        SlotRelease,
        SlotReleases,
        SlotRequest,
        SlotRequests,
        SlotTransfer,
    )
    from workflows.queues import ci_probe_queue, ci_queue, orchestration_queue


# What a shared workflow's run method takes.
P = TypeVar("P")


class RunSlots(RunGraph):
    """The slot protocol of a run with its tenant's semaphore."""

    def _job_queue(self, job_id: str) -> str:
        """The task queue of the job's current round (its evaluated ``runs-on``)."""
        job = self._state.job(job_id)
        push = self._inp.push
        return ci_queue(job.runs_on if job is not None else [], push.queue_prefix, push.isolation)

    def _may_take_over(self, job_id: str) -> bool:
        """Whether a slot of this run may move to the job's round without asking the semaphore:
        only to a queue a worker was found to poll (the semaphore grants no other)."""
        return self._job_queue(job_id) in self._served_queues

    def _slot_request(self, job_id: str, key: str) -> SlotRequest:
        inp = self._inp
        assert inp.push.max_concurrent_jobs is not None
        return SlotRequest(
            holder=workflow.info().workflow_id,
            key=key,
            limit=inp.push.max_concurrent_jobs,
            queue=self._job_queue(job_id),
            probe_queue=ci_probe_queue(inp.push.queue_prefix),
        )

    def _slots_in_play(self) -> int:
        """Slots this run holds, has asked for, or is handing over: never more than the cap.
        A request the semaphore found waiting on an unserved queue counts for nothing, so the
        run's other jobs still ask (the semaphore keeps the cap exact)."""
        asked = len(self._requested - self._unserved_asks)
        return len(self._granted) + len(self._spare_slots) + len(self._slot_gifts) + asked

    async def _wait_in_run_queue(self, job_id: str, limit: int) -> str | None:
        """Wait in the run's own queue: a slot of the run handed over (its key), or ``None`` when
        the round may ask the semaphore itself (room under the cap) or must stop (cancelled)."""
        job = self._state.job(job_id)
        self._slot_queue.append(job_id)
        if job is not None:
            job.run_slot_wait = True
            self._snapshots.changed()
        try:
            await workflow.wait_condition(
                lambda: (
                    job_id in self._slot_gifts
                    or job_id in self._abort_wait
                    or (self._slot_queue[:1] == [job_id] and self._slots_in_play() < limit)
                )
            )
        finally:
            if job_id in self._slot_queue:
                self._slot_queue.remove(job_id)
            if job is not None:
                job.run_slot_wait = False
                self._snapshots.changed()
        return self._slot_gifts.pop(job_id, None)

    async def _acquire_slot(self, job_id: str, key: str) -> str:
        """A slot for the job round: its own key once granted, or a slot of the run handed over."""
        inp = self._inp
        assert inp.push.max_concurrent_jobs is not None
        if self._slots_in_play() >= inp.push.max_concurrent_jobs:
            gift = await self._wait_in_run_queue(job_id, inp.push.max_concurrent_jobs)
            if gift is not None:
                self._granted.add(gift)
                return gift
            if job_id in self._abort_wait:
                return key
        self._requested.add(key)
        req = self._slot_request(job_id, key)
        # Jobs started in one pass run their tasks one after the other before the flush task
        # created by the first of them: it sends all their requests in one signal.
        self._acquire_batch.append(req)
        if self._acquire_flush is None:
            self._acquire_flush = asyncio.create_task(self._flush_acquires())
            self._releases.append(self._acquire_flush)
        # Sent before waiting: a release of this key can never overtake its request.
        await asyncio.shield(self._acquire_flush)
        # Acknowledged: a transfer to this key reaches the semaphore after the request did.
        self._awaiting_grant[key] = job_id
        try:
            await workflow.wait_condition(
                lambda: key in self._granted or job_id in self._abort_wait or key in self._expired_asks
            )
        finally:
            self._awaiting_grant.pop(key, None)
        return key

    async def _flush_acquires(self) -> None:
        reqs, self._acquire_batch, self._acquire_flush = self._acquire_batch, [], None
        await self._send_acquire(SIGNAL_ACQUIRE_MANY, SlotRequests(requests=reqs), reqs)

    async def _send_acquire(self, signal: str, payload: SlotRequest | SlotRequests, reqs: list[SlotRequest]) -> None:
        inp = self._inp
        assert inp.push.max_concurrent_jobs is not None
        # No semaphore yet (or it just rolled over): it starts holding these requests.
        await self._signal_or_start(
            semaphore_workflow_id(inp.push.tenant_id),
            signal,
            payload,
            CITenantSemaphoreWorkflow.run,
            SemaphoreState(tenant_id=inp.push.tenant_id, limit=inp.push.max_concurrent_jobs, pending=reqs),
        )

    async def _signal_or_start(
        self, workflow_id: str, signal: str, payload: Any, run: MethodAsyncSingleParam[Any, P, Any], start: P
    ) -> None:
        """Signal one of the tenant's shared workflows (its semaphore, a concurrency group);
        where none runs, start it from ``start``, as a child that outlives this run. A
        concurrent start by another run makes us signal instead."""
        try:
            await workflow.get_external_workflow_handle(workflow_id).signal(signal, payload)
        except FailureError:
            try:
                await workflow.start_child_workflow(
                    run,
                    start,
                    id=workflow_id,
                    task_queue=orchestration_queue(self._inp.push.queue_prefix),
                    parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                )
            except WorkflowAlreadyStartedError:
                await workflow.get_external_workflow_handle(workflow_id).signal(signal, payload)

    async def _send_transfer(self, job_id: str, spare: str, key: str) -> None:
        """The hand-off's signal (the job already runs): after the one that made ``spare`` held."""
        inp = self._inp
        assert inp.push.max_concurrent_jobs is not None
        earlier = self._slot_moves.pop(spare, None)
        if earlier is not None:
            await earlier
        move = SlotTransfer(
            holder=workflow.info().workflow_id, from_key=spare, to_key=key, limit=inp.push.max_concurrent_jobs
        )
        try:
            await workflow.get_external_workflow_handle(semaphore_workflow_id(inp.push.tenant_id)).signal(
                SIGNAL_TRANSFER, move
            )
        except FailureError:
            # The semaphore was ended from outside (its holders with it): have a new one count
            # this round, which is already running.
            req = self._slot_request(job_id, key)
            await self._send_acquire(SIGNAL_ACQUIRE, req, [req])

    async def _moved(self, keys: list[str]) -> None:
        """Wait for the transfers that made ``keys`` held (a release must not overtake them)."""
        for key in keys:
            move = self._slot_moves.pop(key, None)
            if move is not None:
                await move

    def _release_spare_slots(self) -> None:
        """Slots no job of this pass took over go to this run's job rounds waiting in its own
        queue (no signal), then to those waiting for a grant (oldest first, a ``transfer`` each),
        and the rest back to the tenant (in one signal); only to rounds on a queue a worker was
        found to poll (``_may_take_over``)."""
        for job_id in [j for j in self._slot_queue if j not in self._abort_wait and self._may_take_over(j)]:
            if not self._spare_slots:
                break
            # Held all along: the semaphore's count is right as it is.
            self._slot_queue.remove(job_id)
            self._slot_gifts[job_id] = self._spare_slots.pop(0)
        waiting = [
            (key, job_id)
            for key, job_id in self._awaiting_grant.items()
            if key not in self._granted and job_id not in self._abort_wait and self._may_take_over(job_id)
        ]
        if self._spare_slots and waiting:
            for key, job_id in waiting[: len(self._spare_slots)]:
                spare = self._spare_slots.pop(0)
                self._requested.discard(key)
                # Held from now on (the job's task wakes in this activation); the semaphore
                # swaps the keys and drops the request, or, if it granted the request meanwhile,
                # frees ``spare``: either way the count stays exact. A release of ``key`` waits
                # for this signal (``_slot_moves``).
                self._granted.add(key)
                move = asyncio.create_task(self._send_transfer(job_id, spare, key))
                self._slot_moves[key] = move
                self._releases.append(move)
        if len(self._spare_slots) > 1:
            keys, self._spare_slots = self._spare_slots, []
            self._releases.append(asyncio.create_task(self._release_slots(keys)))
        while self._spare_slots:
            self._releases.append(asyncio.create_task(self._release_slot(self._spare_slots.pop(0))))

    async def _release_slots(self, keys: list[str]) -> None:
        await self._moved(keys)
        try:
            await workflow.get_external_workflow_handle(semaphore_workflow_id(self._inp.push.tenant_id)).signal(
                SIGNAL_RELEASE_MANY, SlotReleases(holder=workflow.info().workflow_id, keys=keys)
            )
        except FailureError:
            workflow.logger.warning("tenant semaphore gone; nothing to release for %s", keys)

    async def _release_slot(self, key: str) -> None:
        await self._moved([key])
        try:
            await workflow.get_external_workflow_handle(semaphore_workflow_id(self._inp.push.tenant_id)).signal(
                SIGNAL_RELEASE, SlotRelease(holder=workflow.info().workflow_id, key=key)
            )
        except FailureError:
            workflow.logger.warning("tenant semaphore gone; nothing to release for %s", key)

    @workflow.signal(name=SIGNAL_GRANTED_MANY)
    def slots_granted(self, grants: SlotGrants) -> None:
        """The tenant semaphore granted slots to several job rounds of this run at once."""
        self._granted.update(grants.keys)
        self._requested.difference_update(grants.keys)
        self._unserved_asks.difference_update(grants.keys)

    @workflow.signal(name=SIGNAL_UNSERVED)
    def slots_unserved(self, asks: SlotGrants) -> None:
        """The semaphore holds these requests until a worker polls their queue."""
        self._unserved_asks.update(k for k in asks.keys if k in self._requested)

    @workflow.signal(name=SIGNAL_EXPIRED)
    def slots_expired(self, asks: SlotGrants) -> None:
        """The semaphore dropped these requests: no worker polled their queue for a day. Their
        rounds fail (``_run_job``) without a release (nothing is held or asked any more)."""
        mine = [k for k in asks.keys if k in self._requested]
        self._requested.difference_update(mine)
        self._expired_asks.update(mine)
