"""``CITenantSemaphoreWorkflow``: the durable per-tenant cap on running CI jobs.

One workflow per tenant (id ``ci-tenant-sem:<tenant>``). A run signals ``acquire`` before it
schedules a job's activity and waits for ``slots_granted``; it signals ``release`` when that job
round ends, whatever the ending (success, failure, cancellation, a worker lost and the job
retried or failed): the release is in the ``finally`` of the run's job task, so every path
passes through it. Requests are granted first come, first served within the tenant; across
tenants, the task queue's fairness keys do the sharing.

Every free slot is granted in one workflow task: the grants of a round are signalled to their
runs concurrently (one ``SignalExternalWorkflowExecution`` command each, all in the same task),
so dispatch is bounded by worker slots, not by one signal round trip per grant; a run's grants
of one round travel in one ``slots_granted`` signal, and a run asks for the slots of one
scheduling pass (``acquire_many``) and gives back those of one pass (``release_many``) in one
signal each. The cap stays exact: a slot is counted as held from the moment
it is granted (``holders``), and only a ``release`` (or a run found gone) frees it.

A run whose job round ends while its next job round becomes ready (a chain) may ``transfer``
the slot to that round instead of releasing it and asking again: the holder's key changes, the
count does not, and the chain's next job needs no grant. The slot then stays with the chain
rather than going to the tenant's oldest waiter; it goes back on the first job round that ends
with no successor ready. A run whose job round ends while another of its rounds waits here for
a grant transfers the slot to that round the same way (its request is dropped; if it was
granted meanwhile, the transferred slot is freed instead), so a run's jobs beyond its share of
the cap start one after the other without a release and a grant each. Like a chain's, that
slot stays with the run rather than going to the tenant's oldest waiter (most often the same:
a run asks for all its ready jobs at once, before the tenant's later runs ask).

The workflow lives as long as the tenant uses CI and continues as new before its history
grows large, carrying holders and waiters.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from workflows.ci.types.semaphore import (
        SemaphoreState,
        SlotGrants,
        SlotRelease,
        SlotReleases,
        SlotRequest,
        SlotRequests,
        SlotTransfer,
    )

SEMAPHORE_PREFIX = "ci-tenant-sem:"
SIGNAL_ACQUIRE = "acquire"
SIGNAL_RELEASE = "release"
SIGNAL_TRANSFER = "transfer"
SIGNAL_ACQUIRE_MANY = "acquire_many"
SIGNAL_RELEASE_MANY = "release_many"
SIGNAL_GRANTED_MANY = "slots_granted"
# Continue as new past this many history events (each grant costs a few).
MAX_HISTORY_EVENTS = 2000
# An idle semaphore still continues as new now and then, so its history stays short.
IDLE_ROLLOVER = timedelta(hours=6)


def rollover_due(started: bool, max_events: int = MAX_HISTORY_EVENTS) -> bool:
    """Whether a tenant-wide workflow should continue as new now: its history is long, the
    server suggests it, or a new build is current. Not for a new build in a run's first round:
    a run that did not land on that build (a server that ignores the upgrade) would otherwise
    roll over again at once, for ever."""
    info = workflow.info()
    return (
        info.get_current_history_length() > max_events
        or info.is_continue_as_new_suggested()
        or (not started and info.is_target_worker_deployment_version_changed())
    )


def semaphore_workflow_id(tenant_id: str) -> str:
    return SEMAPHORE_PREFIX + tenant_id


# Pinned (the orchestration worker's default) between rollovers: each continue-as-new starts
# on the deployment's current build, and a new current build makes it roll over at its next
# task (docs/versioning.md).
@workflow.defn
class CITenantSemaphoreWorkflow:
    """See the module docstring."""

    @workflow.init
    def __init__(self, state: SemaphoreState) -> None:
        self._state = state
        self._dirty = False
        # Grants to signal to their runs (signal handlers cannot await).
        self._notify: list[SlotRequest] = []

    @workflow.query
    def state(self) -> SemaphoreState:
        return self._state

    @workflow.signal(name=SIGNAL_ACQUIRE)
    def acquire(self, req: SlotRequest) -> None:
        st = self._state
        st.limit = max(1, req.limit)
        same = [r for r in (*st.holders, *st.pending) if r.holder == req.holder and r.key == req.key]
        if same:
            # A repeated request (e.g. a run replayed a signal): re-grant if it already holds.
            if any(h.holder == req.holder and h.key == req.key for h in st.holders):
                self._notify.append(req)
        else:
            st.pending.append(req)
        self._dirty = True

    @workflow.signal(name=SIGNAL_ACQUIRE_MANY)
    def acquire_many(self, reqs: SlotRequests) -> None:
        for req in reqs.requests:
            self.acquire(req)

    @workflow.signal(name=SIGNAL_RELEASE_MANY)
    def release_many(self, rels: SlotReleases) -> None:
        for key in rels.keys:
            self.release(SlotRelease(holder=rels.holder, key=key))

    @workflow.signal(name=SIGNAL_TRANSFER)
    def transfer(self, move: SlotTransfer) -> None:
        st = self._state
        st.limit = max(1, move.limit)
        # The new key may be a request still waiting here (the run handed a spare slot to a job
        # round that had asked for one): it is held by the transfer, never granted on its own.
        st.pending = [p for p in st.pending if not (p.holder == move.holder and p.key == move.to_key)]
        if any(h.holder == move.holder and h.key == move.to_key for h in st.holders):
            # Granted before the transfer arrived: the round holds that slot, so the one it was
            # handed is free again.
            st.holders = [h for h in st.holders if not (h.holder == move.holder and h.key == move.from_key)]
            self._dirty = True
            return
        for i, h in enumerate(st.holders):
            if h.holder == move.holder and h.key == move.from_key:
                st.holders[i] = SlotRequest(holder=move.holder, key=move.to_key, limit=move.limit)
                st.transferred_total += 1
                return
        # Not held: only when this workflow lost its holders (ended from outside and started
        # afresh). The run's job is already running: count it, so later grants see it.
        workflow.logger.warning("transfer of %s by %s: slot not held; taking one", move.from_key, move.holder)
        st.pending = [p for p in st.pending if not (p.holder == move.holder and p.key == move.to_key)]
        st.holders.append(SlotRequest(holder=move.holder, key=move.to_key, limit=move.limit))
        st.granted_total += 1
        self._dirty = True

    @workflow.signal(name=SIGNAL_RELEASE)
    def release(self, rel: SlotRelease) -> None:
        st = self._state
        st.holders = [h for h in st.holders if not (h.holder == rel.holder and h.key == rel.key)]
        st.pending = [p for p in st.pending if not (p.holder == rel.holder and p.key == rel.key)]
        self._dirty = True

    @workflow.run
    async def run(self, state: SemaphoreState) -> None:
        started = True
        while True:
            # Cleared first: a signal arriving while grants are being told wakes the next round.
            self._dirty = False
            self._grant()
            if self._notify:
                # One ``slots_granted`` per run of the round, all in this task.
                runs: dict[str, list[str]] = {}
                for req in self._notify:
                    runs.setdefault(req.holder, []).append(req.key)
                self._notify = []
                await asyncio.gather(*(self._tell_run(holder, keys) for holder, keys in runs.items()))
            # Holders and waiters carry over.
            if rollover_due(started):
                break
            started = False
            if self._dirty:
                continue
            try:
                await workflow.wait_condition(lambda: self._dirty, timeout=IDLE_ROLLOVER)
            except TimeoutError:
                break
        await workflow.wait_condition(workflow.all_handlers_finished)
        # Waiters and holders carry over; the next run grants what is free.
        workflow.continue_as_new(
            self._state, initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
        )

    def _grant(self) -> None:
        st = self._state
        while st.pending and len(st.holders) < st.limit:
            req = st.pending.pop(0)
            st.holders.append(req)
            st.granted_total += 1
            self._notify.append(req)

    async def _tell_run(self, holder: str, keys: list[str]) -> None:
        try:
            await workflow.get_external_workflow_handle(holder).signal(SIGNAL_GRANTED_MANY, SlotGrants(keys=keys))
        except FailureError:
            workflow.logger.warning("run %s is gone; freeing its slots %s", holder, keys)
            for key in keys:
                self.release(SlotRelease(holder=holder, key=key))
