"""A soak of the embedded stack: steady video submits and CI pushes for ``--minutes`` (30 by
default), with each process's resident memory (RSS) sampled all along.

    python -m bench.soak                          # 30 minutes, the default workflow cache
    python -m bench.soak --minutes 5 --cache 1000 # shorter, with the SDK's own default cache

What it shows: whether the orchestration worker's memory levels off while CI runs stay open
(a run's workflow is cached between its tasks; ``Settings.orchestration_max_cached_workflows``
bounds how many), or keeps growing. The table prints each process's RSS at the start, the
middle and the end of the load (and the largest sample); the
orchestration worker's figure beside the number of workflows it had open (runs and pushes
stay open; videos close).

Each CI run is one job (``run: true``) of a push to a local repository; each video is a small
procedural job (180x320, 1 s, 20 steps). Figures, never assertions; the machine's other load
is not controlled.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

from bench.report import Table, machine
from leasehold.settings import Settings
from testing.stack import SIZE, EmbeddedStack, children_of, cmdline, start_embedded, stop_embedded

RESULTS = Path(__file__).resolve().parent / "SOAK_RESULTS.md"
# The stack's processes, by what their command lines contain.
PROCESSES = {
    "temporal": "server start-dev",
    "api": "cli.main api",
    "orchestration": "worker orchestration",
    "worker-gpu": "worker gpu",
    "worker-ci": "worker ci",
}
WORKFLOW = "on: push\njobs:\n  one:\n    runs-on: linux\n    steps:\n      - run: 'true'\n"


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def stack_pids(stack: EmbeddedStack) -> dict[str, int]:
    found: dict[str, int] = {}
    for pid in children_of(stack.proc.pid):
        line = cmdline(pid)
        for name, marker in PROCESSES.items():
            if marker in line:
                found[name] = pid
    return found


@dataclass
class Load:
    """What the load threads did."""

    # Accepted requests by kind: "video" (a job submitted), "push" (a run started).
    accepted: Counter[str] = field(default_factory=Counter)
    refused: int = 0
    errors: list[str] = field(default_factory=list)


def git(cwd: Path, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x"}
    env.update({"GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"})
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


def _send_every(
    load: Load, kind: str, accepted: int, every: float, stop: threading.Event, send: Callable[[int], httpx.Response]
) -> None:
    """Call ``send(n)`` every ``every`` s until ``stop``; count what came back under ``kind``."""
    n = 0
    while not stop.wait(every):
        n += 1
        try:
            response = send(n)
        except httpx.HTTPError as exc:
            load.errors.append(f"{kind}: {type(exc).__name__}")
            continue
        if response.status_code == accepted:
            load.accepted[kind] += 1
        else:
            load.refused += 1


def submit_videos(http: httpx.Client, load: Load, every: float, stop: threading.Event) -> None:
    def send(n: int) -> httpx.Response:
        body = {"prompt": f"soak {n}", "model": "procedural-v1", "seconds": "1", "size": SIZE, "steps": 20}
        return http.post("/v1/videos", json=body, headers={"Idempotency-Key": f"soak-{n}"})

    _send_every(load, "video", 200, every, stop, send)


def push_runs(http: httpx.Client, repo: Path, repo_id: str, load: Load, every: float, stop: threading.Event) -> None:
    def send(n: int) -> httpx.Response:
        (repo / "n.txt").write_text(str(n))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"c{n}")
        sha = git(repo, "rev-parse", "HEAD")
        return http.post("/v1/hooks/push", json={"repo_id": repo_id, "commit_sha": sha, "ref": "refs/heads/main"})

    _send_every(load, "push", 202, every, stop, send)


def open_workflows(stack: EmbeddedStack) -> int | None:
    """Open executions on the stack's namespace (the orchestration worker caches these)."""
    import asyncio

    from leasehold.temporal import connect

    async def count() -> int:
        client = await connect(stack.settings())
        return (await client.count_workflows('ExecutionStatus="Running"')).count

    try:
        return asyncio.run(count())
    except Exception:
        return None


