"""The stack end-to-end tests drive: the API and workers as real processes on one fresh data
dir, against a dev server the caller already runs.

Test packages differ in their settings and in which workers they start, never in how a stack
is launched, so those two are the parameters and the launching is written once, here.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx

from leasehold.database import init_database
from leasehold.devserver import free_port
from leasehold.records.api_keys import create_key
from leasehold.settings import Settings
from leasehold.storage import ObjectStore, open_store
from testing.harness import ManagedProcess, start_api, start_worker, stop_together, unique_prefix

# A GPU worker loads its model before it answers, on two cores shared with the rest of the
# suite: a process that is not healthy by then failed to start.
HEALTHY_WITHIN = 120.0


@dataclass(frozen=True)
class Worker:
    """One worker a stack runs: ``leasehold worker <kind> <args>``, logging as ``name``."""

    kind: str
    args: tuple[str, ...] = ()
    name: str | None = None


ORCHESTRATION = Worker("orchestration")


def gpu_worker(model: str, *args: str, name: str | None = None) -> Worker:
    """A GPU worker holding ``model`` (``args`` add to its command line, e.g. ``--memory-gib``)."""
    return Worker("gpu", ("--model", model, *args), name)


def stack_settings(root: Path, temporal_address: str, **overrides: Any) -> Settings:
    """Test-sized settings for a stack under ``root``: its own data dir, queue prefix and API
    port, a checkpoint every second and a 5 s video heartbeat; ``overrides`` win."""
    values: dict[str, Any] = {
        "data_dir": root / "data",
        "temporal_address": temporal_address,
        "queue_prefix": unique_prefix(),
        "api_port": free_port(),
        "checkpoint_interval_seconds": 1.0,
        "video_heartbeat_timeout_seconds": 5.0,
    }
    return Settings(**{**values, **overrides})


@dataclass
class ProcessStack:
    """The running processes of one stack and what a test needs to reach them. Packages
    subclass it to add their own callers; the processes stop with the stack."""

    settings: Settings
    base_url: str
    root: Path
    logs: Path
    api: ManagedProcess
    workers: list[ManagedProcess] = field(default_factory=list)

    @classmethod
    def start(cls, temporal_address: str, root: Path, *workers: Worker, **settings: Any) -> Self:
        """The API and ``workers`` on a fresh data dir under ``root`` (``settings`` over
        :func:`stack_settings`), every one healthy; nothing is left running if one fails."""
        config = stack_settings(root, temporal_address, **settings)
        logs = root / "logs"
        logs.mkdir()
        config.data_dir.mkdir(parents=True)
        init_database(config.resolved_database_url)
        api, base_url = start_api(config, logs)
        stack = cls(settings=config, base_url=base_url, root=root, logs=logs, api=api)
        try:
            for worker in workers:
                stack.start_worker(worker)
            stack.wait_healthy()
        except BaseException:
            stack.stop()
            raise
        return stack

    @classmethod
    @contextmanager
    def running(cls, temporal_address: str, root: Path, *workers: Worker, **settings: Any) -> Iterator[Self]:
        """:meth:`start`, stopped on exit."""
        stack = cls.start(temporal_address, root, *workers, **settings)
        try:
            yield stack
        finally:
            stack.stop()

    def start_worker(self, worker: Worker) -> ManagedProcess:
        """One more worker, started but not waited for; it stops with the stack."""
        proc = start_worker(self.settings, worker.kind, self.logs, *worker.args, name=worker.name)
        self.workers.append(proc)
        return proc

    def add_worker(self, worker: Worker) -> ManagedProcess:
        """One more worker, started and healthy."""
        return self.start_worker(worker).wait_healthy(HEALTHY_WITHIN)

    def wait_healthy(self) -> None:
        for proc in [self.api, *self.workers]:
            proc.wait_healthy(HEALTHY_WITHIN)

    def new_key(self, tenant_id: str | None = None, user_id: str = "user", tier: str = "paid") -> tuple[str, str]:
        """A fresh API key (for a fresh tenant unless one is given): (tenant id, key)."""
        tenant_id = tenant_id or f"tenant-{secrets.token_hex(4)}"
        key = create_key(init_database(self.settings.resolved_database_url), tenant_id, user_id, tier)
        return tenant_id, key

    def http(self, key: str | None = None) -> httpx.Client:
        """An HTTP client for the API, holding ``key`` when one is given."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)

    def store(self) -> ObjectStore:
        return open_store(self.settings)

    def stop(self) -> None:
        """Stop every process of the stack (again: a no-op)."""
        stop_together([*self.workers, self.api])
