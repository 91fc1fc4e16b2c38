"""Job roots are emptied after the attempt's result is on its way, off the job's critical path.

Emptying a job root is the job-side helper's work, run as the job's uid in a sandbox of its own
(the root rule; ``JobRoot.remove``): a sandbox start and a walk, some 40 ms for a small job. A
run's next job waits on the result, not on that, so the reaper does it on a thread of its own
while the job's uid stays leased (no other attempt gets the uid, or the files, until the root
is gone). At most ``backlog`` roots wait; past that an attempt empties its own root before it
returns, so a worker that finishes jobs faster than it can clean them slows down rather than
fill its disk. A worker that stops drains the reaper; one that is killed leaves roots for the
next worker's start-up sweep, as a job killed mid-run does.
"""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path
from typing import Protocol

from activities.ci.jobroot import JobRoot

log = logging.getLogger(__name__)


class Releases(Protocol):
    def release(self, root: Path) -> None: ...


class RootReaper:
    """Empties job roots in the background, then gives their uid back to the sandbox."""

    def __init__(self, sandbox: Releases, backlog: int) -> None:
        self._sandbox = sandbox
        self._backlog = max(0, backlog)
        self._queue: queue.SimpleQueue[JobRoot] = queue.SimpleQueue()
        self._pending = 0
        self._done = threading.Condition()
        self._thread: threading.Thread | None = None

    def dispose(self, tree: JobRoot) -> None:
        """Empty ``tree`` and release its uid: later, or now when the backlog is full."""
        with self._done:
            inline = self._pending >= self._backlog
            if not inline:
                self._pending += 1
                if self._thread is None:
                    self._thread = threading.Thread(target=self._loop, name="ci-root-reaper", daemon=True)
                    self._thread.start()
        if inline:
            self._reap(tree)
        else:
            self._queue.put(tree)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every root handed over is gone; ``False`` if some are left at ``timeout``."""
        with self._done:
            return self._done.wait_for(lambda: self._pending == 0, timeout)

    def _loop(self) -> None:
        while True:
            tree = self._queue.get()
            try:
                self._reap(tree)
            finally:
                with self._done:
                    self._pending -= 1
                    self._done.notify_all()

    def _reap(self, tree: JobRoot) -> None:
        try:
            tree.remove()
        except Exception:  # the next start-up sweep retries what is left
            log.exception("could not remove the job root %s", tree.path)
        finally:
            self._sandbox.release(tree.path)
