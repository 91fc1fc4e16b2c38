"""The loop every lifecycle workflow runs: call one batch activity until nothing is due.

A tick's history stays bounded (at most ``max_batches`` activities); rows still due after that
wait for the next tick, which finds them by their own state, so no progress needs carrying
across runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.lifecycle.types import BatchResult, LifecycleBatch, LifecycleInput, LifecycleResult
    from workflows.queues import LIFECYCLE_BATCH_HEARTBEAT, LIFECYCLE_BATCH_RETRY, LIFECYCLE_BATCH_TIMEOUT


async def run_batches(activity: Callable[[Any, LifecycleBatch], BatchResult], input: LifecycleInput) -> LifecycleResult:
    """Run ``activity`` (a batch activity method) batch after batch; the sum of what they did."""
    total = LifecycleResult(done=False)
    cursor: str | None = None
    while total.batches < input.max_batches:
        result = await workflow.execute_activity_method(
            activity,
            LifecycleBatch(input=input, cursor=cursor),
            start_to_close_timeout=LIFECYCLE_BATCH_TIMEOUT,
            heartbeat_timeout=LIFECYCLE_BATCH_HEARTBEAT,
            retry_policy=LIFECYCLE_BATCH_RETRY,
        )
        total.batches += 1
        total.processed += result.processed
        total.skipped += result.skipped
        total.deleted_objects += result.deleted_objects
        if result.done:
            total.done = True
            break
        cursor = result.cursor
    return total
