"""Why is my job queued: what a CI job that has not started waits for.

Explained for the jobs of one run that are ``waiting``, ``awaiting_approval`` or ``queued``,
from the records the dispatcher itself acts on, never from a second bookkeeping:

* ``needs`` and ``max-parallel``: the run's own state (needs not final; a combination whose
  matrix job runs others first);
* an approval: the job is ``awaiting_approval`` (its environment is protected);
* a ``concurrency:`` group: the group workflow's ``state`` query (``GroupState``): the job (or,
  at workflow level, the whole run) is the group's pending member;
* the tenant's cap: the tenant semaphore's ``state`` query (``SemaphoreState``): ``holders`` of
  ``limit`` slots in use, and the job's place in ``pending``, which the semaphore grants first
  come, first served;
* a worker for its ``runs-on``: the job's activity goes to ``ci_queue(runs_on)``, a queue every
  CI worker that has all of the job's labels polls (a worker polls each subset of its labels).
  The semaphore grants no slot to a job whose queue no worker polls: such a job is told it
  waits for a worker and holds no slot, and the tenant's jobs behind it in ``pending`` are not
  told it is ahead of them (the semaphore grants past it). ``DescribeTaskQueue`` returns the pollers
  the engine's matching service saw on that queue within its poller TTL (about five minutes;
  a busy worker that stopped polling still counts until then, so a worker that died shows as
  serving for up to that long). The label sets offered as "served" are those of
  ``ci_queue_label_sets`` (the operator's worker pools; default the deployment's
  ``ci_labels``) and of the run's own jobs that have pollers: never another tenant's labels.

Cost: one request reads at most one semaphore, ``MAX_GROUPS`` groups and ``MAX_LABEL_SETS``
queues, all at once, each bounded by ``ENGINE_TIMEOUT``; every answer (a failure too) is kept
``ci_queue_cache_seconds`` per API process and shared by concurrent requests, so a page polled
by many clients costs the engine one read of each record per interval. Queue descriptions hold
no tenant data and are shared across tenants; the semaphore and group reads are keyed by the
caller's tenant (the run was loaded for that tenant, and their workflow ids embed it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final, TypeVar

from fastapi import Depends, Request
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from activities.ci.probe import has_pollers
from api.schemas.ci.runs import JobQueueOut, QueueBlockerOut, QueueReason
from leasehold.settings import Settings
from workflows.ci.concurrency import CIConcurrencyGroupWorkflow, group_workflow_id
from workflows.ci.ids import run_id_from_workflow_id, run_workflow_id
from workflows.ci.semaphore import CITenantSemaphoreWorkflow, semaphore_workflow_id
from workflows.ci.types.concurrency import GroupRequest, GroupState
from workflows.ci.types.run import JOB_FINAL_STATUSES, CIRunState, JobState, JobStatus, RunStatus
from workflows.ci.types.semaphore import SemaphoreState, SlotRequest
from workflows.queues import DEFAULT_CI_ISOLATION, ci_queue

log = logging.getLogger(__name__)

# Engine reads one request may make (distinct records; the rest are told as not known).
MAX_GROUPS = 4
MAX_LABEL_SETS = 8
# Each engine read gives up after this long: a page must answer even when a worker is down.
ENGINE_TIMEOUT = timedelta(seconds=2)
# Records kept per API process, whatever the number of tenants asking.
MAX_CACHED = 4096
# Jobs a waiting job's message names (the ``needs`` field lists all).
MAX_NAMED = 5

NOT_STARTED = frozenset({JobStatus.WAITING, JobStatus.AWAITING_APPROVAL, JobStatus.QUEUED})


class Unavailable:
    """An engine read that failed or timed out (kept like an answer, so an outage is not hammered)."""

    def __repr__(self) -> str:
        return "UNAVAILABLE"


UNAVAILABLE: Final = Unavailable()
T = TypeVar("T")


class TtlCache:
    """Answers kept ``ttl`` seconds; concurrent asks for a key share one load in flight."""

    def __init__(self, ttl: float, max_entries: int = MAX_CACHED) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: dict[str, tuple[float, asyncio.Future[Any]]] = {}

    async def get(self, key: str, load: Callable[[], Awaitable[T]]) -> T:
        now = time.monotonic()
        hit = self._entries.get(key)
        if hit is not None and (now - hit[0] < self.ttl or not hit[1].done()):
            return await asyncio.shield(hit[1])
        future: asyncio.Future[Any] = asyncio.ensure_future(load())
        self._entries.pop(key, None)
        self._entries[key] = (now, future)
        while len(self._entries) > self.max_entries:
            # Oldest first (insertion order): a new load always re-inserts its key at the end.
            self._entries.pop(next(iter(self._entries)))
        # Shielded: a caller that goes away does not cancel a load others wait for.
        return await asyncio.shield(future)


@dataclass
class Facts:
    """What the engine said for one run, read once per request."""

    semaphore: SemaphoreState | Unavailable | None = UNAVAILABLE
    groups: dict[str, GroupState | Unavailable | None] = field(default_factory=dict)
    # Label set (sorted, deduplicated) -> whether any worker polls its queue.
    served: dict[tuple[str, ...], bool | Unavailable] = field(default_factory=dict)
    # Label sets offered as served (the deployment's and the run's own).
    candidates: list[tuple[str, ...]] = field(default_factory=list)
    # Queues no worker polls: those of label sets described without pollers, and those the
    # tenant's semaphore found so (it grants their requests nothing).
    unserved_queues: set[str] = field(default_factory=set)
    # Label set -> its queue name (this deployment's prefix, the run's isolation).
    queue_names: dict[tuple[str, ...], str] = field(default_factory=dict)

    def waits_unserved(self, req: SlotRequest) -> bool:
        """A semaphore request the semaphore passes over: its queue has no worker."""
        return bool(req.queue) and req.queue in self.unserved_queues

    def job_unserved(self, job: JobState) -> bool:
        """The job's labels are known to have no worker."""
        labels = label_set(job.runs_on)
        return self.served.get(labels) is False or self.queue_names.get(labels) in self.unserved_queues


