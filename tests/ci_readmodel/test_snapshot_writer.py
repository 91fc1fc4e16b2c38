"""``SnapshotWriter`` on a real dev server: a burst of transitions during a slow write costs one
more write, not one each; never two writes at once; versions only grow; and the final flush
writes the last state."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from workflows.ci.types.projection import current_snapshot_version
    from workflows.snapshots import SnapshotWriter

WRITE_SECONDS = 0.5
BURST = 20


class Write(BaseModel):
    value: int
    version: int


class ProbeResult(BaseModel):
    # (state value, version) of every write, in the order the workflow made them.
    writes: list[tuple[int, int]]


class SlowDatabase:
    """A projection activity that takes ``WRITE_SECONDS`` and records how many ran at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.running = 0
        self.most_at_once = 0
        self.values: list[int] = []

    @activity.defn(name="probe_write")
    def write(self, inp: Write) -> None:
        with self._lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        time.sleep(WRITE_SECONDS)
        with self._lock:
            self.running -= 1
            self.values.append(inp.value)


@workflow.defn
class SnapshotProbe:
    """Counts signals as transitions; each is one ``changed()``."""

    def __init__(self) -> None:
        self._value = 0
        self._done = False
        self._writes: list[tuple[int, int]] = []
        self._writer = SnapshotWriter(self._write, "probe", lambda: current_snapshot_version(workflow.info()))

    @workflow.signal
    def bump(self) -> None:
        self._value += 1
        self._writer.changed()

    @workflow.signal
    def finish(self) -> None:
        self._done = True

    async def _write(self, version: int) -> None:
        value = self._value
        await workflow.execute_activity(
            "probe_write", Write(value=value, version=version), start_to_close_timeout=timedelta(seconds=30)
        )
        self._writes.append((value, version))

    @workflow.run
    async def run(self) -> ProbeResult:
        self._writer.start()
        await workflow.wait_condition(lambda: self._done)
        await self._writer.flush()
        return ProbeResult(writes=self._writes)


async def test_a_burst_coalesces_and_the_flush_writes_the_last_state(temporal_client: Client) -> None:
    client = Client(
        temporal_client.service_client, namespace=temporal_client.namespace, data_converter=pydantic_data_converter
    )
    queue = f"snapshots-{uuid.uuid4().hex[:8]}"
    database = SlowDatabase()
    async with Worker(
        client,
        task_queue=queue,
        workflows=[SnapshotProbe],
        activities=[database.write],
        activity_executor=ThreadPoolExecutor(max_workers=8),
    ):
        handle = await client.start_workflow(SnapshotProbe.run, id=f"probe-{queue}", task_queue=queue)
        for _ in range(BURST):
            await handle.signal(SnapshotProbe.bump)
        await handle.signal(SnapshotProbe.finish)
        result = await asyncio.wait_for(handle.result(), timeout=60)

    values = [value for value, _ in result.writes]
    versions = [version for _, version in result.writes]
    assert values[-1] == BURST, "the final flush writes the last state"
    assert database.values == values, "what the workflow wrote is what reached the database, in order"
    assert database.most_at_once == 1, "never two writes at once"
    assert versions == sorted(set(versions)), "every write carries a larger version"
    # The burst takes a fraction of one write: the first snapshot and one or two more, not one each.
    assert len(result.writes) < BURST / 2, f"{len(result.writes)} writes for {BURST} transitions: {result.writes}"
