"""What the chaos scenarios drive: the embedded stack (``leasehold up``), video clients that
write a checker history, observation of what the system holds, and the GPU worker's own
record of checkpoints and resumes (its log), from which lost work is measured."""

from __future__ import annotations

import itertools
import logging
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from leasehold.database import init_database
from leasehold.devserver import free_port
from leasehold.records.api_keys import create_key
from leasehold.settings import Settings
from leasehold.storage import ObjectStore, open_store
from testing.checker import History, Observation
from testing.harness import REPO_ROOT, answers_ok
from workflows.video.job import VideoJobWorkflow
from workflows.video.types import GenerateProgress, job_object_prefix

log = logging.getLogger("chaos")

MODEL = "procedural-v1"
# Small and short so a job takes seconds on two CPU cores; long enough (steps) to be hit mid-way.
SIZE = "180x320"
SECONDS = 1
# Checkpoint interval and heartbeat timeout of the chaos stacks: lost-work bounds are
# measured against the first; the second decides how soon a lost worker's job moves.
CHECKPOINT_INTERVAL = 2.0
VIDEO_HEARTBEAT_TIMEOUT = 3.0
CI_HEARTBEAT_TIMEOUT = 3.0
# Lost work may exceed the interval by the step that crossed it, the checkpoint being
# committed when the kill landed, and the resume itself; this is the allowance for those.
LOST_WORK_SLACK_SECONDS = 1.0

START_TIMEOUT = 180.0
TERMINAL = {"completed", "failed", "cancelled"}


def chaos_settings_env() -> dict[str, str]:
    """LEASEHOLD_* values every chaos process runs with."""
    return {
        "LEASEHOLD_CHECKPOINT_INTERVAL_SECONDS": str(CHECKPOINT_INTERVAL),
        "LEASEHOLD_VIDEO_HEARTBEAT_TIMEOUT_SECONDS": str(VIDEO_HEARTBEAT_TIMEOUT),
        "LEASEHOLD_CI_HEARTBEAT_TIMEOUT_SECONDS": str(CI_HEARTBEAT_TIMEOUT),
        "LEASEHOLD_CI_CANCEL_GRACE_SECONDS": "1",
        "LEASEHOLD_CI_LOG_FLUSH_SECONDS": "0.3",
        "LEASEHOLD_CI_MAX_CONCURRENT_JOBS": "2",
        # Admission limits are not under test here: batches and bursts come from one user.
        "LEASEHOLD_VIDEO_PAID_MAX_QUEUED": "1000",
    }


# Processes ---------------------------------------------------------------------------------


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def process_env_var(pid: int, name: str) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for item in raw.split(b"\0"):
        key, _, value = item.partition(b"=")
        if key.decode(errors="replace") == name:
            return value.decode(errors="replace")
    return None


@dataclass
class EmbeddedStack:
    """``leasehold up`` on a temp data dir and free ports (no Web UI)."""

    proc: subprocess.Popen
    data_dir: Path
    api_url: str
    temporal_address: str
    out: Path

    def settings(self, **extra: Any) -> Settings:
        """Settings that reach this stack (for extra workers and direct store access)."""
        return Settings(
            data_dir=self.data_dir,
            temporal_address=self.temporal_address,
            api_port=int(self.api_url.rsplit(":", 1)[1]),
            checkpoint_interval_seconds=CHECKPOINT_INTERVAL,
            video_heartbeat_timeout_seconds=VIDEO_HEARTBEAT_TIMEOUT,
            **extra,
        )

    def store(self) -> ObjectStore:
        return open_store(self.settings())

    def child_pid(self, marker: str, within: float = 60.0) -> int:
        """The pid of the supervisor's child whose command line contains ``marker`` (waits for a restart)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for pid in children_of(self.proc.pid):
                if marker in cmdline(pid):
                    return pid
            if self.proc.poll() is not None:
                raise AssertionError(f"leasehold up exited:\n{self.diagnostics()}")
            time.sleep(0.1)
        raise AssertionError(f"no child runs {marker!r} after {within}s")

    def wait_child_healthy(self, marker: str, not_pid: int | None = None, within: float = 120.0) -> int:
        """Wait until a child (other than ``not_pid``) running ``marker`` is healthy; returns its pid."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                pid = self.child_pid(marker, within=max(0.1, deadline - time.monotonic()))
            except AssertionError:
                break
            if pid != not_pid:
                port = process_env_var(pid, "LEASEHOLD_METRICS_PORT")
                url = f"http://127.0.0.1:{port}/healthz" if port else f"{self.api_url}/healthz"
                if answers_ok(url):
                    return pid
            time.sleep(0.2)
        raise AssertionError(f"{marker!r} not healthy again within {within}s:\n{self.diagnostics()}")

    def metrics_url(self, pid: int) -> str:
        port = process_env_var(pid, "LEASEHOLD_METRICS_PORT")
        assert port, f"pid {pid} has no metrics port"
        return f"http://127.0.0.1:{port}/metrics"

    def new_key(self, tenant: str) -> str:
        return create_key(init_database(self.settings().resolved_database_url), tenant, "chaos", "paid")

    def gpu_log(self) -> Path:
        return self.data_dir / "logs" / "worker-gpu.log"

    def diagnostics(self) -> str:
        text = self.out.read_text(errors="replace")[-3000:]
        return f"leasehold up output:\n{text}"