def label_set(labels: Iterable[str]) -> tuple[str, ...]:
    """A runs-on label set as its queue sees it: order and repeats do not matter."""
    return tuple(sorted(set(labels)))


def concrete(labels: list[str]) -> bool:
    """Labels the run has evaluated (a matrix ``${{ }}`` label is known once the job is queued)."""
    return bool(labels) and not any("${{" in label for label in labels)


class QueueExplainer:
    """Reads and caches the engine's records behind "why is my job queued" (one per API process)."""

    def __init__(self, client: Client, settings: Settings) -> None:
        self.client = client
        self.prefix = settings.queue_prefix
        self.cache = TtlCache(settings.ci_queue_cache_seconds)
        sets = [s.split("+") for s in settings.ci_queue_label_sets] or [settings.ci_labels]
        self.deployment_sets = [label_set(s) for s in sets if any(x.strip() for x in s)]

    # Engine reads ----------------------------------------------------------------------------

    async def semaphore(self, tenant_id: str) -> SemaphoreState | Unavailable | None:
        """The tenant's cap as its semaphore holds it; ``None``: no semaphore (nothing ever waited)."""
        return await self.cache.get(f"sem:{tenant_id}", lambda: self._read_semaphore(tenant_id))

    async def _read_semaphore(self, tenant_id: str) -> SemaphoreState | Unavailable | None:
        handle = self.client.get_workflow_handle_for(CITenantSemaphoreWorkflow.run, semaphore_workflow_id(tenant_id))
        try:
            return await handle.query(CITenantSemaphoreWorkflow.state, rpc_timeout=ENGINE_TIMEOUT)
        except (RPCError, WorkflowQueryFailedError, TimeoutError) as exc:
            return self._failed(exc, f"tenant semaphore of {tenant_id}")

    async def group(self, tenant_id: str, group: str) -> GroupState | Unavailable | None:
        """A concurrency group of the tenant; ``None``: the group is not running (nobody in it)."""
        wid = group_workflow_id(tenant_id, group)
        return await self.cache.get(f"group:{wid}", lambda: self._read_group(wid))

    async def _read_group(self, wid: str) -> GroupState | Unavailable | None:
        handle = self.client.get_workflow_handle_for(CIConcurrencyGroupWorkflow.run, wid)
        try:
            return await handle.query(CIConcurrencyGroupWorkflow.state, rpc_timeout=ENGINE_TIMEOUT)
        except (RPCError, WorkflowQueryFailedError, TimeoutError) as exc:
            return self._failed(exc, f"concurrency group {wid}")

    async def served(self, labels: tuple[str, ...], isolation: str = DEFAULT_CI_ISOLATION) -> bool | Unavailable:
        """Whether a CI worker (of the sandbox backend ``isolation``) polled the queue of this
        label set within the engine's poller TTL."""
        queue = ci_queue(labels, self.prefix, isolation)
        return await self.cache.get(f"queue:{queue}", lambda: self._read_served(queue))

    async def _read_served(self, queue: str) -> bool | Unavailable:
        try:
            # The same question the tenant semaphore asks before it grants a slot.
            return await has_pollers(self.client, queue, ENGINE_TIMEOUT)
        except RPCError as exc:
            # A queue nobody ever used is described as empty, not missing: any error is a failure.
            self._failed(exc, f"queue {queue}")
            return UNAVAILABLE

    def _failed(self, exc: BaseException, what: str) -> Unavailable | None:
        if isinstance(exc, RPCError) and exc.status == RPCStatusCode.NOT_FOUND:
            return None
        log.warning("queue explanation: reading %s failed: %s", what, getattr(exc, "status", type(exc).__name__))
        return UNAVAILABLE

    # Explanations ----------------------------------------------------------------------------

    async def explain(self, state: CIRunState, only: str | None = None) -> dict[str, JobQueueOut]:
        """The explanation of each job of ``state`` that has not started (or of job ``only``),
        by job id."""
        if state.status not in (RunStatus.QUEUED, RunStatus.IN_PROGRESS) or state.finished_at is not None:
            return {}
        jobs = [j for j in state.jobs if j.status in NOT_STARTED and only in (None, j.job_id)]
        if not jobs:
            return {}
        facts = await self._gather(state, jobs)
        checked_at = datetime.now(UTC)
        return {j.job_id: explain_job(state, j, facts, checked_at) for j in jobs}

    async def _gather(self, state: CIRunState, jobs: list[JobState]) -> Facts:
        facts = Facts()
        tenant = state.tenant_id
        reads: list[Awaitable[None]] = []

        if any(j.status == JobStatus.QUEUED for j in jobs):

            async def read_semaphore() -> None:
                facts.semaphore = await self.semaphore(tenant)

            reads.append(read_semaphore())

        groups: list[str] = []
        if run_waits_for_group(state):
            assert state.concurrency_group is not None
            groups.append(state.concurrency_group)
        for j in jobs:
            if j.status == JobStatus.QUEUED and j.concurrency_group and j.concurrency_group not in groups:
                groups.append(j.concurrency_group)
        for group in groups[:MAX_GROUPS]:

            async def read_group(group: str = group) -> None:
                facts.groups[group] = await self.group(tenant, group)

            reads.append(read_group())

        own = [label_set(j.runs_on) for j in jobs if concrete(j.runs_on)]
        wanted = list(dict.fromkeys([*own, *self.deployment_sets]))[:MAX_LABEL_SETS]
        facts.candidates = wanted
        for labels in wanted:

            async def read_served(labels: tuple[str, ...] = labels) -> None:
                facts.served[labels] = await self.served(labels, state.isolation)

            reads.append(read_served())

        await asyncio.gather(*(_guarded(r) for r in reads))
        facts.queue_names = {ls: ci_queue(ls, self.prefix, state.isolation) for ls in wanted}
        facts.unserved_queues = {facts.queue_names[ls] for ls, v in facts.served.items() if v is False}
        if isinstance(facts.semaphore, SemaphoreState):
            facts.unserved_queues.update(facts.semaphore.unserved)
        return facts


