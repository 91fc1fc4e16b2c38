"""``SnapshotWriter``: how a workflow (a video job, a CI run or push) keeps its row of the read
model up to date without ever making its work wait for it.

Every transition calls ``changed()`` (a counter; no command). One background coroutine
writes the newest snapshot whenever something changed since the last write, with at most one
write in flight: a burst of transitions while a write runs costs one more write, not one
each. ``flush()`` writes what is left and returns once the read model holds the final state;
the workflow calls it on every way out. The version comes from the workflow's ``version()``,
taken in the same workflow task as the snapshot, so a later write always carries a larger one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError


class SnapshotWriter:
    """Coalesces a workflow's state changes into read-model writes, one at a time."""

    def __init__(
        self,
        write: Callable[[int], Awaitable[object]],
        what: str,
        version: Callable[[], int],
        pace: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        # ``write(version)`` schedules the projection activity with the state as it is now;
        # ``version()`` numbers it (it must grow within the execution). ``pace()``, awaited
        # before each write once something changed, may hold the write back (a minimum interval)
        # so the changes meanwhile join it; it must return at once when ``closing``.
        self._write = write
        self._pace = pace
        self._version = version
        self._what = what
        self._changes = 0
        self._written = 0
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    @property
    def closing(self) -> bool:
        """``flush()`` was called: the last write goes out without pacing."""
        return self._closing

    def changed(self) -> None:
        """The state moved on: the next write will carry it."""
        self._changes += 1

    def start(self) -> None:
        """Begin writing in the background (call once, from the workflow's run method)."""
        self._changes += 1  # the first snapshot is written at once
        self._task = asyncio.create_task(self._drain())

    async def flush(self) -> None:
        """Write what is not written yet and stop; returns once the last write ended."""
        self._closing = True
        task = self._task
        while task is not None and not task.done():
            try:
                # Shielded: a cancel of the workflow arriving now must not drop its final state.
                await asyncio.shield(task)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()

    async def _drain(self) -> None:
        while True:
            await workflow.wait_condition(lambda: self._changes > self._written or self._closing)
            if self._changes == self._written:
                return
            if self._pace is not None:
                await self._pace()
            target = self._changes
            try:
                await self._write(self._version())
            except ActivityError as err:
                # Retried with backoff until its schedule-to-close ran out: the database was
                # down that long. The next change writes the whole state again.
                workflow.logger.warning("read model write of %s failed: %s", self._what, err.cause or err)
            self._written = target