def run(minutes: float, cache: int | None, video_every: float, run_every: float) -> Table:
    started_at = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="leasehold-soak-") as tmp:
        root = Path(tmp)
        env = {"LEASEHOLD_VIDEO_PAID_MAX_QUEUED": "100000", "LEASEHOLD_CI_MAX_CONCURRENT_JOBS": "2"}
        if cache is not None:
            env["LEASEHOLD_ORCHESTRATION_MAX_CACHED_WORKFLOWS"] = str(cache)
        stack = start_embedded(root, env)
        stop = threading.Event()
        load = Load()
        samples: list[tuple[float, dict[str, float], int | None]] = []
        try:
            http = httpx.Client(
                base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.new_key('soak')}"}, timeout=30
            )
            repo = root / "repo"
            (repo / ".github" / "workflows").mkdir(parents=True)
            (repo / ".github" / "workflows" / "ci.yml").write_text(WORKFLOW)
            git(repo, "init", "-q", "-b", "main")
            created = http.post(
                "/v1/repos", json={"name": "soak/repo", "clone_url": str(repo), "webhook_secret": "soak-secret-123"}
            )
            created.raise_for_status()
            threads = [
                threading.Thread(target=submit_videos, args=(http, load, video_every, stop), daemon=True),
                threading.Thread(
                    target=push_runs, args=(http, repo, created.json()["id"], load, run_every, stop), daemon=True
                ),
            ]
            for thread in threads:
                thread.start()
            t0 = time.monotonic()
            end = t0 + minutes * 60
            while True:
                now = time.monotonic()
                pids = stack_pids(stack)
                rss = {name: value for name, pid in pids.items() if (value := rss_mib(pid)) is not None}
                samples.append((now - t0, rss, open_workflows(stack)))
                print(f"{(now - t0) / 60:5.1f} min  " + "  ".join(f"{k} {v:.0f}" for k, v in rss.items()), flush=True)
                if now >= end:
                    break
                time.sleep(min(30.0, max(0.0, end - now)))
        finally:
            stop.set()
            stop_embedded(stack)
    return table(samples, load, minutes, cache, started_at)


def table(
    samples: list[tuple[float, dict[str, float], int | None]],
    load: Load,
    minutes: float,
    cache: int | None,
    started_at: datetime,
) -> Table:
    start, middle, end = samples[0], samples[len(samples) // 2], samples[-1]
    rows = []
    for name in PROCESSES:
        values = [s[1][name] for s in samples if name in s[1]]
        if not values:
            continue
        rows.append(
            [
                name,
                *(f"{s[1].get(name, float('nan')):.0f}" for s in (start, middle, end)),
                f"{max(values):.0f}",
            ]
        )
    m = machine()
    default = Settings.model_fields["orchestration_max_cached_workflows"].default
    cached = f"max_cached_workflows={cache if cache is not None else default}"
    headers = ["process", *(f"{label} ({s[0] / 60:.1f} min)" for label, s in
                            (("start", start), ("middle", middle), ("end", end))), "max"]  # fmt: skip
    return Table(
        f"RSS (MiB) over a {minutes:g}-minute soak, {cached}",
        headers,
        rows,
        [
            f"Started {started_at:%Y-%m-%d %H:%M} UTC; {load.accepted['video']} videos and "
            f"{load.accepted['push']} CI runs accepted, "
            f"{load.refused} refused, {len(load.errors)} transport errors.",
            "Open workflows at start / middle / end: "
            + " / ".join(str(s[2]) if s[2] is not None else "?" for s in (start, middle, end))
            + " (CI runs stay open for their retry window; videos close).",
            f"Samples every 30 s: {len(samples)}. Machine: {m['nproc']} x {m['cpu']}, {m['memory']}; {m['versions']}.",
        ],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--cache", type=int, default=None, help="max_cached_workflows (default: the setting's)")
    parser.add_argument("--video-every", type=float, default=1.0, help="seconds between video submits")
    parser.add_argument("--run-every", type=float, default=5.0, help="seconds between CI pushes")
    parser.add_argument("--out", type=Path, default=None, help="append the table to this Markdown file")
    args = parser.parse_args(argv)
    result = run(args.minutes, args.cache, args.video_every, args.run_every)
    print(result.text(), flush=True)
    if args.out is not None:
        with args.out.open("a") as out:
            out.write("\n" + result.markdown() + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
