"""``leasehold up``: the whole stack on one machine, no Docker.

Starts the Temporal dev server (SQLite in the data dir, fairness on, search attributes
registered), then the API, the orchestration worker, one GPU worker and one CI worker; waits
until each is healthy; prints the URLs. SIGINT/SIGTERM stops everything in order (API first,
Temporal last). Children are in their own process groups and get SIGTERM if this process
dies, so none is left behind. A crashed child is restarted with back-off.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from cli.common import UsageError
from cli.stack_lock import lock_data_dir
from leasehold.data_dir import PRIVATE_UMASK, secure_data_dir
from leasehold.devserver import (
    MissingBinary,
    dev_server_command,
    find_temporal_binary,
    free_port,
    log_tail,
)
from leasehold.settings import Settings
from workflows import search_attributes as sa

log = logging.getLogger("leasehold.up")
logging.getLogger("httpx").setLevel(logging.WARNING)

_PR_SET_PDEATHSIG = 1
STOP_GRACE_SECONDS = 20.0
HEALTH_TIMEOUT_SECONDS = 120.0


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGTERM when the supervisor dies, even by kill -9."""

    def preexec() -> None:
        # Runs in the child between fork and exec.
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        except OSError:
            pass
        # The supervisor may have died between fork and prctl; then no signal will ever come.
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


@dataclass
class Child:
    """One supervised process."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    health_url: str | None
    proc: subprocess.Popen | None = None
    restarts: int = 0
    next_restart_at: float = 0.0
    started_at: float = field(default=0.0)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        out = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            # Own session: a terminal's Ctrl-C reaches only the supervisor, which stops
            # the children in order.
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()),
            # Whoever started the supervisor, what children write in the data dir (temporal.db,
            # leasehold.db, logs) is owner-only; the CI worker sets its own (CI_WORKER_UMASK).
            umask=PRIVATE_UMASK,
        )
        out.close()
        self.started_at = time.monotonic()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def healthy(self) -> bool:
        if not self.alive() or self.health_url is None:
            return self.alive()
        try:
            return httpx.get(self.health_url, timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def terminate(self) -> None:
        """Ask the child's whole process group to stop (SIGTERM); does not wait."""
        if not self.alive():
            return
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    def wait_stopped(self, deadline: float) -> None:
        """Wait until the child exits; SIGKILL its process group at ``deadline``."""
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop in time; killing it", self.name)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        log.info("%s stopped (exit code %s)", self.name, self.proc.returncode)
        # Anything the child left behind in its group (it normally reaps its own children).
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        self.terminate()
        self.wait_stopped(time.monotonic() + grace)

    def log_tail(self, lines: int = 15) -> str:
        return log_tail(self.log_path, lines)


def _check_data_dir(data_dir: Path) -> None:
    try:
        secure_data_dir(data_dir)
        probe = data_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"data dir {data_dir} is not writable: {exc.strerror or exc}") from None


def _check_ports(ports: dict[str, int]) -> None:
    for name, port in ports.items():
        if not (0 < port < 65536):
            raise UsageError(f"{name} {port} is not a valid port")
        flag = f"--{name.replace(' ', '-')}"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except PermissionError:
                raise UsageError(f"{name} {port} needs privileges (choose one above 1023 with {flag})") from None
            except OSError:
                raise UsageError(f"{name} {port} is already in use (choose another with {flag})") from None


def _first_key(settings: Settings) -> str | None:
    """On a fresh data dir: create an admin key, write it (0600), return it to print once."""
    from leasehold.database import init_database
    from leasehold.records.api_keys import create_key

    path = settings.data_dir / "api-key"
    if path.exists():
        return None
    key = create_key(init_database(settings.resolved_database_url), "default", "admin", "paid")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key


class _StopRequested(Exception):
    """SIGINT/SIGTERM arrived while the stack was still starting."""


def _wait_healthy(children: list[Child], deadline: float, stop_requested: Callable[[], bool]) -> None:
    pending = list(children)
    while pending:
        if stop_requested():
            raise _StopRequested
        for child in list(pending):
            if not child.alive():
                raise UsageError(
                    f"{child.name} exited during start-up (code {child.proc.returncode if child.proc else '?'}); "
                    f"see {child.log_path}\n{child.log_tail()}"
                )
            if child.healthy():
                log.info("%s is healthy", child.name)
                pending.remove(child)
        if pending and time.monotonic() > deadline:
            names = ", ".join(c.name for c in pending)
            raise UsageError(f"timed out waiting for {names} to become healthy; logs in {pending[0].log_path.parent}")
        if pending:
            time.sleep(0.3)