def run_waits_for_group(state: CIRunState) -> bool:
    """A workflow-level group holds the run back until granted: no job has been queued yet."""
    return (
        state.concurrency_group is not None
        and state.status == RunStatus.QUEUED
        and all(j.status == JobStatus.WAITING for j in state.jobs)
    )


def explain_job(state: CIRunState, job: JobState, facts: Facts, checked_at: datetime) -> JobQueueOut:
    """What ``job`` (not started) waits for, from the run's state and what the engine said."""
    holder = run_workflow_id(state.run_id)
    key = f"{job.job_id}#{job.round}"
    # The semaphore counts a slot handed over within the run under the key it granted.
    slot_key = job.slot_key or key
    blockers: list[QueueBlockerOut] = []
    out = JobQueueOut(
        reason=QueueReason.UNKNOWN,
        message="",
        labels=list(job.runs_on),
        environment=job.environment,
        concurrency_group=job.concurrency_group,
        checked_at=checked_at,
    )

    if job.status == JobStatus.WAITING:
        blockers += _waiting_blockers(state, job, facts, out)
    elif job.status == JobStatus.AWAITING_APPROVAL:
        blockers += _approval_blockers(job)
    else:
        blockers += _queued_blockers(state, job, facts, out, holder, key, slot_key)
    blockers += _worker_blockers(job, facts, out, blockers)

    if not blockers:
        unknown = "the engine did not answer in time; ask again in a moment"
        blockers.append(QueueBlockerOut(reason=QueueReason.UNKNOWN, message=unknown))
    out.waiting_for = blockers
    out.reason, out.message = blockers[0].reason, blockers[0].message
    return out


