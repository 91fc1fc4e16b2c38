"""CI on the embedded stack: dispatch throughput of trivial jobs, and the run latency of a
5-job chain against the same five commands run directly (the baseline)."""

from __future__ import annotations

import secrets
import subprocess
import time
from datetime import datetime
from pathlib import Path

import httpx

from bench.report import Table, mean, percentile

WIDE = "on: push\njobs:\n" + "".join(
    f"  j{i}:\n    runs-on: linux\n    steps:\n      - run: 'true'\n" for i in range(4)
)
CHAIN = "on: push\njobs:\n" + "".join(
    f"  c{i}:\n    runs-on: linux\n" + (f"    needs: c{i - 1}\n" if i else "") + "    steps:\n      - run: 'true'\n"
    for i in range(5)
)


def _git(cwd: Path, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x"}
    env.update({"GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"})
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


class _Repo:
    def __init__(self, http: httpx.Client, root: Path, workflow: str) -> None:
        self.http = http
        self.path = root / f"repo-{secrets.token_hex(3)}"
        (self.path / ".github" / "workflows").mkdir(parents=True)
        (self.path / ".github" / "workflows" / "ci.yml").write_text(workflow)
        _git(self.path, "init", "-q", "-b", "main")
        response = http.post(
            "/v1/repos",
            json={
                "name": f"bench/{self.path.name}",
                "clone_url": str(self.path),
                "webhook_secret": secrets.token_hex(8),
            },
        )
        response.raise_for_status()
        self.repo_id = response.json()["id"]
        self.n = 0

    def push(self) -> str:
        self.n += 1
        (self.path / "n.txt").write_text(str(self.n))
        _git(self.path, "add", "-A")
        _git(self.path, "commit", "-q", "-m", str(self.n))
        sha = _git(self.path, "rev-parse", "HEAD")
        response = self.http.post(
            "/v1/hooks/push", json={"repo_id": self.repo_id, "commit_sha": sha, "ref": "refs/heads/main"}
        )
        response.raise_for_status()
        return str(response.json()["id"])

    def run_of(self, push_id: str, within: float = 120) -> str:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            runs = self.http.get(f"/v1/pushes/{push_id}").json().get("runs") or []
            if runs:
                return str(runs[0]["run_id"])
            time.sleep(0.1)
        raise TimeoutError("push created no run")

    def finished(self, run_id: str, within: float = 300) -> dict:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            run = self.http.get(f"/v1/runs/{run_id}").json()
            if run["status"] in ("success", "failure", "cancelled"):
                return run
            time.sleep(0.2)
        raise TimeoutError(f"run {run_id} did not finish")


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def run(api_url: str, api_key: str, root: Path, wide_runs: int, chains: int) -> Table:
    http = httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    wide = _Repo(http, root, WIDE)
    started = time.time()
    pushes = [wide.push() for _ in range(wide_runs)]
    runs = [wide.finished(wide.run_of(p)) for p in pushes]
    jobs = [j for r in runs for j in r["jobs"]]
    last = max(_ts(j["finished_at"]) for j in jobs)
    throughput = len(jobs) / (last - started)
    ok = sum(1 for j in jobs if j["status"] == "success")

    chain = _Repo(http, root, CHAIN)
    latencies = []
    for _ in range(chains):
        sent = time.time()
        run = chain.finished(chain.run_of(chain.push()))
        latencies.append(max(_ts(j["finished_at"]) for j in run["jobs"]) - sent)
    direct = []
    for _ in range(max(3, chains)):
        t = time.perf_counter()
        for _i in range(5):
            subprocess.run(["bash", "-c", "true"], check=True)
        direct.append(time.perf_counter() - t)
    return Table(
        "CI on the embedded default",
        ["measure", "value", "baseline"],
        [
            [f"dispatch throughput ({len(jobs)} trivial jobs, {ok} succeeded)", f"{throughput:.2f} jobs/s", "-"],
            [
                "5-job chain run latency p50 (push -> last job finished)",
                f"{percentile(latencies, 0.5):.2f} s",
                f"{percentile(direct, 0.5) * 1000:.1f} ms direct",
            ],
            ["5-job chain run latency mean", f"{mean(latencies):.2f} s", f"{mean(direct) * 1000:.1f} ms direct"],
        ],
        [
            f"{wide_runs} pushes of 4 independent `true` jobs; one CI worker, "
            "2 concurrent jobs, bubblewrap sandbox with a fresh checkout per job.",
            "Baseline: the same five commands (bash -c true) run directly, one after another.",
        ],
    )
