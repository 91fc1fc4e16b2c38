"""Real processes for tests: the API and workers as subprocesses, with fault injection.

Every process is started in its own process group, logs to a file under the test's tmp dir,
and is killed (whole group) when the test ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from leasehold.devserver import free_port, log_tail, port_is_free
from leasehold.settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

# This file is testing/harness.py in a source checkout (tests run from one).
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ManagedProcess:
    """A subprocess under test control: start, wait healthy, signal, stop."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    health_url: str | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _STARTED.append(self)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_healthy(self, timeout: float = 60.0) -> ManagedProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited early:\n{self.log_tail()}")
            if self.health_url is None or answers_ok(self.health_url):
                return self
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} not healthy after {timeout}s:\n{self.log_tail()}")

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process itself (not the group), as a cloud provider would."""
        os.kill(self.pid, sig)

    def kill9(self) -> None:
        """kill -9 the whole process group: no chance to clean up."""
        if self.alive():
            os.killpg(self.pid, signal.SIGKILL)
            assert self.proc is not None
            self.proc.wait(timeout=10)

    def terminate(self) -> None:
        """Ask the whole group to stop (SIGTERM, after SIGCONT in case a test stopped it); no wait."""
        if self.alive():
            try:
                os.killpg(self.pid, signal.SIGCONT)
                os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        self.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        return self.proc.returncode

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)


def answers_ok(url: str) -> bool:
    """Whether ``url`` answers 200 within two seconds (a health check)."""
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def lasting_port(span: int = 8000) -> int:
    """A free loopback port below the kernel's ephemeral range, for a test that stops a server
    and starts it again on the same port. A port from ``free_port`` lies inside that range:
    between the stop and the restart the kernel may hand it to another test's ``bind(0)`` or
    outgoing connection, and the restarted server then loses it (or the test talks to the
    other one). Nothing is handed a port below the range unless it asks for it by number."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    chooser = random.SystemRandom()
    for _ in range(100):
        port = chooser.randrange(max(1024, low - span), low)
        if port_is_free(port):
            return port
    raise AssertionError(f"no free port below {low}")


def stop_together(procs: Iterable[ManagedProcess], timeout: float = 20.0) -> None:
    """Stop several processes at once: all are told first, then each is waited for, so the
    slowest shutdown, not the sum of them, is what a test's teardown costs."""
    procs = list(procs)
    for proc in procs:
        proc.terminate()
    deadline = time.monotonic() + timeout
    for proc in procs:
        proc.stop(timeout=max(0.1, deadline - time.monotonic()))


def unique_prefix() -> str:
    """A queue prefix so tests sharing one dev server never see each other's tasks."""
    return f"t{uuid.uuid4().hex[:8]}."


def process_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}
    env.update(settings.to_env())
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def start_api(settings: Settings, logs: Path) -> tuple[ManagedProcess, str]:
    """``leasehold api`` on a free port; returns the process and its base URL."""
    port = settings.api_port
    base = f"http://127.0.0.1:{port}"
    proc = ManagedProcess(
        "api",
        [sys.executable, "-m", "cli.main", "api"],
        process_env(settings, LEASEHOLD_PUBLIC_BASE_URL=base),
        logs / "api.log",
        f"{base}/healthz",
    ).start()
    return proc, base


def start_worker(settings: Settings, kind: str, logs: Path, *args: str, name: str | None = None) -> ManagedProcess:
    """``leasehold worker <kind> ...`` with its health endpoint on a free port."""
    port = free_port()
    name = name or f"worker-{kind}"
    return ManagedProcess(
        name,
        [sys.executable, "-m", "cli.main", "worker", kind, *args],
        process_env(settings, LEASEHOLD_METRICS_PORT=str(port)),
        logs / f"{name}.log",
        f"http://127.0.0.1:{port}/healthz",
    ).start()


# Every process a test started, so the session can sweep what a failing test left behind.
_STARTED: list[ManagedProcess] = []


def stop_all_started() -> int:
    """Kill (whole group) every process tests started that is still running; returns how many."""
    left = [p for p in _STARTED if p.alive()]
    for proc in left:
        try:
            os.killpg(proc.pid, signal.SIGCONT)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for proc in left:
        assert proc.proc is not None
        try:
            proc.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    _STARTED.clear()
    return len(left)


def register_repo_row(settings: Settings, tenant_id: str, repo_id: str, name: str, clone_url: str) -> None:
    """Put a repository straight into the leasehold database (tests that push through Temporal,
    not the API): the CI worker reads a job's tenant and clone URL from this row, never from
    the job's input."""
    from leasehold.database import init_database
    from leasehold.records.ci.repos import Repository

    factory = init_database(settings.resolved_database_url)
    with factory.begin() as session:
        if session.get(Repository, repo_id) is None:
            session.add(
                Repository(
                    id=repo_id, tenant_id=tenant_id, name=name, clone_url=clone_url, webhook_secret="test-secret-0"
                )
            )


@contextlib.asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[str]:
    """Serve ``app`` over real HTTP in this event loop, on a free loopback port; yields its URL
    once the server accepts connections, and stops it on exit."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 30
    while not server.started:
        assert not task.done(), "the API did not start"
        assert time.monotonic() < deadline, "the API did not start in 30 s"
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