def _waiting_blockers(state: CIRunState, job: JobState, facts: Facts, out: JobQueueOut) -> list[QueueBlockerOut]:
    """What a job waiting inside its run waits for: the run's group, its needs, or its matrix."""
    blockers: list[QueueBlockerOut] = []
    if run_waits_for_group(state):
        assert state.concurrency_group is not None
        out.concurrency_group = state.concurrency_group
        message = _group_message(
            facts.groups.get(state.concurrency_group, UNAVAILABLE), state.concurrency_group, "the run"
        )
        blockers.append(QueueBlockerOut(reason=QueueReason.CONCURRENCY_GROUP, message=message))
    unfinished = [n for n in job.needs if (need := state.job(n)) is None or need.status not in JOB_FINAL_STATUSES]
    out.needs = unfinished
    if unfinished:
        named = ", ".join(f"{n} ({_status_of(state, n)})" for n in unfinished[:MAX_NAMED])
        more = f" and {len(unfinished) - MAX_NAMED} more" if len(unfinished) > MAX_NAMED else ""
        blockers.append(QueueBlockerOut(reason=QueueReason.NEEDS, message=f"waiting for {named}{more}"))
    elif job.matrix_of and not blockers:
        blockers.append(
            QueueBlockerOut(
                reason=QueueReason.MAX_PARALLEL,
                message=f"waiting for other combinations of {job.matrix_of} to finish (max-parallel)",
            )
        )
    elif not blockers:
        blockers.append(QueueBlockerOut(reason=QueueReason.STARTING, message="ready; the run is queueing it"))
    return blockers


def _approval_blockers(job: JobState) -> list[QueueBlockerOut]:
    """A job held for a deployment's approval."""
    blockers: list[QueueBlockerOut] = []
    env = job.environment or "its environment"
    blockers.append(
        QueueBlockerOut(
            reason=QueueReason.APPROVAL,
            message=f"waiting for an approval to deploy to {env!r} (POST .../approve or .../reject)",
        )
    )
    return blockers


