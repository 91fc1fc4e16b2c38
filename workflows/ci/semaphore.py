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

A slot goes only to a job that a live CI worker can take: each request names its job's task
queue, and a request whose queue no worker polls holds nothing and waits, while the tenant's
later requests for served queues are granted past it (so a label nobody serves never blocks
the tenant's other jobs; its run is told, ``slots_unserved``, so the request stops counting
against the run's own share of the cap). Whether a queue is served comes from the ``ci_served_queues`` activity
(``DescribeTaskQueue`` on the CI workers' probe queue), asked only for queues not found served
in the last ``SERVED_FRESH`` and only while a slot is free: a tenant busy on served labels
pays one probe a minute per queue, not one per job. A probe nobody answers (no CI worker of
this build is up: during a rollout the older CI workers serve no probe queue) grants as an
older build did, rather than stall every capped job. An unserved queue is asked again every
``UNSERVED_RECHECK_MIN`` to ``UNSERVED_RECHECK_MAX`` (longer the longer it stays unserved), so
its jobs start within seconds of a worker appearing; a request still unserved after
``unserved_expiry_seconds`` (a day, as long as a job's activity once waited for a worker) is
dropped and its run told (``slots_expired``), and the job fails.

The workflow lives as long as the tenant uses CI and continues as new before its history
grows large, carrying holders and waiters.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, FailureError

with workflow.unsafe.imports_passed_through():
    from activities.ci.definitions import CIProbeDefinition
    from workflows.ci.types.semaphore import (
        SemaphoreState,
        ServedQueuesInput,
        SlotGrants,
        SlotRelease,
        SlotReleases,
        SlotRequest,
        SlotRequests,
        SlotTransfer,
    )
    from workflows.queues import CI_PROBE_RETRY, CI_PROBE_TIMEOUT

SEMAPHORE_PREFIX = "ci-tenant-sem:"
SIGNAL_ACQUIRE = "acquire"
SIGNAL_RELEASE = "release"
SIGNAL_TRANSFER = "transfer"
SIGNAL_ACQUIRE_MANY = "acquire_many"
SIGNAL_RELEASE_MANY = "release_many"
SIGNAL_GRANTED_MANY = "slots_granted"
# To a run: its requests whose queue no worker polls (they wait, and count against nothing).
SIGNAL_UNSERVED = "slots_unserved"
# To a run: its requests dropped after waiting ``unserved_expiry_seconds`` on an unserved queue.
SIGNAL_EXPIRED = "slots_expired"
# Continue as new past this many history events (each grant costs a few).
MAX_HISTORY_EVENTS = 2000
# An idle semaphore still continues as new now and then, so its history stays short.
IDLE_ROLLOVER = timedelta(hours=6)
# A queue found polled is taken as served this long without asking again.
SERVED_FRESH = timedelta(seconds=60)
# How often a queue found unpolled is asked again: a tenth of how long it has been unserved,
# within these bounds.
UNSERVED_RECHECK_MIN = timedelta(seconds=2)
UNSERVED_RECHECK_MAX = timedelta(seconds=60)
# Most queues one probe asks about (the rest wait for the next probe).
MAX_PROBED_QUEUES = 32


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
        if not state.probe_queue:
            # Started by a run with its first requests: they name where to ask.
            state.probe_queue = next((r.probe_queue for r in state.pending if r.probe_queue), "")
        self._dirty = False
        # Grants to signal to their runs (signal handlers cannot await).
        self._notify: list[SlotRequest] = []
        # Requests found waiting on an unserved queue, to tell their runs (once each).
        self._unserved: list[SlotRequest] = []
        # Requests dropped for waiting too long on an unserved queue, to tell their runs.
        self._expired: list[SlotRequest] = []

    @workflow.query
    def state(self) -> SemaphoreState:
        return self._state

    @workflow.signal(name=SIGNAL_ACQUIRE)
    def acquire(self, req: SlotRequest) -> None:
        st = self._state
        st.limit = max(1, req.limit)
        if req.probe_queue:
            st.probe_queue = req.probe_queue
        if req.asked_at is None:
            req.asked_at = workflow.now()
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
            ask = self._grant()
            if self._notify or self._unserved or self._expired:
                # One ``slots_granted`` (and one ``slots_unserved``, ``slots_expired``) per run of
                # the round, all in this task.
                granted, self._notify = _by_run(self._notify), []
                unserved, self._unserved = _by_run(self._unserved), []
                expired, self._expired = _by_run(self._expired), []
                await asyncio.gather(
                    *(self._tell_run(holder, keys) for holder, keys in granted.items()),
                    *(self._tell(SIGNAL_UNSERVED, holder, keys) for holder, keys in unserved.items()),
                    *(self._tell(SIGNAL_EXPIRED, holder, keys) for holder, keys in expired.items()),
                )
            if ask:
                # Waiters whose queues nobody was known to poll: ask, then grant again.
                await self._probe(ask)
                continue
            # Holders and waiters carry over.
            if rollover_due(started):
                break
            started = False
            if self._dirty:
                continue
            recheck = self._next_recheck()
            try:
                await workflow.wait_condition(lambda: self._dirty, timeout=min(IDLE_ROLLOVER, recheck))
            except TimeoutError:
                if recheck < IDLE_ROLLOVER:
                    continue
                break
        await workflow.wait_condition(workflow.all_handlers_finished)
        # Waiters and holders carry over; the next run grants what is free.
        workflow.continue_as_new(
            self._state, initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
        )

    def _grant(self) -> list[str]:
        """Grant free slots to waiters whose queue is served, first come first served; the
        queues to ask about before their waiters can be granted (only while a slot is free)."""
        st = self._state
        now = workflow.now()
        ask: list[str] = []
        waiting: list[SlotRequest] = []
        for req in st.pending:
            served = self._served(req.queue, now)
            if served is False and len(st.holders) < st.limit and self._expires(req, now):
                # Found unserved by a fresh probe, with a slot free for it all the same.
                self._expired.append(req)
                continue
            if len(st.holders) >= st.limit:
                waiting.append(req)
                if served is False:
                    self._tell_unserved_once(req)
                continue
            if served:
                st.holders.append(req)
                st.granted_total += 1
                self._notify.append(req)
                continue
            waiting.append(req)
            if served is None and req.queue not in ask:
                ask.append(req.queue)
            elif served is False:
                self._tell_unserved_once(req)
        st.pending = waiting
        return ask[:MAX_PROBED_QUEUES] if st.probe_queue else []

    def _tell_unserved_once(self, req: SlotRequest) -> None:
        """Have its run stop counting this request against its own share of the cap."""
        if not req.told_unserved:
            req.told_unserved = True
            self._unserved.append(req)

    def _served(self, queue: str, now: datetime) -> bool | None:
        """Whether a worker polls ``queue`` as far as this workflow knows; ``None``: ask."""
        st = self._state
        if not queue or not st.probe_queue:
            # A request of an older build (or no probe queue known): granted without asking.
            return True
        seen = st.served.get(queue)
        if seen is not None and now - seen < SERVED_FRESH:
            return True
        since, probed = st.unserved.get(queue), st.probed.get(queue)
        if since is not None and probed is not None and now - probed < _recheck_interval(now - since):
            return False
        return None

    def _next_recheck(self) -> timedelta:
        """How long until an unserved waiter's queue is due to be asked again (only while a slot
        is free: a release wakes the workflow anyway)."""
        st = self._state
        if len(st.holders) >= st.limit:
            return IDLE_ROLLOVER
        now = workflow.now()
        due = [
            st.probed[q] + _recheck_interval(now - st.unserved[q]) - now
            for q in {r.queue for r in st.pending}
            if q in st.unserved and q in st.probed
        ]
        return max(min(due), timedelta(milliseconds=100)) if due else IDLE_ROLLOVER

    async def _probe(self, queues: list[str]) -> None:
        st = self._state
        try:
            answer = await workflow.execute_activity_method(
                CIProbeDefinition.served_queues,
                ServedQueuesInput(queues=queues),
                task_queue=st.probe_queue,
                schedule_to_close_timeout=CI_PROBE_TIMEOUT,
                retry_policy=CI_PROBE_RETRY,
            )
            served = set(answer.served)
        except ActivityError as err:
            # No CI worker took the probe in time: none of this build is up (CI workers of an
            # older build, during a rollout, serve no probe queue). Grant as an older build did
            # rather than stall every capped job; asked again after SERVED_FRESH.
            workflow.logger.warning("probe of %s not answered (%s): granting without it", queues, err.cause)
            served = set(queues)
        now = workflow.now()
        st.probes_total += 1
        for q in queues:
            if q in served:
                st.served[q] = now
                st.unserved.pop(q, None)
                st.probed.pop(q, None)
            else:
                st.served.pop(q, None)
                st.unserved.setdefault(q, now)
                st.probed[q] = now
        # Forget queues no waiter names (bounded state across continue-as-new).
        wanted = {r.queue for r in st.pending} | {r.queue for r in st.holders}
        st.served = {q: t for q, t in st.served.items() if q in wanted or now - t < SERVED_FRESH}
        st.unserved = {q: t for q, t in st.unserved.items() if q in wanted}
        st.probed = {q: t for q, t in st.probed.items() if q in st.unserved}

    def _expires(self, req: SlotRequest, now: datetime) -> bool:
        """Whether the request has waited on an unserved queue for ``unserved_expiry_seconds``."""
        since = self._state.unserved.get(req.queue)
        if since is None or not req.queue:
            return False
        waited = now - max(since, req.asked_at or since)
        return waited.total_seconds() >= self._state.unserved_expiry_seconds

    async def _tell(self, signal: str, holder: str, keys: list[str]) -> None:
        try:
            await workflow.get_external_workflow_handle(holder).signal(signal, SlotGrants(keys=keys))
        except FailureError:
            # Gone: an unserved request is dropped with its grant or release (an expired one is).
            workflow.logger.warning("run %s is gone; not told %s of %s", holder, signal, keys)

    async def _tell_run(self, holder: str, keys: list[str]) -> None:
        try:
            await workflow.get_external_workflow_handle(holder).signal(SIGNAL_GRANTED_MANY, SlotGrants(keys=keys))
        except FailureError:
            workflow.logger.warning("run %s is gone; freeing its slots %s", holder, keys)
            for key in keys:
                self.release(SlotRelease(holder=holder, key=key))


def _recheck_interval(unserved_for: timedelta) -> timedelta:
    return min(UNSERVED_RECHECK_MAX, max(UNSERVED_RECHECK_MIN, unserved_for / 10))


def _by_run(reqs: list[SlotRequest]) -> dict[str, list[str]]:
    runs: dict[str, list[str]] = {}
    for req in reqs:
        runs.setdefault(req.holder, []).append(req.key)
    return runs
