"""Where a CI worker's wall time goes for one trivial job, measured beside a baseline tree in one run.

    python -m bench.ci_worker_phases                    # 30 jobs, this tree beside main
    python -m bench.ci_worker_phases --jobs 50 --baseline HEAD~3
    python -m bench.ci_worker_phases --baseline ''      # this tree only
    python -m bench.ci_worker_phases --gap-ms 60        # idle between jobs, as in a chain

Runs the real job activity (``CIJobActivities.run_job``) of one trivial job (one ``run: true``
step) ``--jobs`` times, one after another, in an ``ActivityEnvironment``: no Temporal server, so
what is timed is the worker's side of a job only (the attempt-start Update is answered at once
in-process; everything after it is the production code path: uid lease and job root, the
checkout (this tree: git archive streamed into the job-side helper, unpacked as the job; a
baseline from before the root rule: the commit's shared tree under an overlay mount), the
bubblewrap sandbox with its cgroups, seccomp filter and rlimits, the step's supervision,
teardown, and the log's end-of-job flush to a local object store).

Each phase is timed by wrapping the method that does it (``time.perf_counter``); a method a
tree does not have is left out of its column. The baseline is the same bench file run as a
child process over an export of ``--baseline`` (``git archive``), right after this tree's
round, with the same virtual environment, so both columns come from one run on one host.

Figures, never assertions. The first job of each tree (mirror clone, tree extraction) is
left out of the medians and printed on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Annotations only: a baseline tree runs this file, and imports what it has at call time.
    from workflows.ci.types.job import JobActivityInput
    from workflows.ci.types.push import PushContext

REPO = Path(__file__).resolve().parent.parent
TOTAL = "run_job (whole activity)"

# (label, module, class, method): a phase is the wall time of calls to that method. Nested
# phases are printed indented under their parent. A label may name the method where each tree
# keeps it (the baseline's ``activities.ci.job._Attempt``, this tree's modules); a place a tree
# lacks is skipped.
PHASES: list[tuple[str, str, str, str]] = [
    ("  job (after the grant)", "activities.ci.attempt", "JobAttempt", "run"),
    ("  job (after the grant)", "activities.ci.job", "_Attempt", "run"),
    ("  prepare: root, uid, checkout", "activities.ci.attempt", "JobAttempt", "_prepare"),
    ("  prepare: root, uid, checkout", "activities.ci.job", "_Attempt", "_prepare"),
    ("    sandbox.prepare (uid + layout)", "worker_ci.job_users", "JobUserPool", "lease_root"),
    ("    sandbox.prepare (uid + layout)", "worker_ci.sandbox", "JobUserPool", "lease_root"),
    ("    mirror.tree (shared tree)", "activities.ci.git", "GitMirror", "tree"),
    ("    unpack as the job (helper)", "activities.ci.attempt", "JobAttempt", "_unpack"),
    ("    unpack as the job (helper)", "activities.ci.job", "_Attempt", "_unpack"),
    ("    worktree.attach (overlay/copy)", "worker_ci.overlay", "OverlayTree", "attach"),
    ("    worktree.attach (copy)", "activities.ci.git", "CopiedTree", "attach"),
    ("    hand_over (chown)", "activities.ci.job", "", "hand_over"),
    ("  step (as the worker times it)", "activities.ci.step_runner", "StepRunner", "run_in_sandbox"),
    ("  step (as the worker times it)", "activities.ci.job", "_Attempt", "run_in_sandbox"),
    ("    fresh io dir", "activities.ci.job", "", "_fresh_io_dir"),
    ("    step files", "activities.ci.jobroot", "StepFiles", "__init__"),
    ("    sandbox.start", "worker_ci.sandbox", "BubblewrapSandbox", "start"),
    ("      cgroup create", "worker_ci.cgroups", "CgroupLimiter", "create"),
    ("      cgroup lease (pool)", "worker_ci.cgroups", "CgroupPool", "lease"),
    ("    supervise (process runs)", "activities.ci.step_runner", "StepRunner", "_supervise"),
    ("    supervise (process runs)", "activities.ci.job", "_Attempt", "_supervise"),
    ("      kill_tree after exit", "worker_ci.sandbox", "_BwrapProcess", "kill_tree"),
    ("        cgroup kill_all", "worker_ci.cgroups", "StepCgroup", "kill_all"),
    ("    finish (cgroup, network)", "worker_ci.sandbox", "_BwrapProcess", "finish"),
    ("      cgroup remove", "worker_ci.cgroups", "StepCgroup", "remove"),
    ("  release checkout (umount)", "activities.ci.job", "_Attempt", "_release_checkout"),
    ("  remove job root", "activities.ci.job", "", "_remove_tree"),
    ("  remove job root (helper)", "activities.ci.jobroot", "JobRoot", "remove"),
    ("  log close (end-of-job flush)", "activities.ci.logs", "LogShipper", "close"),
]


def _instrument(durations: dict[str, float]) -> None:
    """Wrap each phase's method: its calls add their wall time to ``durations[label]``."""
    import importlib

    for label, module_name, cls_name, method in PHASES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            continue  # a phase of the other tree (the baseline's overlay, or this tree's job side)
        owner: Any = getattr(module, cls_name, None) if cls_name else module
        if owner is None or not hasattr(owner, method):
            continue
        original = getattr(owner, method)

        def wrap(fn: Callable[..., Any], key: str = label) -> Callable[..., Any]:
            @functools.wraps(fn)
            def timed(*args: Any, **kwargs: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    durations[key] += time.perf_counter() - t0

            return timed

        setattr(owner, method, wrap(original))


def _worktree(work: Path) -> tuple[dict[str, Any], str]:
    """The job activity's extra constructor arguments for this tree, and how it checks out."""
    import inspect

    from activities.ci import git
    from activities.ci.job import CIJobActivities
    from activities.ci.sandbox import SandboxError

    # A baseline from before the root rule makes checkouts from a shared tree (overlay or copy).
    extra: dict[str, Any] = {}
    checkout = "helper (as the job)"
    if "worktree" in inspect.signature(CIJobActivities.__init__).parameters:
        try:
            from worker_ci.overlay import OverlayTree  # type: ignore[import-not-found,unused-ignore]

            extra["worktree"] = OverlayTree(work / "workspaces")
        except (SandboxError, ImportError):
            extra["worktree"] = git.CopiedTree()  # type: ignore[attr-defined,unused-ignore]
        checkout = extra["worktree"].name
    return extra, checkout


def _bench_push(url: str, sha: str) -> PushContext:
    """The push every job of a round belongs to."""
    from workflows.ci.types.push import PushContext

    return PushContext(
        tenant_id="t",
        repo_id="repo-t",
        repo_full_name="t/bench",
        clone_url=url,
        commit_sha=sha,
        ref="refs/heads/main",
        heartbeat_timeout_seconds=30.0,
        cancel_grace_seconds=1.0,
    )


def _job_input(push: PushContext, i: int) -> JobActivityInput:
    """The ``i``-th trivial job: one ``run: true`` step."""
    from workflows.ci.types.job import JobActivityInput
    from workflows.ci.types.spec import JobSpec, StepSpec

    return JobActivityInput(
        push=push,
        run_id=f"run_{uuid.uuid4().hex[:24]}",
        run_workflow_id="ci-run:bench",
        workflow_name="bench",
        workflow_path=".github/workflows/bench.yml",
        job=JobSpec(id=f"j{i}", name=f"j{i}", runs_on=["bench"], steps=[StepSpec(index=0, name="t", run="true")]),
    )


def measure(jobs: int, work: Path, gap: float = 0.0) -> dict[str, Any]:
    """Run ``jobs`` trivial jobs through this interpreter's tree: per job, its wall time and
    each phase's (all calls summed)."""
    durations: dict[str, float] = defaultdict(float)
    _instrument(durations)
    from temporalio.testing import ActivityEnvironment

    from activities.ci import git
    from activities.ci.job import CIJobActivities, JobConfig
    from bench.ci_fairness import BenchRunRecords, make_repo
    from leasehold.clone_urls import ClonePolicy
    from leasehold.settings import Settings
    from leasehold.storage import LocalObjectStore
    from worker_ci.sandbox import limits_from, make_sandbox
    from workflows.ci.types.job import AttemptGrant

    url, sha = make_repo(work)
    sandbox = make_sandbox(Settings(data_dir=work / "data", ci_sandbox="bubblewrap"))
    extra, checkout = _worktree(work)
    loop = asyncio.new_event_loop()
    activities = CIJobActivities(
        JobConfig(workspaces=work / "workspaces", limits=limits_from(Settings()), disk_bytes=1 << 30),
        LocalObjectStore(work / "store", b"bench-signing-key", "http://127.0.0.1/"),
        sandbox,
        git.GitMirror(work / "mirrors", ClonePolicy(local_root=work)),
        None,  # type: ignore[arg-type]  # no server: the grant is answered below
        loop,
        BenchRunRecords(),
        **extra,
    )
    # The attempt-start Update is the engine's part (timed by bench.ci_dispatch): answered here.
    activities._request_attempt = lambda inp: AttemptGrant(proceed=True, attempt=1)  # type: ignore[method-assign]
    push = _bench_push(url, sha)
    per_job: list[dict[str, float]] = []
    statuses: dict[str, int] = defaultdict(int)
    env = ActivityEnvironment()
    for i in range(jobs):
        inp = _job_input(push, i)
        # The engine's hand-off between a chain's jobs (``--gap-ms``), during which this worker
        # has nothing to run.
        time.sleep(gap)
        durations.clear()
        t0 = time.perf_counter()
        result = env.run(activities.run_job, inp)
        per_job.append({TOTAL: time.perf_counter() - t0, **durations})
        statuses[result.status.value] += 1
    loop.close()
    return {
        "jobs": per_job,
        "statuses": dict(statuses),
        "worktree": checkout,
        "load": os.getloadavg()[0],
    }


def report(columns: list[tuple[str, list[dict[str, Any]]]], jobs: int) -> str:
    """Medians per phase and tree; each round's first job (mirror clone, tree extraction) is
    left out of them and shown on its own."""
    lines = [
        f"CI worker-side phases of one trivial job (one `run: true` step, bubblewrap), {jobs} jobs per tree",
        f"{'phase (median per job, ms)':<44}" + "".join(f"{name:>18}" for name, _ in columns),
    ]
    for label in [TOTAL, *dict.fromkeys(p[0] for p in PHASES)]:
        cells = []
        for _, rounds in columns:
            values = [job[label] for r in rounds for job in r["jobs"][1:] if label in job]
            cells.append(f"{statistics.median(values) * 1000:.1f}" if values else "-")
        if any(c != "-" for c in cells):
            lines.append(f"{label:<44}" + "".join(f"{c:>18}" for c in cells))

    def p90(rounds: list[dict[str, Any]]) -> str:
        values = sorted(job[TOTAL] for r in rounds for job in r["jobs"][1:])
        return f"{values[int(0.9 * (len(values) - 1))] * 1000:.1f}"

    def statuses(rounds: list[dict[str, Any]]) -> str:
        counts: dict[str, int] = defaultdict(int)
        for r in rounds:
            for key, n in r["statuses"].items():
                counts[key] += n
        return ",".join(f"{k}:{v}" for k, v in counts.items())

    rows: list[tuple[str, Callable[[list[dict[str, Any]]], str]]] = [
        (f"p90 {TOTAL}", p90),
        (
            "first job of a round (clone + extract), ms",
            lambda rs: f"{statistics.median(r['jobs'][0][TOTAL] for r in rs) * 1000:.0f}",
        ),
        ("job statuses", statuses),
        ("checkout", lambda rs: str(rs[0]["worktree"])),
        ("highest 1-min load average seen", lambda rs: f"{max(r['load'] for r in rs):.1f}"),
    ]
    for key, fmt in rows:
        lines.append(f"{key:<44}" + "".join(f"{fmt(rounds):>18}" for _, rounds in columns))
    return "\n".join(lines)


def _export(ref: str, dest: Path) -> Path:
    """``ref``'s tree under ``dest``, with this bench file in it (whatever ``ref`` has of it)."""
    tree = dest / "tree"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", ref], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    (tree / "bench" / "ci_worker_phases.py").write_bytes(Path(__file__).read_bytes())
    return tree


def _child(tree: Path, jobs: int, gap_ms: int) -> dict[str, Any]:
    """One round of ``jobs`` jobs in a fresh interpreter over ``tree``."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.ci_worker_phases", "--jobs", str(jobs), "--gap-ms", str(gap_ms), "--json"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"round over {tree} failed:\n{out.stderr[-3000:]}")
    data: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ci_worker_phases", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20, help="trivial jobs per round and tree (2..500)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per tree, alternating (1..20)")
    parser.add_argument("--baseline", default="main", help="git ref to run beside this tree ('' for none)")
    parser.add_argument(
        "--gap-ms", type=int, default=0, help="idle time before each job, as a chain's hand-off gives (0..1000)"
    )
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    jobs = max(2, min(500, args.jobs))
    if args.json:
        with tempfile.TemporaryDirectory(prefix="ci-phases-") as tmp:
            print(json.dumps(measure(jobs, Path(tmp), max(0, min(1000, args.gap_ms)) / 1000)))
        return
    rounds = max(1, min(20, args.rounds))
    with tempfile.TemporaryDirectory(prefix="ci-phases-trees-") as tmp:
        trees = [("this tree", REPO)]
        if args.baseline:
            trees.append((f"{args.baseline} (before)", _export(args.baseline, Path(tmp))))
        # Alternating rounds: a change in the host's load reaches both columns alike.
        results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in trees}
        for _ in range(rounds):
            for name, tree in trees:
                results[name].append(_child(tree, jobs, args.gap_ms))
    print(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, {rounds} alternating rounds, "
        f"{args.gap_ms} ms idle before each job"
    )
    print(report(list(results.items()), jobs * rounds))


if __name__ == "__main__":
    main(sys.argv[1:])