def build_children(
    settings: Settings, api_port: int, temporal_port: int, ui_port: int | None, temporal_bin: str
) -> tuple[Child, list[Child]]:
    """The dev server and the application processes, in start order."""
    logs = settings.data_dir / "logs"
    base_env = {**os.environ, **settings.to_env()}
    base_env.update(
        {
            "LEASEHOLD_TEMPORAL_ADDRESS": f"127.0.0.1:{temporal_port}",
            "LEASEHOLD_API_PORT": str(api_port),
            "LEASEHOLD_PUBLIC_BASE_URL": settings.public_base_url or f"http://127.0.0.1:{api_port}",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if ui_port is not None and not settings.console_temporal_ui_url:
        # The console links each job's workflow to the Web UI this stack runs.
        base_env["LEASEHOLD_CONSOLE_TEMPORAL_UI_URL"] = f"http://127.0.0.1:{ui_port}"
    temporal = Child(
        name="temporal",
        argv=dev_server_command(temporal_bin, settings.data_dir / "temporal.db", temporal_port, ui_port, sa.ALL),
        env=dict(os.environ),
        log_path=logs / "temporal.log",
        health_url=None,
    )
    py = [sys.executable, "-m", "cli.main"]
    apps: list[Child] = [
        Child("api", [*py, "api"], base_env, logs / "api.log", f"http://127.0.0.1:{api_port}/healthz"),
    ]
    workers = [
        ("orchestration", ["worker", "orchestration"]),
        # With a fleet spec the controller starts and retires the GPU workers itself.
        ("fleet", ["fleet", "run", "--config", str(settings.fleet_config)])
        if settings.fleet_config is not None
        else ("worker-gpu", ["worker", "gpu", "--model", settings.gpu_model]),
        ("worker-ci", ["worker", "ci", "--labels", ",".join(settings.ci_labels)]),
    ]
    for name, args in workers:
        port = free_port()
        env = {**base_env, "LEASEHOLD_METRICS_PORT": str(port)}
        apps.append(Child(name, [*py, *args], env, logs / f"{name}.log", f"http://127.0.0.1:{port}/healthz"))
    return temporal, apps


def _wait_temporal(temporal: Child, port: int, deadline: float, stop_requested: Callable[[], bool]) -> None:
    """Wait until the frontend accepts connections and (with the UI) the Web UI answers."""
    listening = False
    while time.monotonic() < deadline:
        if stop_requested():
            raise _StopRequested
        if not temporal.alive():
            raise UsageError(
                f"the Temporal dev server exited during start-up; see {temporal.log_path}\n{temporal.log_tail()}"
            )
        if not listening:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    listening = True
            except OSError:
                pass
        if listening and temporal.healthy():
            return
        time.sleep(0.2)
    raise UsageError(f"timed out waiting for the Temporal dev server on port {port}")


def _print_urls(settings: Settings, api_port: int, temporal_port: int, ui_port: int | None, key: str | None) -> None:
    out = sys.stdout
    print("leasehold is up", file=out)
    print(f"  API:             http://127.0.0.1:{api_port}", file=out)
    print(f"  OpenAPI docs:    http://127.0.0.1:{api_port}/docs", file=out)
    print(f"  Web console:     http://127.0.0.1:{api_port}/console  (sign in with the API key)", file=out)
    if ui_port is not None:
        print(f"  Temporal Web UI: http://127.0.0.1:{ui_port}", file=out)
    print(f"  Temporal:        127.0.0.1:{temporal_port} (namespace {settings.temporal_namespace})", file=out)
    print(f"  Data dir:        {settings.data_dir}  (logs in {settings.data_dir / 'logs'})", file=out)
    if key:
        print(f"  API key (shown once; also in {settings.data_dir / 'api-key'}):\n    {key}", file=out)
    else:
        print(f"  API key:         in {settings.data_dir / 'api-key'}", file=out)
    print("Press Ctrl-C to stop.", file=out, flush=True)


def _stop_all(temporal: Child, apps: list[Child]) -> None:
    """Stop in order: the API first (no new work accepted), then the workers together, Temporal last."""
    api, workers = apps[0], apps[1:]
    api.stop()
    for child in workers:
        child.terminate()
    # Workers finish or hand back their activities in parallel, under one shared grace period.
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for child in workers:
        child.wait_stopped(deadline)
    temporal.stop()


def run_stack(settings: Settings, api_port: int, temporal_port: int, ui_port: int, headless: bool = False) -> int:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(name)s: %(message)s")
    _check_data_dir(settings.data_dir)
    lock_data_dir(settings.data_dir)  # held until this process exits
    ports = {"api port": api_port, "temporal port": temporal_port}
    if not headless:
        ports["ui port"] = ui_port
    _check_ports(ports)
    try:
        temporal_bin = find_temporal_binary(settings.temporal_binary)
    except MissingBinary as exc:
        raise UsageError(str(exc)) from None

    shown_ui_port = None if headless else ui_port
    temporal, apps = build_children(settings, api_port, temporal_port, shown_ui_port, temporal_bin)
    if shown_ui_port is not None:
        temporal.health_url = f"http://127.0.0.1:{shown_ui_port}/"
    stopping = False

    def _request_stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        if not stopping:
            log.info("received %s; stopping", signal.Signals(signum).name)
        stopping = True

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _request_stop)
    try:
        temporal.start()
        _wait_temporal(temporal, temporal_port, time.monotonic() + HEALTH_TIMEOUT_SECONDS, lambda: stopping)
        key = _first_key(settings)
        for child in apps:
            child.start()
        _wait_healthy(apps, time.monotonic() + HEALTH_TIMEOUT_SECONDS, lambda: stopping)
        _print_urls(settings, api_port, temporal_port, shown_ui_port, key)
        while not stopping:
            _supervise([temporal, *apps])
            time.sleep(0.5)
        return 0
    except _StopRequested:
        return 130
    finally:
        _stop_all(temporal, apps)
        print("leasehold stopped", file=sys.stdout, flush=True)


def _supervise(children: list[Child]) -> None:
    """Restart crashed children with exponential back-off (reset after a minute of uptime)."""
    now = time.monotonic()
    for child in children:
        if child.alive():
            if now - child.started_at > 60:
                child.restarts = 0
            continue
        if child.next_restart_at == 0.0:
            delay = min(30.0, 0.5 * 2**child.restarts)
            code = child.proc.returncode if child.proc else None
            log.error("%s exited with code %s; restarting in %.1fs (log: %s)", child.name, code, delay, child.log_path)
            child.next_restart_at = now + delay
        elif now >= child.next_restart_at:
            child.restarts += 1
            child.next_restart_at = 0.0
            child.start()
