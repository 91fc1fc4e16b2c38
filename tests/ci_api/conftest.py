"""One CI stack for the whole package: the API, an orchestration worker and a CI worker as
real processes against the session's dev server. Tests isolate themselves by tenant and
repository, never by restarting processes (two cores are shared by everyone)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from leasehold.database import init_database
from leasehold.devserver import free_port
from leasehold.records.api_keys import create_key
from leasehold.settings import Settings
from testing.harness import ManagedProcess, start_api, start_worker, unique_prefix
from tests.gitrepo import GitRemote


@dataclass
class CIStack:
    """The running processes and what a test needs to call them."""

    settings: Settings
    base_url: str
    logs: Path
    root: Path
    api: ManagedProcess
    workers: list[ManagedProcess] = field(default_factory=list)

    def new_tenant(self) -> httpx.Client:
        """An HTTP client holding a fresh tenant's API key (tests never share tenants)."""
        tenant = f"tenant-{secrets.token_hex(4)}"
        key = create_key(init_database(self.settings.resolved_database_url), tenant, "user", "paid")
        client = httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        client.tenant_id = tenant  # type: ignore[attr-defined]
        return client

    def anonymous(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=30)

    def git_remote(self) -> GitRemote:
        return GitRemote(self.root / f"git-{secrets.token_hex(4)}")

    def register(
        self, client: httpx.Client, remote: GitRemote, *, name: str | None = None, hook: bool = True
    ) -> tuple[str, str, str]:
        """Register ``remote`` for ``client``'s tenant (with a signed webhook unless ``hook`` is
        false); returns (repo id, name, secret)."""
        name = name or f"acme/{remote.root.name}"
        secret = secrets.token_hex(16)
        response = client.post(
            "/v1/repos", json={"name": name, "clone_url": remote.clone_url, "webhook_secret": secret}
        )
        assert response.status_code == 201, response.text
        repo_id = response.json()["id"]
        if hook:
            remote.install_webhook(f"{self.base_url}/v1/hooks/github", secret, name)
        return repo_id, name, secret

    def start_workers(self) -> None:
        """The orchestration and CI workers, started once and waited healthy."""
        if not self.workers:
            self.workers.append(start_worker(self.settings, "orchestration", self.logs))
            self.workers.append(start_worker(self.settings, "ci", self.logs, "--labels", "linux"))
            for worker in self.workers:
                worker.wait_healthy(60)


@contextmanager
def running_ci_stack(temporal_env: WorkflowEnvironment, root: Path, **settings: Any) -> Iterator[CIStack]:
    """The API on a fresh data dir under ``root`` (``settings`` added to the defaults below);
    on exit, the API and every worker the stack started are stopped."""
    logs = root / "logs"
    logs.mkdir()
    config = Settings(
        data_dir=root / "data",
        temporal_address=temporal_env.client.service_client.config.target_host,
        queue_prefix=unique_prefix(),
        api_port=free_port(),
        ci_labels=["linux"],
        # Short heartbeats: a cancel reaches a running job at its next heartbeat.
        ci_heartbeat_timeout_seconds=5.0,
        ci_cancel_grace_seconds=2.0,
        # The GitHub stand-in of the status reporter's tests listens on loopback, over HTTP.
        ci_status_schemes=["https", "http"],
        ci_status_allow_cidrs=["127.0.0.1/32"],
        # Tests' git remotes live under root (the data dir inside it stays refused).
        **{"ci_local_repo_root": root, **settings},
    )
    config.data_dir.mkdir(parents=True)
    init_database(config.resolved_database_url)
    api, base_url = start_api(config, logs)
    stack = CIStack(settings=config, base_url=base_url, logs=logs, root=root, api=api)
    try:
        api.wait_healthy(60)
        yield stack
    finally:
        for proc in [*stack.workers, api]:
            proc.stop()


@pytest.fixture(scope="package")
def ci_stack(temporal_env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CIStack]:  # type: ignore[no-untyped-def]
    with running_ci_stack(temporal_env, tmp_path_factory.mktemp("ci-api")) as stack:
        yield stack


@pytest.fixture(scope="package")
def ci_engine(ci_stack: CIStack) -> CIStack:
    """The stack plus the orchestration and CI workers (started once, on first need)."""
    ci_stack.start_workers()
    return ci_stack
