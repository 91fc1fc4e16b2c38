"""Scheduling latency: submit -> generation started on an idle GPU worker."""

from __future__ import annotations

import time
import uuid

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.report import Table, ms, percentile
from testing.stack import MODEL, SECONDS, SIZE


async def run(api_url: str, api_key: str, client: Client, jobs: int) -> Table:
    submit_to_start: list[float] = []
    workflow_to_start: list[float] = []
    run_id = uuid.uuid4().hex[:8]
    body = {"prompt": "bench scheduling", "model": MODEL, "seconds": str(SECONDS), "size": SIZE, "steps": 2}
    async with httpx.AsyncClient(base_url=api_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30) as http:
        for i in range(jobs):
            sent = time.time()
            response = await http.post("/v1/videos", json=body, headers={"Idempotency-Key": f"sched-{run_id}-{i}"})
            response.raise_for_status()
            handle = client.get_workflow_handle(f"video-{response.json()['id']}")
            await handle.result()  # the worker is idle again before the next submit
            wf_started = act_started = None
            async for event in handle.fetch_history_events():
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                    wf_started = event.event_time.ToDatetime().timestamp()
                elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED and act_started is None:
                    act_started = event.event_time.ToDatetime().timestamp()
            if wf_started is not None and act_started is not None:
                submit_to_start.append(act_started - sent)
                workflow_to_start.append(act_started - wf_started)
    return Table(
        "Scheduling latency, idle worker (ms)",
        ["measure", "p50", "p99", "n"],
        [
            [
                "submit sent -> generation started",
                ms(percentile(submit_to_start, 0.5)),
                ms(percentile(submit_to_start, 0.99)),
                str(len(submit_to_start)),
            ],
            [
                "workflow started -> generation started (baseline: engine only)",
                ms(percentile(workflow_to_start, 0.5)),
                ms(percentile(workflow_to_start, 0.99)),
                str(len(workflow_to_start)),
            ],
        ],
        ["Times from the workflow history (ActivityTaskStarted of the generation) and the client clock, one machine."],
    )
