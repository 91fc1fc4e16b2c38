"""Chaos on the embedded default: one ``leasehold up`` whose children are killed, preempted,
frozen and restarted (the supervisor restarts what dies, as it would in production).

Each scenario submits a batch through the real API with idempotency keys, writes a checker
history, injects its faults at seeded random moments, and ends with the checker's verdict
plus the scenario's own bounds (lost work, stale writes, results per job).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from leasehold.temporal import connect
from testing.checker import History, Observation, check
from testing.harness import ManagedProcess, start_worker
from testing.stack import (
    CHECKPOINT_INTERVAL,
    LOST_WORK_SLACK_SECONDS,
    EmbeddedStack,
    LostWork,
    VideoClient,
    cmdline,
    lost_work_of_kill,
    metric,
    observe_videos,
    pending_generation,
    read_gpu_logs,
    run_clients,
    running_generation,
    seeded,
    wait_until,
)
from workflows.video.job import VideoJobWorkflow

pytestmark = pytest.mark.chaos

log = logging.getLogger("chaos")

GPU = "worker gpu"


async def temporal(stack: EmbeddedStack) -> Client:
    return await connect(stack.settings())


def tag(seed: int) -> str:
    return f"seed={seed} (replay: LEASEHOLD_CHAOS_SEED={seed})"


async def checked_batch(stack: EmbeddedStack, client: VideoClient, history: History, within: float, seed: int) -> None:
    """Wait for the batch to end, then hand everything held to the checker; fails on anything but ok."""
    videos = await asyncio.to_thread(client.wait_terminal, within)
    observations, leftovers = await observe_videos(await temporal(stack), stack.store(), videos)
    report = check(history, observations)
    assert report.ok, f"{tag(seed)}\n{report.summary()}"
    # The job points at its result and nothing else of it remains (checkpoints, stale attempts).
    for obs in observations:
        assert all(k.startswith(obs.results[0].rsplit("/", 1)[0] + "/") for k in leftovers[obs.job_id]), (
            f"{tag(seed)} {obs.job_id} left {leftovers[obs.job_id]}"
        )


# 1. kill -9 of the GPU worker, several times over a batch --------------------------------------


async def test_gpu_worker_kill9_repeatedly(embedded: EmbeddedStack, chaos_seed: int, tmp_path: Path) -> None:
    rng = seeded(chaos_seed, "gpu-kill9")
    history = History(tmp_path / "history.jsonl")
    client = VideoClient(embedded.api_url, embedded.new_key("t-kill9"), history, "c1")
    keys = [f"kill9-{chaos_seed}-{i}" for i in range(4)]
    steps = 250
    job_ids = [j for j in await asyncio.to_thread(client.submit_all, keys, steps) if j]
    tc = await temporal(embedded)
    kills: list[tuple[str, int, float, float]] = []
    for _ in range(3):

        async def running() -> bool:
            return await running_generation(tc, job_ids) is not None

        await _wait_async(running, 120, "a running generation")
        await asyncio.sleep(rng.uniform(0.3, 3.0))
        pid = embedded.child_pid(GPU)
        now = await running_generation(tc, job_ids, min_step=0)
        if now is None:
            continue  # between jobs: the kill would hit no generation
        assert now.started_at is not None
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
        kills.append((now.job_id, now.attempt, killed_at, now.started_at))
        log.warning("%s: killed GPU worker %d running %s attempt %d", tag(chaos_seed), pid, now.job_id, now.attempt)
        await asyncio.to_thread(embedded.wait_child_healthy, GPU, pid)
    assert kills, f"{tag(chaos_seed)}: no kill landed on a running generation"

    await checked_batch(embedded, client, history, 240, chaos_seed)

    record = read_gpu_logs([embedded.gpu_log()])
    losses: list[LostWork] = []
    for job_id, attempt, killed_at, started_at in kills:
        state = await tc.get_workflow_handle_for(VideoJobWorkflow.run, f"video-{job_id}").query(VideoJobWorkflow.state)
        assert state.result is not None
        lost = lost_work_of_kill(record, job_id, attempt, killed_at, started_at, steps, state.result.attempt)
        if lost is None:
            continue  # the killed attempt had already finished the job
        losses.append(lost)
        # Never resumed from an older checkpoint than the newest one the killed attempt committed.
        assert lost.resumed_step >= lost.newest_committed_step, f"{tag(chaos_seed)} {lost}"
        assert lost.lost_seconds <= CHECKPOINT_INTERVAL + LOST_WORK_SLACK_SECONDS, f"{tag(chaos_seed)} {lost}"
    assert losses, f"{tag(chaos_seed)}: no kill was followed by a resumed attempt"
    log.warning("lost work per kill: %s", [(round(x.lost_steps), round(x.lost_seconds, 2)) for x in losses])


# 2. SIGTERM preemption notice -----------------------------------------------------------------


async def test_sigterm_preemption_loses_under_a_second(
    embedded: EmbeddedStack, chaos_seed: int, tmp_path: Path
) -> None:
    rng = seeded(chaos_seed, "sigterm")
    history = History(tmp_path / "history.jsonl")
    client = VideoClient(embedded.api_url, embedded.new_key("t-sigterm"), history, "c1")
    keys = [f"sigterm-{chaos_seed}-{i}" for i in range(2)]
    steps = 250
    job_ids = [j for j in await asyncio.to_thread(client.submit_all, keys, steps) if j]
    tc = await temporal(embedded)
    notices: list[tuple[str, int, int]] = []
    for _ in range(2):

        async def running() -> bool:
            return await running_generation(tc, job_ids, min_step=5) is not None

        await _wait_async(running, 120, "a running generation")
        await asyncio.sleep(rng.uniform(0.2, 2.5))
        now = await running_generation(tc, job_ids, min_step=0)
        if now is None or now.progress is None:
            continue
        pid = embedded.child_pid(GPU)
        os.kill(pid, signal.SIGTERM)
        notices.append((now.job_id, now.attempt, now.progress.step))
        await asyncio.to_thread(embedded.wait_child_healthy, GPU, pid)
    assert notices, f"{tag(chaos_seed)}: no notice landed on a running generation"

    await checked_batch(embedded, client, history, 180, chaos_seed)

    record = read_gpu_logs([embedded.gpu_log()])
    step_seconds = record.step_seconds()
    measured = []
    for job_id, attempt, seen_step in notices:
        own = record.checkpoints.get((job_id, attempt), [])
        resumed = next(
            (record.resumes[(j, a)] for (j, a) in sorted(record.resumes) if j == job_id and a > attempt), None
        )
        if resumed is None:
            continue  # the notice came after the last step: nothing left to lose
        assert own, f"{tag(chaos_seed)}: attempt {attempt} of {job_id} committed no checkpoint at the notice"
        reached = max(own[-1][1], seen_step)
        lost_seconds = (reached - resumed[1]) * step_seconds
        measured.append(lost_seconds)
        assert resumed == (attempt, own[-1][1]), f"{tag(chaos_seed)}: resumed {resumed}, notice checkpoint {own[-1]}"
        assert lost_seconds <= 1.0, f"{tag(chaos_seed)}: lost {lost_seconds:.2f}s of GPU work on a warned preemption"
    assert measured, f"{tag(chaos_seed)}: no preempted job was resumed"
    log.warning("lost work per warned preemption (s): %s", [round(x, 3) for x in measured])


# 3. SIGSTOP past the heartbeat timeout, then SIGCONT -------------------------------------------


async def test_stopped_worker_writes_nothing_the_job_points_at_and_stops(
    embedded: EmbeddedStack, chaos_seed: int, tmp_path: Path
) -> None:
    rng = seeded(chaos_seed, "sigstop")
    history = History(tmp_path / "history.jsonl")
    client = VideoClient(embedded.api_url, embedded.new_key("t-sigstop"), history, "c1")
    logs = tmp_path / "logs"
    # A second GPU worker, so the job has somewhere to go while the first is frozen.
    spare: ManagedProcess = start_worker(embedded.settings(), "gpu", logs, "--model", "procedural-v1", name="gpu-spare")
    try:
        spare.wait_healthy(120)
        assert spare.health_url is not None
        spare_metrics = spare.health_url.replace("/healthz", "/metrics")
        key = f"sigstop-{chaos_seed}"
        job_id = await asyncio.to_thread(client.submit, key, 300)
        assert job_id is not None
        tc = await temporal(embedded)

        async def checkpointed() -> bool:
            p = await pending_generation(tc, job_id)
            return bool(p and p.started and p.progress and p.progress.checkpoint_step > 0)

        await _wait_async(checkpointed, 120, "a committed checkpoint")
        await asyncio.sleep(rng.uniform(0.0, 1.5))
        up_gpu = embedded.child_pid(GPU)
        busy = {
            up_gpu: metric(embedded.metrics_url(up_gpu), "leasehold_gpu_generation_active"),
            spare.pid: metric(spare_metrics, "leasehold_gpu_generation_active"),
        }
        stale_pid = max(busy, key=lambda pid: busy[pid])
        stale_metrics = embedded.metrics_url(stale_pid) if stale_pid == up_gpu else spare_metrics
        before = await pending_generation(tc, job_id)
        assert before is not None
        os.kill(stale_pid, signal.SIGSTOP)
        try:

            async def taken_over() -> bool:
                p = await pending_generation(tc, job_id)
                if p is None:
                    return True
                return p.attempt > before.attempt and p.progress is not None and p.progress.attempt > before.attempt

            await _wait_async(taken_over, 90, "another worker to take the job")
        finally:
            os.kill(stale_pid, signal.SIGCONT)

        def stale_stopped() -> bool:
            return metric(stale_metrics, "leasehold_gpu_generation_active") == 0.0

        await asyncio.to_thread(wait_until, stale_stopped, 20, "the stale worker to stop its GPU work")
        assert metric(stale_metrics, "leasehold_gpu_generations_total", 'outcome="lease_lost"') >= 1.0
        steps_after = metric(stale_metrics, "leasehold_gpu_steps_total")

        await checked_batch(embedded, client, history, 180, chaos_seed)
        observations, leftovers = await observe_videos(tc, embedded.store(), client.list_all())
        [obs] = observations
        assert f"/attempt-{before.attempt}/" not in obs.results[0], f"{tag(chaos_seed)} {obs}"
        # Nothing more from the stale worker afterwards: no steps, no objects under the job.
        await asyncio.sleep(2.0)
        assert metric(stale_metrics, "leasehold_gpu_steps_total") == steps_after
        assert embedded.store().list(f"videos/{job_id}/") == leftovers[job_id]
    finally:
        spare.stop()


# 4. kill -9 of the Temporal dev server mid-batch, restarted on the same SQLite file -------------


async def test_temporal_kill9_mid_batch_loses_no_accepted_job(
    embedded: EmbeddedStack, chaos_seed: int, tmp_path: Path
) -> None:
    rng = seeded(chaos_seed, "temporal-kill9")
    history = History(tmp_path / "history.jsonl")
    client = VideoClient(embedded.api_url, embedded.new_key("t-temporal"), history, "c1", retry_for=120)
    keys = [f"temporal-{chaos_seed}-{i}" for i in range(8)]
    db = embedded.data_dir / "temporal.db"
    submitting = asyncio.ensure_future(asyncio.to_thread(client.submit_all, keys, 30, 0.4))
    await asyncio.sleep(rng.uniform(0.5, 2.5))
    pid = embedded.child_pid("server start-dev")
    acked_before = len(history.acknowledged())
    os.kill(pid, signal.SIGKILL)
    log.warning("%s: killed Temporal %d after %d acknowledged submits", tag(chaos_seed), pid, acked_before)
    new_pid = embedded.child_pid("server start-dev")
    wait_until_pid = time.monotonic() + 60
    while new_pid == pid and time.monotonic() < wait_until_pid:
        await asyncio.sleep(0.2)
        new_pid = embedded.child_pid("server start-dev")
    assert new_pid != pid and f"--db-filename {db}" in cmdline(new_pid)
    await submitting
    await checked_batch(embedded, client, history, 240, chaos_seed)


# 5. API restarted mid-burst of submits with idempotency keys and client retries ---------------


async def test_api_kill9_mid_burst_no_duplicate_no_lost(
    embedded: EmbeddedStack, chaos_seed: int, tmp_path: Path
) -> None:
    rng = seeded(chaos_seed, "api-kill9")
    history = History(tmp_path / "history.jsonl")
    key = embedded.new_key("t-api")
    clients = [
        (VideoClient(embedded.api_url, key, history, f"c{n}"), [f"api-{chaos_seed}-{n}-{i}" for i in range(8)], 4)
        for n in range(3)
    ]
    burst = asyncio.ensure_future(asyncio.to_thread(run_clients, clients, 0.05))
    await asyncio.sleep(rng.uniform(0.2, 1.5))
    pid = embedded.child_pid("cli.main api")
    os.kill(pid, signal.SIGKILL)
    log.warning("%s: killed the API %d with %d submits acknowledged", tag(chaos_seed), pid, len(history.acknowledged()))
    await burst
    assert await asyncio.to_thread(embedded.wait_child_healthy, "cli.main api", pid) != pid
    interrupted = [e for e in history.events if e.type.value == "info"]
    log.warning("%d submits were interrupted and retried", len(interrupted))
    await checked_batch(embedded, clients[0][0], history, 180, chaos_seed)


# 7. CI worker kill -9 mid-job ------------------------------------------------------------------

WEBHOOK_SECRET = "chaos-webhook-secret"
CI_WORKFLOW = """
on: push
jobs:
  build:
    runs-on: linux
    steps:
      - run: for i in 1 2 3 4 5 6; do echo "build $i"; sleep 0.5; done
  test:
    needs: build
    runs-on: linux
    steps:
      - run: for i in 1 2 3 4 5 6; do echo "test $i"; sleep 0.5; done
