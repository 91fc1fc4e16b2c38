"""6. The object store unreachable mid-job: an S3-protocol server (moto, a real subprocess) behind
a loopback TCP proxy that is cut and restored while a video job checkpoints and a CI job ships
log chunks. Nothing may be lost: the video job completes from a checkpoint at least as new as
the last one committed before the outage, and the CI log holds every line, with no gap.

The outage lasts ``LEASEHOLD_CHAOS_OUTAGE_SECONDS`` (default 30 s, as the issue asks;
shorter values make a quicker local run).
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from clients.ci import start as ci_start
from leasehold.devserver import free_port
from leasehold.settings import Settings
from leasehold.storage import open_store
from testing.checker import History, Observation, check
from testing.harness import ManagedProcess, register_repo_row, start_worker, unique_prefix
from testing.stack import CHECKPOINT_INTERVAL, pending_generation, seeded
from tests.faults import TcpProxy
from tests.s3_server import moto_s3
from tests.video_core.jobs import probe_mp4, request, start_job
from workflows.ci.ids import parse_log_key
from workflows.ci.types.push import CIPushInput, PushStatus
from workflows.ci.types.run import RUN_TERMINAL_STATUSES, CIRunState
from workflows.video.types import VideoJobState, VideoStatus, job_object_prefix

pytestmark = pytest.mark.chaos

log = logging.getLogger("chaos")

OUTAGE_SECONDS = float(os.environ.get("LEASEHOLD_CHAOS_OUTAGE_SECONDS", "30"))
BUCKET = "leasehold-chaos"
LINES = int(OUTAGE_SECONDS * 2) + 16  # one line per 0.5 s: starts before the cut, ends after the restore


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with moto_s3(tmp_path_factory.mktemp("moto") / "moto.log") as endpoint:
        boto3.client(
            "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
        ).create_bucket(Bucket=BUCKET)
        yield endpoint


def git(cwd: Path, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_AUTHOR_NAME": "c", "GIT_AUTHOR_EMAIL": "c@x"}
    env.update({"GIT_COMMITTER_NAME": "c", "GIT_COMMITTER_EMAIL": "c@x"})
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


@dataclass
class OutageOutcome:
    """What one outage did to a video job and a CI job that ran across it."""

    video: VideoJobState
    committed_before_cut: int
    frames: tuple[str, int, int, int] | None
    run: CIRunState
    log_prefix: str
    gaps: list[int]
    printed: list[str]
    # What a failure needs to explain itself: the job's attempts and what the store listed.
    attempts: list[tuple[int, str]]
    listed: list[str]
    observations: list[Observation]
    history: History

    def ci_report(self) -> str:
        names = [key.removeprefix(self.log_prefix) for key in self.listed]
        return (
            f"run {self.run.status.value}; attempts {self.attempts}; read {self.log_prefix}: "
            f"gaps {self.gaps}, {len(names)} keys listed {names}, {len(self.printed)} of {LINES} lines"
        )


@pytest_asyncio.fixture(scope="module")
async def outage(
    temporal_env: WorkflowEnvironment, s3_server: str, tmp_path_factory: pytest.TempPathFactory, chaos_seed: int
) -> OutageOutcome:
    temporal_client = temporal_env.client
    tmp_path = tmp_path_factory.mktemp("outage")
    rng = seeded(chaos_seed, "store-outage")
    port = int(s3_server.rsplit(":", 1)[1])
    proxy = TcpProxy("127.0.0.1", port)
    settings = Settings(
        data_dir=tmp_path / "data",
        temporal_address=temporal_client.service_client.config.target_host,
        queue_prefix=unique_prefix(),
        api_port=free_port(),
        checkpoint_interval_seconds=CHECKPOINT_INTERVAL,
        store_backend="s3",
        s3_bucket=BUCKET,
        s3_endpoint_url=proxy.url,
        s3_access_key_id="k",
        s3_secret_access_key="s",  # type: ignore[arg-type]
        ci_log_flush_seconds=0.3,
        ci_local_repo_root=tmp_path,
        # The test reads the attempt's raw chunks. The log compaction schedule (every 300 s,
        # aligned to the clock, not to this test) replaces a finished attempt's chunks with one
        # compacted object: a tick between the run's end and the read left no chunk to read.
        lifecycle_schedules=False,
    )
    logs = tmp_path / "logs"
    procs: list[ManagedProcess] = [
        start_worker(settings, "orchestration", logs),
        start_worker(settings, "gpu", logs, "--model", "procedural-v1"),
        start_worker(settings, "ci", logs, "--labels", "linux"),
    ]
    history = History(tmp_path / "history.jsonl")
    try:
        for proc in procs:
            proc.wait_healthy(120)
        # The CI run: one job that prints a numbered line every 0.5 s across the outage.
        repo = tmp_path / "repo"
        (repo / ".github" / "workflows").mkdir(parents=True)
        (repo / ".github" / "workflows" / "ci.yml").write_text(
            "on: push\njobs:\n  lines:\n    runs-on: linux\n    steps:\n"
            f'      - run: for i in $(seq 1 {LINES}); do echo "line $i"; sleep 0.5; done\n'
        )
        git(repo, "init", "-q", "-b", "main")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "c")
        sha = git(repo, "rev-parse", "HEAD")
        register_repo_row(settings, "tenant-chaos", "repo-chaos", "chaos/outage", str(repo))
        history.invoke("ci", "c1")
        push_id = await ci_start.start_push(
            temporal_client,
            CIPushInput(
                tenant_id="tenant-chaos",
                repo_id="repo-chaos",
                repo_full_name="chaos/outage",
                clone_url=str(repo),
                commit_sha=sha,
                ref="refs/heads/main",
                received_at=datetime.now(UTC),
                queue_prefix=settings.queue_prefix,
                heartbeat_timeout_seconds=3.0,
                cancel_grace_seconds=1.0,
                retry_window_seconds=120,
            ),
        )
        # The video job: long enough to checkpoint before the cut and to be mid-way when it comes.
        history.invoke("video", "c1")
        handle = await start_job(
            temporal_client, settings, request(prompt="chaos outage", seconds=1, width=180, height=320, steps=800)
        )
        video_job_id = handle.id.removeprefix("video-")
        history.ok("video", "c1", video_job_id)

        deadline = time.monotonic() + 60
        while (push := await ci_start.push_state(temporal_client, push_id)).status == PushStatus.LISTING:
            assert time.monotonic() < deadline, "push not listed"
            await asyncio.sleep(0.2)
        [run] = push.runs
        history.ok("ci", "c1", run.run_id)

        committed = 0
        deadline = time.monotonic() + 90
        while committed == 0:
            assert time.monotonic() < deadline, "no checkpoint before the outage"
            p = await pending_generation(temporal_client, video_job_id)
            committed = p.progress.checkpoint_step if p and p.progress else 0
            await asyncio.sleep(0.2)
        await asyncio.sleep(rng.uniform(0.0, CHECKPOINT_INTERVAL))
        p = await pending_generation(temporal_client, video_job_id)
        committed_before_cut = p.progress.checkpoint_step if p and p.progress else committed

        proxy.cut()
        log.warning("seed=%d: object store cut for %.0f s", chaos_seed, OUTAGE_SECONDS)
        await asyncio.sleep(OUTAGE_SECONDS)
        proxy.restore()
        log.warning("object store restored; %d connections refused meanwhile", proxy.refused)

        state = await asyncio.wait_for(handle.result(), 240)
        deadline = time.monotonic() + 120
        while (run_state := await ci_start.run_state(temporal_client, run.run_id)).status not in RUN_TERMINAL_STATUSES:
            assert time.monotonic() < deadline, f"run not finished: {run_state}"
            await asyncio.sleep(0.5)

        store = open_store(settings)
        # Video: completed, from a checkpoint no older than the last one committed before the cut.
        results: tuple[str, ...] = ()
        stored: tuple[str, ...] = ()
        if state.result is not None:
            results = (state.result.video_key,)
            stored = tuple(k for k in store.list(job_object_prefix(video_job_id) + "/") if k.endswith("video.mp4"))
        observations = [Observation(video_job_id, "video", state.status.value, results, stored)]

        # CI: the run succeeded, and the attempt that did holds every line once, in order, no gap.
        job = run_state.job("lines")
        assert job is not None
        # The attempt the state points at: the one whose result was recorded.
        final = job.current_attempt()
        assert final is not None, job
        listed = store.list(final.log_prefix)
        chunks = []
        for key in listed:
            parsed = parse_log_key(key)
            if parsed and parsed[1] == "log":
                chunks.append((parsed[0], store.get(key)))
        chunks.sort()
        text = b"".join(data for _, data in chunks).decode(errors="replace")
        printed = [line for line in text.splitlines() if line.startswith("line ")]
        gaps = final.log.gaps if final.log else []
        succeeded = run_state.status.value == "success"
        ci_results = ("lines",) if succeeded else ()
        # One checker vocabulary for both products: a successful run is a completed job.
        ci_status = "completed" if succeeded else run_state.status.value
        observations.append(Observation(run.run_id, "ci", ci_status, ci_results, ci_results))
        frames = probe_mp4(store.get(state.result.video_key)) if state.result is not None else None
        log.warning(
            "outage %.0fs: video attempts %d (resumed from step %d, last committed before the cut %d); "
            "CI attempts %s, log gaps %s, %d keys listed under the log prefix",
            OUTAGE_SECONDS,
            state.result.attempt if state.result else 0,
            state.result.resumed_from_step if state.result else 0,
            committed_before_cut,
            [(a.attempt, a.status.value) for a in job.attempts],
            gaps,
            len(listed),
        )
        return OutageOutcome(
            state,
            committed_before_cut,
            frames,
            run_state,
            final.log_prefix,
            gaps,
            printed,
            [(a.attempt, a.status.value) for a in job.attempts],
            listed,
            observations,
            history,
        )
    finally:
        proxy.close()
        for proc in procs:
            proc.stop()


def test_video_job_survives_the_outage_from_its_last_checkpoint(outage: OutageOutcome) -> None:
    state = outage.video
    assert state.status == VideoStatus.COMPLETED and state.result is not None, state
    # Checkpoint writes failed during the outage and were retried (at the next interval, or by
    # a new attempt when the outage outlasted one); the checkpoint committed before the cut
    # stayed valid: no attempt after the first restarted from further back than it.
    if state.result.attempt > 1:
        assert state.result.resumed_from_step >= outage.committed_before_cut, state.result
    assert outage.frames == ("h264", 180, 320, 8)
    report = check(outage.history.restricted(["video"]), [o for o in outage.observations if o.key == "video"])
    assert report.ok, report.summary()


def test_ci_log_survives_the_outage_without_a_gap(outage: OutageOutcome) -> None:
    assert outage.run.status.value == "success", f"{outage.ci_report()}\n{outage.run}"
    assert not outage.gaps, f"CI log chunks were dropped during the outage: {outage.ci_report()}"
    assert outage.printed == [f"line {i}" for i in range(1, LINES + 1)], f"{outage.ci_report()}: {outage.printed}"
    report = check(outage.history.restricted(["ci"]), [o for o in outage.observations if o.key == "ci"])
    assert report.ok, report.summary()