def _queued_blockers(
    state: CIRunState, job: JobState, facts: Facts, out: JobQueueOut, holder: str, key: str, slot_key: str
) -> list[QueueBlockerOut]:
    """What a job the run has queued waits for: its concurrency group, then a slot of the cap."""
    blockers: list[QueueBlockerOut] = []
    in_group_queue = False
    # Let in by its group (or it has none): what it asks for next is a slot.
    admitted = not job.concurrency_group
    if job.concurrency_group:
        group = facts.groups.get(job.concurrency_group, UNAVAILABLE)
        admitted = isinstance(group, GroupState) and _same(group.running, holder, key)
        if isinstance(group, GroupState) and _same(group.pending, holder, key):
            in_group_queue = True
            blockers.append(
                QueueBlockerOut(
                    reason=QueueReason.CONCURRENCY_GROUP,
                    message=_group_message(group, job.concurrency_group, "this job"),
                )
            )
    sem = facts.semaphore
    if job.run_slot_wait and facts.job_unserved(job):
        # It would ask for a slot only to get none until a worker polls its queue (told by
        # ``_worker_blockers``); the tenant's slots in use are still worth showing.
        if isinstance(sem, SemaphoreState):
            out.slots_in_use, out.slot_limit = len(sem.holders), sem.limit
    elif job.run_slot_wait:
        # Its run holds or has asked for as many slots as the cap leaves it: the job takes the
        # next slot a job of the run gives back, after the run's requests still waiting in the
        # tenant's queue (and every job ahead of those) and the run's jobs queued before it.
        ahead = _run_queue_place(state, job)
        in_use = ""
        if isinstance(sem, SemaphoreState):
            out.slots_in_use, out.slot_limit = len(sem.holders), sem.limit
            in_use = f" ({len(sem.holders)} of {sem.limit} slots in use)"
            mine = [i for i, r in enumerate(sem.pending) if r.holder == holder]
            ahead += mine[-1] + 1 if mine else 0
        out.position, out.ahead = ahead + 1, ahead
        where = "next in line" if ahead == 0 else f"{ahead} of your jobs ahead of it"
        message = f"waiting for a slot of your tenant's cap{in_use}: the next one its run gives back; {where}"
        blockers.append(QueueBlockerOut(reason=QueueReason.TENANT_CAP, message=message))
    elif isinstance(sem, SemaphoreState):
        out.slots_in_use, out.slot_limit = len(sem.holders), sem.limit
        place = next((i for i, r in enumerate(sem.pending) if r.holder == holder and r.key == slot_key), None)
        if place is not None and facts.job_unserved(job):
            # Passed over until a worker polls its queue (told by ``_worker_blockers``).
            pass
        elif place is not None:
            # Requests for queues nobody serves are granted nothing: they are not ahead of it.
            place = sum(1 for r in sem.pending[:place] if not facts.waits_unserved(r))
            out.position, out.ahead = place + 1, place
            blockers.append(QueueBlockerOut(reason=QueueReason.TENANT_CAP, message=_cap_message(sem, place, holder)))
        elif not in_group_queue and not any(h.holder == holder and h.key == slot_key for h in sem.holders):
            # Neither waiting nor holding: its request (or its grant) is in flight right now,
            # to its concurrency group first when it has one that has not let it in yet.
            in_use = f"{len(sem.holders)} of {sem.limit} slots of your tenant in use"
            asking = (
                f"asking for a slot ({in_use})"
                if admitted
                else f"asking for its place in concurrency group {job.concurrency_group!r} ({in_use})"
            )
            blockers.append(QueueBlockerOut(reason=QueueReason.STARTING, message=asking))
        elif in_group_queue and len(sem.holders) >= sem.limit:
            # It asks for a slot once its group lets it in; the cap is full meanwhile.
            blockers.append(
                QueueBlockerOut(
                    reason=QueueReason.TENANT_CAP,
                    message=f"then a slot: {len(sem.holders)} of {sem.limit} slots of your tenant in use",
                )
            )
    return blockers


