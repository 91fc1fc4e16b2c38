"""Live progress of running jobs: the engine's DescribeWorkflowExecution, at most once a second per job.

The read model holds what a job *is* and how it ended; how far a running generation got lives
only in its pending activity's heartbeat details, which the read model does not copy (they
change every second and would cost a write each). So a read of an ``in_progress`` job asks
the engine, through this cache: one describe per job per ``ttl`` in this process, whatever the
number of readers, and concurrent readers await the same describe (single flight). A describe
that fails tells nothing; the row then answers alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from prometheus_client import Counter
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from api.errors import is_not_found
from api.video.views import PendingGeneration, pending_generation
from workflows.video.ids import workflow_id

log = logging.getLogger(__name__)

DESCRIBES = Counter("leasehold_video_live_describes_total", "DescribeWorkflowExecution calls for live video progress")

# How long one describe answers for a job: the bound of one describe per job per second.
LIVE_TTL_SECONDS = 1.0
DESCRIBE_TIMEOUT = timedelta(seconds=5)
# Entries older than the TTL are dropped once the cache holds more than this many jobs.
MAX_ENTRIES = 10_000
# Describes in flight at once from this process (a listing page of running jobs asks for many).
MAX_CONCURRENT_DESCRIBES = 16


@dataclass(frozen=True)
class LiveJob:
    """What the engine said about a job's execution at one moment."""

    # ``None`` when the engine no longer has the execution (the read model's row then stands).
    status: WorkflowExecutionStatus | None
    generation: PendingGeneration | None
    # When the execution closed, if it did.
    closed_at: datetime | None = None


@dataclass
class _Entry:
    asked_at: float
    answer: asyncio.Future[LiveJob | None]


class LiveProgress:
    """The process's cache of describes of running video jobs."""

    def __init__(self, client: Client, ttl: float = LIVE_TTL_SECONDS) -> None:
        self._client = client
        self._ttl = ttl
        self._entries: dict[str, _Entry] = {}
        self._gate = asyncio.Semaphore(MAX_CONCURRENT_DESCRIBES)

    async def of(self, job_id: str) -> LiveJob | None:
        """The engine's view of ``job_id`` at most ``ttl`` old; ``None`` when it could not be asked."""
        now = time.monotonic()
        entry = self._entries.get(job_id)
        if entry is None or now - entry.asked_at >= self._ttl:
            entry = _Entry(now, asyncio.ensure_future(self._describe(job_id)))
            self._entries[job_id] = entry
            self._prune(now)
        # Shielded: a reader that goes away must not cancel the describe others are awaiting.
        return await asyncio.shield(entry.answer)

    async def _describe(self, job_id: str) -> LiveJob | None:
        try:
            async with self._gate:
                DESCRIBES.inc()
                handle = self._client.get_workflow_handle(workflow_id(job_id))
                desc = await handle.describe(rpc_timeout=DESCRIBE_TIMEOUT)
        except RPCError as exc:
            if is_not_found(exc):
                return LiveJob(status=None, generation=None)
            log.info("describe of %s failed (%s); answering from the read model", job_id, exc.status)
            return None
        except Exception:
            log.exception("describe of %s failed; answering from the read model", job_id)
            return None
        generation = await pending_generation(self._client.data_converter, desc)
        return LiveJob(desc.status, generation, desc.close_time)

    def _prune(self, now: float) -> None:
        if len(self._entries) <= MAX_ENTRIES:
            return
        stale = [job for job, entry in self._entries.items() if now - entry.asked_at >= self._ttl]
        for job in stale:
            del self._entries[job]
