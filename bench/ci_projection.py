"""The CI read model's write cost, measured: ``python -m bench.ci_projection [--writes N]``.

What one run snapshot costs the database, on SQLite (a file, WAL, as embedded) and on Postgres
when one answers on 127.0.0.1:5432: the projection activity's whole write (the run row through
``write_versioned``, its job rows replaced, its attempt rows upserted, one transaction) for a
run of 64 jobs with two attempts each, the largest a workflow file may declare, one attempt
changing per write as in a transition. Beside it, in
the same run, the baseline: the run row alone through ``write_versioned``, which is what any
versioned snapshot costs. Then what the writes cost the engine: events per run in the recorded
replay histories, before the read model and with it (same scenarios, real runs).

What it does not measure: jobs per second end to end with and without the projection (the
code before the change is not in this tree to run beside it; ``bench.ci`` measures dispatch
throughput with it). Numbers, never assertions.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.orm import sessionmaker

from activities.ci.projection import run_rows
from bench.report import Table, ms, percentile
from leasehold.database import init_database
from leasehold.records.ci.runs import CIRunRecord, write_run
from leasehold.records.versioned import write_versioned
from workflows.ci.ids import attempt_log_prefix
from workflows.ci.types.job import AttemptStatus
from workflows.ci.types.run import CIRunState, JobAttemptState, JobState, JobStatus, RunStatus

JOBS = 64
HISTORIES = Path(__file__).resolve().parent.parent / "tests" / "ci_core" / "histories"
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


def history_events() -> Table:
    table = Table("CI history events per execution: before the read model / with it", ["scenario", "before", "with"])
    for path in sorted(HISTORIES.glob("*_read_model.json")):
        before = HISTORIES / path.name.replace("_read_model", "")
        if before.exists():
            count = [len(json.loads(p.read_text())["events"]) for p in (before, path)]
            table.rows.append([path.stem.replace("_read_model", ""), str(count[0]), str(count[1])])
    table.notes.append("recorded from real runs (tests/ci_core/record_histories.py), the same scenarios each time")
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ci_projection", description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=200)
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
    print(history_events().text())


if __name__ == "__main__":
    main()
