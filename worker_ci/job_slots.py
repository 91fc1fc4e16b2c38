"""One job-slot budget for a CI worker across the queues of all its label subsets.

A worker of labels ``L`` takes the jobs of every label set it holds all of (``runs-on: [a, b]``
runs on a worker of ``a, b, c``, as on GitHub), so it polls the queue of each non-empty subset
of ``L`` (``queues.ci_label_subsets``, at most ``MAX_CI_WORKER_LABELS`` labels): one Temporal
``Worker`` per queue, since a worker polls one queue. All of them draw their activity slots
from one ``SharedSlots`` supplier (a ``CustomSlotSupplier`` in each one's tuner), so the
process never runs more than ``ci_job_slots`` jobs whatever the queues they came from.

The engine's workers reserve a slot before each poll (a poll that gets a task must be able to
run it), so a slot is counted from its reservation to its release, and an idle poll holds one.
A worker with fewer free slots than queues therefore polls only that many queues at a time;
the others' pollers wait in line (first come, first served) and get the slot a poll gives
back when it ends empty (after the engine's long-poll timeout, about a minute) or a job ends.
Give a worker at least as many slots as queues (``2**n - 1`` for ``n`` labels) for every one
of them to be polled while it is idle.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter, deque
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

from temporalio.client import Client
from temporalio.worker import (
    CustomSlotSupplier,
    FixedSizeSlotSupplier,
    PollerBehaviorSimpleMaximum,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
    Worker,
    WorkerDeploymentConfig,
    WorkerTuner,
)

from workflows.queues import ci_label_subsets, ci_queue

# Pollers per queue at most (the SDK's default); fewer when slots are shared by many queues.
MAX_POLLERS_PER_QUEUE = 5


class _Permit(SlotPermit):
    """A permit, with the queue whose poll reserved it."""

    def __init__(self, queue: str) -> None:
        self.queue = queue


class SharedSlots(CustomSlotSupplier):
    """At most ``slots`` permits out at once across every worker that uses this supplier;
    reservations beyond that wait, first come first served.

    ``idle_per_queue``: at most this many permits of one queue reserved and not yet running a
    task (a poll waiting for one). The SDK reserves the next poll's permit before the current
    poll returns, so an idle queue otherwise holds two per poller; with image queues beside
    the label queues (``worker_ci.image_queues``) one is enough, and the rest stay free for
    the jobs image queues hand over (``take``)."""

    def __init__(self, slots: int, idle_per_queue: int | None = None) -> None:
        if slots < 1:
            raise ValueError("a slot budget needs at least one slot")
        self.slots = slots
        self.idle_per_queue = idle_per_queue
        self._lock = threading.Lock()
        self._out = 0
        self._used = 0
        self._idle: Counter[str] = Counter()
        self._waiters: deque[tuple[str, asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    @property
    def out(self) -> int:
        """Permits reserved or in use now."""
        return self._out

    @property
    def used(self) -> int:
        """Permits running a task now."""
        return self._used

    def _grantable(self, queue: str) -> bool:
        """Whether a reservation for ``queue`` may have a permit now (lock held)."""
        return self._out < self.slots and (self.idle_per_queue is None or self._idle[queue] < self.idle_per_queue)

    def _grant(self, queue: str) -> None:
        self._out += 1
        self._idle[queue] += 1

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:
        queue = getattr(ctx, "task_queue", "")
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._grantable(queue) and not any(q == queue or self._grantable(q) for q, _, _ in self._waiters):
                self._grant(queue)
                return _Permit(queue)
            future: asyncio.Future[None] = loop.create_future()
            entry = (queue, loop, future)
            self._waiters.append(entry)
        try:
            # A grant resolves this future with the permit already counted.
            await future
        except asyncio.CancelledError:
            with self._lock:
                try:
                    self._waiters.remove(entry)
                except ValueError:
                    # Granted just as we were cancelled: give it back, to the next in line.
                    self._out -= 1
                    self._idle[queue] -= 1
                    self._grant_waiting()
            raise
        return _Permit(queue)

    def try_reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit | None:
        queue = getattr(ctx, "task_queue", "")
        with self._lock:
            if self._grantable(queue) and not self._waiters:
                self._grant(queue)
                return _Permit(queue)
        return None

    def take(self) -> bool:
        """A permit for a job that came without one (an image queue's, ``worker_ci.image_queues``:
        those polls hold none), if one is free and no poller can use it; released with ``give``."""
        with self._lock:
            if self._out < self.slots and not any(self._grantable(q) for q, _, _ in self._waiters):
                self._out += 1
                self._used += 1
                return True
        return False

    def give(self) -> None:
        """Release a permit of ``take``."""
        with self._lock:
            self._used = max(0, self._used - 1)
            self._out -= 1
            self._grant_waiting()

    def mark_slot_used(self, ctx: SlotMarkUsedContext) -> None:
        with self._lock:
            self._used += 1
            self._idle[_queue_of(ctx.permit)] -= 1
            # The queue's next poll may reserve now (``idle_per_queue``).
            self._grant_waiting()

    def release_slot(self, ctx: SlotReleaseContext) -> None:
        with self._lock:
            if ctx.slot_info is not None:
                self._used = max(0, self._used - 1)
            else:
                self._idle[_queue_of(ctx.permit)] -= 1
            self._out -= 1
            self._grant_waiting()

    def _grant_waiting(self) -> None:
        """Permits to the oldest waiters that may have one (lock held)."""
        for entry in list(self._waiters):
            queue, loop, future = entry
            if future.done() or loop.is_closed():
                self._waiters.remove(entry)
                continue
            if self._out >= self.slots:
                return
            if self._grantable(queue):
                self._waiters.remove(entry)
                self._grant(queue)
                loop.call_soon_threadsafe(_resolve, future)


def _queue_of(permit: Any) -> str:
    return permit.queue if isinstance(permit, _Permit) else ""


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def shared_tuner(slots: SharedSlots) -> WorkerTuner:
    """A tuner whose activity slots come from ``slots`` (the job workers host no workflows)."""
    return WorkerTuner.create_composite(
        workflow_supplier=FixedSizeSlotSupplier(1),
        activity_supplier=slots,
        local_activity_supplier=FixedSizeSlotSupplier(1),
        nexus_supplier=FixedSizeSlotSupplier(1),
    )


def job_queues(labels: Sequence[str], prefix: str, isolation: str) -> list[str]:
    """The job queues a worker of ``labels`` polls: one per non-empty subset (its own set first)."""
    return [ci_queue(subset, prefix, isolation) for subset in ci_label_subsets(list(labels))]


def job_workers(
    client: Client,
    queues: Sequence[str],
    activities: Sequence[Any],
    slots: SharedSlots,
    executor: Executor,
    deployment_config: WorkerDeploymentConfig | None,
    pollers: int | None = None,
) -> list[Worker]:
    """One ``Worker`` per queue, all drawing on ``slots`` and running on ``executor``, each with
    ``pollers`` pollers (default: the slots shared out, at most ``MAX_POLLERS_PER_QUEUE``)."""
    if pollers is None:
        pollers = max(1, min(MAX_POLLERS_PER_QUEUE, slots.slots // len(queues)))
    return [
        Worker(
            client,
            task_queue=queue,
            activities=list(activities),
            activity_executor=executor,
            tuner=shared_tuner(slots),
            activity_task_poller_behavior=PollerBehaviorSimpleMaximum(pollers),
            deployment_config=deployment_config,
        )
        for queue in queues
    ]