def start_embedded(root: Path, extra_env: dict[str, str] | None = None) -> EmbeddedStack:
    data_dir = root / "data"
    api_port, temporal_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}
    env.update(chaos_settings_env())
    # Local clone URLs are refused unless below this root; tests keep their repositories here.
    env["LEASEHOLD_CI_LOCAL_REPO_ROOT"] = str(root)
    env.update(extra_env or {})
    env["PYTHONUNBUFFERED"] = "1"
    out = root / "up.out"
    argv = [sys.executable, "-m", "cli.main", "up", "--data-dir", str(data_dir), "--no-ui"]
    argv += ["--api-port", str(api_port), "--temporal-port", str(temporal_port)]
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT
        )
    stack = EmbeddedStack(proc, data_dir, f"http://127.0.0.1:{api_port}", f"127.0.0.1:{temporal_port}", out)
    deadline = time.monotonic() + START_TIMEOUT
    while "Press Ctrl-C to stop." not in out.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_embedded(stack)
            raise AssertionError(f"leasehold up did not come up:\n{stack.diagnostics()}")
        time.sleep(0.2)
    return stack


def stop_embedded(stack: EmbeddedStack) -> None:
    descendants = _descendants(stack.proc.pid)
    if stack.proc.poll() is None:
        for pid in descendants:  # a stopped child would hold the shutdown up
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        stack.proc.send_signal(signal.SIGTERM)
        try:
            stack.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            stack.proc.kill()
            stack.proc.wait(timeout=10)
    for pid in descendants:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def _descendants(root: int) -> list[int]:
    tree = [root]
    index = 0
    while index < len(tree) and len(tree) < 500:
        tree.extend(children_of(tree[index]))
        index += 1
    return tree[1:]


# Video clients ------------------------------------------------------------------------------