"""


def git(cwd: Path, *args: str) -> str:
    import subprocess

    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_AUTHOR_NAME": "c", "GIT_AUTHOR_EMAIL": "c@x"}
    env.update({"GIT_COMMITTER_NAME": "c", "GIT_COMMITTER_EMAIL": "c@x"})
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


def test_ci_worker_kill9_mid_job_new_attempt_one_result(
    embedded: EmbeddedStack, chaos_seed: int, tmp_path: Path
) -> None:
    rng = seeded(chaos_seed, "ci-kill9")
    history = History(tmp_path / "history.jsonl")
    http = httpx.Client(
        base_url=embedded.api_url, headers={"Authorization": f"Bearer {embedded.new_key('t-ci')}"}, timeout=30
    )
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".github" / "workflows" / "ci.yml").write_text(CI_WORKFLOW)
    response = http.post(
        "/v1/repos", json={"name": f"chaos/r{chaos_seed}", "clone_url": str(repo), "webhook_secret": WEBHOOK_SECRET}
    )
    assert response.status_code == 201, response.text
    repo_id = response.json()["id"]
    shas = []
    for n in range(3):
        (repo / "n.txt").write_text(str(n))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"c{n}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    for sha in shas:
        history.invoke(sha, "pusher")
        pushed = http.post("/v1/hooks/push", json={"repo_id": repo_id, "commit_sha": sha, "ref": "refs/heads/main"})
        assert pushed.status_code == 202, pushed.text
        push_id = pushed.json()["id"]

        def listed(push_id: str = push_id) -> bool:
            return bool(http.get(f"/v1/pushes/{push_id}").json().get("runs"))

        wait_until(listed, 60, "the push to create its run")
        # The push's run is what was accepted: the history names it.
        for run in http.get(f"/v1/pushes/{push_id}").json()["runs"]:
            history.ok(sha, "pusher", run["run_id"])

    def runs() -> list[dict]:
        listed = http.get("/v1/runs", params={"repo": repo_id})
        assert listed.status_code == 200, listed.text
        return [http.get(f"/v1/runs/{r['id']}").json() for r in listed.json()["data"]]

    def any_job_running() -> bool:
        return any(j["status"] == "in_progress" for r in runs() for j in r.get("jobs", []))

    kills = 0
    for _ in range(2):
        wait_until(any_job_running, 120, "a running CI job", 0.3)
        time.sleep(rng.uniform(0.3, 2.0))
        pid = embedded.child_pid("worker ci")
        os.kill(pid, signal.SIGKILL)
        kills += 1
        embedded.wait_child_healthy("worker ci", pid)

    def all_done() -> bool:
        found = runs()
        return len(found) >= len(shas) and all(r["status"] in ("success", "failure", "cancelled") for r in found)

    wait_until(all_done, 240, "every run to end", 1.0)
    found = runs()
    observations = []
    for run in found:
        successes = tuple(
            f"{job['id']}/{a['attempt']}" for job in run["jobs"] for a in job["attempts"] if a["status"] == "success"
        )
        observations.append(Observation(run["id"], run["commit_sha"], run["status"], successes, successes))
        for job in run["jobs"]:
            statuses = [a["status"] for a in job["attempts"]]
            # One result per job: the last attempt succeeded, every earlier one was lost.
            assert statuses[-1] == "success" and statuses.count("success") == 1, f"{tag(chaos_seed)} {job}"
            assert set(statuses[:-1]) <= {"lost"}, f"{tag(chaos_seed)} {job}"
    report = check(history, observations, expected_status="success", results_per_job=2)
    assert report.ok, f"{tag(chaos_seed)}\n{report.summary()}"
    relaunched = [j for r in found for j in r["jobs"] if len(j["attempts"]) > 1]
    assert relaunched, f"{tag(chaos_seed)}: {kills} kills, yet no job needed a new attempt"


async def _wait_async(check, within: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.15)
    raise AssertionError(f"timed out after {within}s waiting for {what}")
