"""Fixtures for the CI engine: real git repositories, one orchestration and one CI worker process
per module (real bubblewrap), and helpers to push and wait for runs through the Temporal client."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from clients.ci import start as ci_start
from leasehold.devserver import free_port
from leasehold.settings import Settings
from leasehold.storage import ObjectStore, open_store
from testing.harness import ManagedProcess, register_repo_row, start_worker, unique_prefix
from workflows.ci.ids import parse_log_key
from workflows.ci.types.push import CIPushInput, CIPushState, PushStatus
from workflows.ci.types.run import RUN_TERMINAL_STATUSES, CIRunState

HEARTBEAT_SECONDS = 3.0
CANCEL_GRACE_SECONDS = 2.0


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(cwd),
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@x",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@x",
        },
    ).stdout.strip()


@dataclass
class Repo:
    """A local repository (its path is the clone URL)."""

    path: Path
    repo_id: str

    def commit(self, files: dict[str, str], message: str = "change") -> str:
        for name, text in files.items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "-m", message)
        return git(self.path, "rev-parse", "HEAD")


@dataclass
class CIStack:
    settings: Settings
    client: Client
    store: ObjectStore
    logs: Path
    tmp: Path

    def repo(self, name: str) -> Repo:
        path = self.tmp / "repos" / name
        path.mkdir(parents=True)
        git(path, "init", "-q", "-b", "main")
        register_repo_row(self.settings, "tenant-a", f"repo-{name}", f"acme/{name}", str(path))
        return Repo(path=path, repo_id=f"repo-{name}")

    def push_input(self, repo: Repo, sha: str, ref: str = "refs/heads/main") -> CIPushInput:
        return CIPushInput(
            tenant_id="tenant-a",
            repo_id=repo.repo_id,
            repo_full_name=f"acme/{repo.path.name}",
            clone_url=str(repo.path),
            commit_sha=sha,
            ref=ref,
            received_at=datetime.now(UTC),
            queue_prefix=self.settings.queue_prefix,
            heartbeat_timeout_seconds=HEARTBEAT_SECONDS,
            cancel_grace_seconds=CANCEL_GRACE_SECONDS,
            retry_window_seconds=120,
        )

    async def push(self, repo: Repo, sha: str, ref: str = "refs/heads/main", within: float = 60) -> CIPushState:
        pid = await ci_start.start_push(self.client, self.push_input(repo, sha, ref))
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            state = await ci_start.push_state(self.client, pid)
            if state.status != PushStatus.LISTING:
                return state
            await asyncio.sleep(0.2)
        raise AssertionError(f"push {pid} not listed in {within}s")

    async def wait_run(self, run_id: str, within: float = 90, until=None) -> CIRunState:  # type: ignore[no-untyped-def]
        """Poll until the run is finished (or ``until(state)`` holds)."""
        deadline = time.monotonic() + within
        state = None
        while time.monotonic() < deadline:
            state = await ci_start.run_state(self.client, run_id)
            if until(state) if until else state.status in RUN_TERMINAL_STATUSES:
                return state
            await asyncio.sleep(0.2)
        raise AssertionError(f"run {run_id} not done in {within}s: {state}")

    def log_text(self, prefix: str) -> str:
        chunks = []
        for key in self.store.list(prefix):
            parsed = parse_log_key(key)
            if parsed and parsed[1] == "log":
                chunks.append((parsed[0], self.store.get(key)))
        chunks.sort()
        assert [seq for seq, _ in chunks] == list(range(len(chunks))), "log chunks must be gap-free"
        return b"".join(data for _, data in chunks).decode(errors="replace")


def ci_settings(tmp: Path, address: str, **extra: object) -> Settings:
    return Settings(
        data_dir=tmp / "data",
        temporal_address=address,
        queue_prefix=unique_prefix(),
        api_port=free_port(),
        ci_log_flush_seconds=0.3,
        # The tests' repositories live under tmp (the data dir inside it stays refused). No
        # lifecycle schedules: log compaction would delete the raw chunks ``log_text`` reads.
        **{"ci_local_repo_root": tmp, "ci_max_concurrent_jobs": 2, "lifecycle_schedules": False, **extra},  # type: ignore[arg-type]
    )


@contextmanager
def engine_stack(env: WorkflowEnvironment, tmp: Path, **extra: object) -> Iterator[CIStack]:
    """An orchestration and a CI worker process (real bubblewrap) against ``env``'s server."""
    settings = ci_settings(tmp, env.client.service_client.config.target_host, **extra)
    logs = tmp / "logs"
    procs: list[ManagedProcess] = [
        start_worker(settings, "orchestration", logs),
        start_worker(settings, "ci", logs, "--labels", "linux"),
    ]
    try:
        for p in procs:
            p.wait_healthy(60)
        yield CIStack(settings, env.client, open_store(settings), logs, tmp)
    finally:
        for p in procs:
            p.stop()


@pytest.fixture(scope="module")
def ci_stack(temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CIStack]:
    with engine_stack(temporal_env, tmp_path_factory.mktemp("ci")) as stack:
        yield stack