@dataclass
class VideoClient:
    """Submits jobs with idempotency keys, retries what was not definitely answered, records a history."""

    base_url: str
    api_key: str
    history: History
    name: str = "client"
    retry_for: float = 90.0
    seconds: int = SECONDS

    def body(self, key: str, steps: int) -> dict[str, Any]:
        # The key travels in the prompt too, so a job found later names the key it was submitted under.
        return {"prompt": f"chaos {key}", "model": MODEL, "seconds": str(self.seconds), "size": SIZE, "steps": steps}

    def submit(self, key: str, steps: int) -> str | None:
        """Submit until acknowledged or definitely refused (bounded by ``retry_for``); the job id or None."""
        deadline = time.monotonic() + self.retry_for
        headers = {"Authorization": f"Bearer {self.api_key}", "Idempotency-Key": key}
        with httpx.Client(base_url=self.base_url, timeout=10) as http:
            for _ in range(1000):
                self.history.invoke(key, self.name)
                try:
                    response = http.post("/v1/videos", json=self.body(key, steps), headers=headers)
                except httpx.HTTPError as exc:
                    self.history.info(key, self.name, type(exc).__name__)
                else:
                    if response.status_code == 200:
                        job_id = str(response.json()["id"])
                        self.history.ok(key, self.name, job_id)
                        return job_id
                    if 400 <= response.status_code < 500 and response.status_code not in (408, 429):
                        self.history.fail(key, self.name, f"{response.status_code} {response.text[:200]}")
                        return None
                    self.history.info(key, self.name, str(response.status_code))
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.2)
        return None

    def submit_all(self, keys: Iterable[str], steps: int, pace: float = 0.0) -> list[str | None]:
        ids = []
        for key in keys:
            ids.append(self.submit(key, steps))
            if pace:
                time.sleep(pace)
        return ids

    def list_all(self) -> list[dict[str, Any]]:
        """Every job the caller can list (cursor pages); retried while the API is unavailable."""
        headers = {"Authorization": f"Bearer {self.api_key}"}
        videos: list[dict[str, Any]] = []
        after: str | None = None
        with httpx.Client(base_url=self.base_url, timeout=30, headers=headers) as http:
            for _page in range(100):
                params: dict[str, Any] = {"limit": 100, "order": "asc"}
                if after:
                    params["after"] = after
                response = _get_retrying(http, "/v1/videos", params)
                page = response.json()
                videos.extend(page["data"])
                if not page["has_more"]:
                    return videos
                after = page["last_id"]
        raise AssertionError("listing did not end")

    def wait_terminal(self, within: float) -> list[dict[str, Any]]:
        """Poll the listing until every job is terminal (or ``within`` passes); the last listing."""
        deadline = time.monotonic() + within
        videos = self.list_all()
        while time.monotonic() < deadline:
            if all(v["status"] in TERMINAL for v in videos):
                break
            time.sleep(1.0)
            videos = self.list_all()
        return videos


def _get_retrying(http: httpx.Client, path: str, params: dict[str, Any] | None = None) -> httpx.Response:
    deadline = time.monotonic() + 60
    while True:
        try:
            response = http.get(path, params=params)
            if response.status_code == 200:
                return response
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"GET {path} kept failing")
        time.sleep(0.5)


def run_clients(clients: list[tuple[VideoClient, list[str], int]], pace: float = 0.0) -> None:
    """Run several clients at once (threads), each submitting its keys in order."""
    threads = [
        threading.Thread(target=c.submit_all, args=(keys, steps, pace), name=c.name, daemon=True)
        for c, keys, steps in clients
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)


async def observe_videos(
    client: Client, store: ObjectStore, videos: list[dict[str, Any]]
) -> tuple[list[Observation], dict[str, list[str]]]:
    """Observations for the checker, and every object left under each job's prefix."""
    observations = []
    leftovers: dict[str, list[str]] = {}
    for video in videos:
        job_id = video["id"]
        key = video["prompt"].removeprefix("chaos ") if video["prompt"].startswith("chaos ") else None
        results: tuple[str, ...] = ()
        if video["status"] == "completed":
            state = await client.get_workflow_handle_for(VideoJobWorkflow.run, f"video-{job_id}").query(
                VideoJobWorkflow.state
            )
            if state.result is not None:
                results = (state.result.video_key,)
        objects = store.list(job_object_prefix(job_id) + "/")
        leftovers[job_id] = objects
        stored = tuple(k for k in objects if k.endswith("/video.mp4"))
        observations.append(Observation(job_id, key, video["status"], results, stored))
    return observations, leftovers


# Pending generation activity ----------------------------------------------------------------


@dataclass
class Pending:
    job_id: str
    attempt: int
    started: bool
    started_at: float | None
    progress: GenerateProgress | None


async def pending_generation(client: Client, job_id: str) -> Pending | None:
    desc = await client.get_workflow_handle(f"video-{job_id}").describe()
    for pending in desc.raw_description.pending_activities:
        progress = None
        if pending.heartbeat_details.payloads:
            [progress] = pydantic_data_converter.payload_converter.from_payloads(
                pending.heartbeat_details.payloads, [GenerateProgress]
            )
        started = pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        started_at = pending.last_started_time.ToDatetime().timestamp() if started else None
        return Pending(job_id, pending.attempt, started, started_at, progress)
    return None