def _worker_blockers(
    job: JobState, facts: Facts, out: JobQueueOut, before: list[QueueBlockerOut]
) -> list[QueueBlockerOut]:
    """Where it will run, for every job not started (a queued one waits for a worker last, when
    nothing in ``before`` holds it)."""
    blockers: list[QueueBlockerOut] = []
    if concrete(job.runs_on):
        labels = label_set(job.runs_on)
        served = facts.served.get(labels, UNAVAILABLE)
        out.labels_served = served if isinstance(served, bool) else None
        out.served_labels = [list(s) for s in facts.candidates if facts.served.get(s) is True]
        if served is False:
            offered = "; ".join("[" + ", ".join(s) + "]" for s in out.served_labels) or "none"
            # A queued job asks for a slot only to get none until a worker polls its queue.
            holds = " (it holds no slot of your tenant's cap until one does)" if job.status == JobStatus.QUEUED else ""
            blockers.append(
                QueueBlockerOut(
                    reason=QueueReason.NO_WORKER,
                    message=f"no worker serves runs-on [{', '.join(labels)}]{holds}; label sets served: {offered}",
                )
            )
        elif job.status == JobStatus.QUEUED and not before and served is True:
            blockers.append(
                QueueBlockerOut(
                    reason=QueueReason.WORKER,
                    message=f"waiting for a free worker serving [{', '.join(labels)}]",
                )
            )
    return blockers


def _group_message(group: GroupState | Unavailable | None, name: str, who: str) -> str:
    if isinstance(group, GroupState) and group.running is not None:
        run = run_id_from_workflow_id(group.running.holder) or "another run"
        member = "" if group.running.key.startswith("@run#") else f" (job {group.running.key.split('#')[0]})"
        return f"{who} waits in concurrency group {name!r}: {run}{member} is running in it"
    return f"{who} waits for its place in concurrency group {name!r}"


async def _guarded(read: Awaitable[None]) -> None:
    # An explanation is an extra: a read that fails in a way not foreseen leaves its fact
    # unknown (the job says so) instead of failing the page it is part of.
    try:
        await read
    except Exception:
        log.exception("queue explanation: an engine read failed")


def _status_of(state: CIRunState, job_id: str) -> str:
    job = state.job(job_id)
    return job.status.value if job is not None else "unknown"


def _same(member: GroupRequest | None, holder: str, key: str) -> bool:
    return member is not None and member.holder == holder and member.key == key


def _run_queue_place(state: CIRunState, job: JobState) -> int:
    """How many of the run's jobs wait in its own slot queue ahead of ``job`` (queued earlier)."""
    index = state.jobs.index(job)
    at = job.queued_at
    return sum(
        1
        for i, other in enumerate(state.jobs)
        if other.run_slot_wait
        and other is not job
        and (
            (other.queued_at is not None and at is not None and other.queued_at < at)
            or (other.queued_at == at and i < index)
        )
    )


def _cap_message(sem: SemaphoreState, place: int, holder: str) -> str:
    in_use = f"{len(sem.holders)} of {sem.limit} slots in use"
    where = "next in line" if place == 0 else f"{place} of your jobs ahead of it"
    message = f"waiting for a slot of your tenant's cap ({in_use}); {where}"
    others = {h.holder for h in sem.holders if h.holder != holder}
    if others and len(sem.holders) >= sem.limit:
        # Their own queued jobs (not in this queue) take those slots before they come back.
        runs = "another run holds" if len(others) == 1 else f"{len(others)} other runs hold"
        theirs = "keeps them for its" if len(others) == 1 else "keep them for their"
        message += f"; {runs} slots and {theirs} own queued jobs first"
    return message


async def get_queue_explainer(request: Request) -> QueueExplainer:
    """The process's explainer (created when the app starts, ``api.ci.startup``)."""
    return request.app.state.ci_queue_explainer


QueueExplainerDep = Annotated[QueueExplainer, Depends(get_queue_explainer)]
