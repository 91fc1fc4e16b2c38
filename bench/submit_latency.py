"""Submit acknowledgement latency through the API at fixed open-loop rates, beside the floor:
raw Temporal ``start_workflow`` latency at the same rates, measured in the same run."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx
from temporalio.client import Client

from bench.report import Table, ms, percentile
from testing.stack import MODEL, SECONDS, SIZE

# A workflow type and queue no worker serves: the floor measures the start call alone.
FLOOR_WORKFLOW = "BenchFloor"
FLOOR_QUEUE = "bench-floor-unpolled"
P99_LIMIT = 0.5


@dataclass
class Timings:
    """The latencies of the calls that answered, and how many failed."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0

    async def time(self, call: Callable[[int], Awaitable[None]], arg: int) -> None:
        started = time.perf_counter()
        try:
            await call(arg)
            self.latencies.append(time.perf_counter() - started)
        except Exception:
            self.errors += 1


async def _open_loop(rate: float, seconds: float, call: Callable[[int], Awaitable[None]]) -> tuple[list[float], int]:
    """Issue ``call(i)`` at ``rate`` per second for ``seconds`` (not waiting on answers); latencies and errors."""
    timings = Timings()
    tasks = []
    begin = time.perf_counter()
    for i in range(int(rate * seconds)):
        delay = begin + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(timings.time(call, i)))
    await asyncio.gather(*tasks)
    return timings.latencies, timings.errors


async def run(
    api_url: str, api_key: str, client: Client, rates: list[float], seconds: float, started: list[str]
) -> Table:
    """Measure at each rate until p99 reaches 500 ms; ``started`` collects workflow ids to clean up."""
    table = Table(
        "Submit acknowledgement latency (ms)",
        ["rate/s", "API p50", "API p99", "API errors", "floor p50", "floor p99"],
        notes=[
            "API: POST /v1/videos with an Idempotency-Key (JSON body), open loop; "
            "floor: Temporal start_workflow of a workflow nobody runs, same rate, same server.",
            "The GPU worker is paused (SIGSTOP) during this section, so generation does not compete for the CPUs.",
        ],
    )
    run_id = uuid.uuid4().hex[:8]
    best: float | None = None
    body = {"prompt": "bench", "model": MODEL, "seconds": str(SECONDS), "size": SIZE, "steps": 1}
    async with httpx.AsyncClient(base_url=api_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30) as http:
        for rate in rates:

            async def submit(i: int, rate: float = rate) -> None:
                response = await http.post(
                    "/v1/videos", json=body, headers={"Idempotency-Key": f"bench-{run_id}-{rate}-{i}"}
                )
                response.raise_for_status()
                started.append(f"video-{response.json()['id']}")

            async def floor(i: int, rate: float = rate) -> None:
                workflow_id = f"bench-floor-{run_id}-{rate}-{i}"
                await client.start_workflow(FLOOR_WORKFLOW, id=workflow_id, task_queue=FLOOR_QUEUE)
                started.append(workflow_id)

            api, api_errors = await _open_loop(rate, seconds, submit)
            raw, _ = await _open_loop(rate, seconds, floor)
            p99 = percentile(api, 0.99)
            table.rows.append(
                [
                    f"{rate:g}",
                    ms(percentile(api, 0.5)),
                    ms(p99),
                    str(api_errors),
                    ms(percentile(raw, 0.5)),
                    ms(percentile(raw, 0.99)),
                ]
            )
            if p99 < P99_LIMIT and api_errors == 0:
                best = rate
            else:
                break
    table.notes.append(
        f"Highest rate tried with API p99 < 500 ms: {best:g}/s" if best is not None else "No rate kept p99 under 500 ms"
    )
    return table