async def running_generation(client: Client, job_ids: list[str], min_step: int = 1) -> Pending | None:
    """The generation that is running now (started, heartbeating this attempt at ``min_step`` or more)."""
    for job_id in job_ids:
        try:
            p = await pending_generation(client, job_id)
        except Exception:  # a job just closing, or the server restarting: look again later
            continue
        if p is not None and p.started and p.progress is not None:
            if p.progress.attempt == p.attempt and p.progress.step >= min_step:
                return p
    return None


# The GPU worker's log: checkpoints and resumes ----------------------------------------------

_TS = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"
_CHECKPOINT_RE = re.compile(
    _TS + r" \w+ activities\.video\.generation: job (\S+) attempt (\d+): checkpoint at step (\d+)"
)
_RESUME_RE = re.compile(
    _TS
    + r" \w+ activities\.video\.generation: job (\S+) attempt (\d+) resumes from "
    + r"\S*/attempt-(\d+)/checkpoints/step-(\d+)"
)


def _ts(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


@dataclass
class GpuRecord:
    """Checkpoints (job, attempt) -> [(time, step)] and resumes (job, attempt) -> (from attempt, step)."""

    checkpoints: dict[tuple[str, int], list[tuple[float, int]]] = field(default_factory=dict)
    resumes: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)

    def step_seconds(self) -> float:
        """Median seconds per step between consecutive checkpoints of one attempt (includes checkpoint cost)."""
        rates = []
        for points in self.checkpoints.values():
            for (t0, s0), (t1, s1) in itertools.pairwise(points):
                if s1 > s0:
                    rates.append((t1 - t0) / (s1 - s0))
        rates.sort()
        return rates[len(rates) // 2] if rates else 0.05


def read_gpu_logs(paths: Iterable[Path]) -> GpuRecord:
    record = GpuRecord()
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            if m := _CHECKPOINT_RE.match(line):
                record.checkpoints.setdefault((m.group(2), int(m.group(3))), []).append(
                    (_ts(m.group(1)), int(m.group(4)))
                )
            elif m := _RESUME_RE.match(line):
                record.resumes[(m.group(2), int(m.group(3)))] = (int(m.group(4)), int(m.group(5)))
    return record


@dataclass
class LostWork:
    job_id: str
    attempt: int
    resumed_step: int
    newest_committed_step: int
    lost_steps: float
    lost_seconds: float


def lost_work_of_kill(
    record: GpuRecord,
    job_id: str,
    attempt: int,
    killed_at: float,
    started_at: float,
    total_steps: int,
    final_attempt: int,
    step_seconds: float | None = None,
) -> LostWork | None:
    """Work the killed ``attempt`` did that the next attempt had to redo (None: the killed
    attempt was the one that finished the job).

    The killed attempt's step at the kill is estimated from its newest checkpoint before the
    kill (or its start) and the measured step time; the next attempt's starting step comes
    from its resume line (0 when it started from scratch, which it logs nothing for).
    """
    if final_attempt <= attempt:
        return None
    resumed_step = record.resumes.get((job_id, attempt + 1), (0, 0))[1]
    own = [(t, s) for t, s in record.checkpoints.get((job_id, attempt), []) if t <= killed_at]
    start_step = record.resumes.get((job_id, attempt), (0, 0))[1]
    ref_time, ref_step = own[-1] if own else (started_at, start_step)
    step_seconds = step_seconds or record.step_seconds()
    at_kill = min(float(total_steps), ref_step + max(0.0, killed_at - ref_time) / step_seconds)
    lost_steps = max(0.0, at_kill - resumed_step)
    return LostWork(
        job_id=job_id,
        attempt=attempt,
        resumed_step=resumed_step,
        newest_committed_step=own[-1][1] if own else start_step,
        lost_steps=lost_steps,
        lost_seconds=lost_steps * step_seconds,
    )


def metric(url: str, name: str, labels: str = "") -> float:
    text = httpx.get(url, timeout=5).text
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.split()[-1])
    return 0.0


def seeded(seed: int, scenario: str) -> random.Random:
    """One RNG per scenario, derived from the run's seed (reproducible independently of test order)."""
    return random.Random(f"{seed}/{scenario}")


def wait_until(check: Callable[[], bool], within: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {within}s waiting for {what}")
