"""``leasehold up`` end to end: the whole embedded stack as a subprocess, driven over real HTTP and gRPC.

Start it on a temp data dir and free ports, use the key it created, see the Web UI answer,
watch it restart a crashed child, stop it with Ctrl-C (no process left), start it again on
the same data dir and find the data, stop it with SIGTERM (in order, each child gracefully),
then kill -9 the supervisor and see every child go.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from leasehold.devserver import free_port, port_is_free
from testing.harness import REPO_ROOT, lasting_port

pytestmark = pytest.mark.slow

START_TIMEOUT = 150.0
STOP_TIMEOUT = 60.0
UNPOLLED_QUEUE = "leasehold-up-test-unpolled"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


# Processes, read from /proc ---------------------------------------------------------------


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time) of a live process, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0], int(fields[19])


def process_tree(root: int) -> dict[int, int]:
    """Every descendant of ``root`` (and root): pid -> start time, which tells a reused pid apart."""
    parents: dict[int, int] = {}
    starts: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            parents[int(entry)], starts[int(entry)] = st[0], st[2]
    tree = {root}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return {pid: starts[pid] for pid in tree if pid in starts}


def survivors(tree: dict[int, int]) -> list[str]:
    out = []
    for pid, start in tree.items():
        st = _stat(pid)
        if st is not None and st[2] == start and st[1] != "Z":
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                cmd = "?"
            out.append(f"{pid}: {cmd}")
    return out


def wait_gone(tree: dict[int, int], timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := survivors(tree)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def child_pid(tree: dict[int, int], marker: str) -> int:
    for pid in tree:
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode():
                return pid
        except OSError:
            continue
    raise AssertionError(f"no child runs {marker!r}")


# The stack -------------------------------------------------------------------------------


@dataclass
class Stack:
    proc: subprocess.Popen
    out: Path
    err: Path
    api: str
    ui: str
    temporal: str
    data_dir: Path | None = None

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def diagnostics(self) -> str:
        """What the stack printed, and the end of each child's own log: a child that exited
        with the wrong code says why there."""
        logs = sorted((self.data_dir / "logs").glob("*.log")) if self.data_dir else []
        tails = "".join(f"\n--- {p.name}:\n{p.read_text(errors='replace')[-1500:]}" for p in logs)
        return f"stdout:\n{self.output()}\nstderr:\n{self.err.read_text(errors='replace')[-4000:]}{tails}"


@pytest.fixture
def ports() -> tuple[int, int, int]:
    """The stack is stopped and started again on these: ports no other test is handed meanwhile."""
    return lasting_port(), lasting_port(), lasting_port()


def start_stack(data_dir: Path, ports: tuple[int | None, int, int], run: str, **env: str) -> Stack:
    """``leasehold up`` on these ports (an API port of None: no ``--api-port``, the settings'
    from ``env``), once it printed its banner."""
    api_port, temporal_port, ui_port = ports
    out, err = data_dir.parent / f"up-{run}.out", data_dir.parent / f"up-{run}.err"
    flags = ["--temporal-port", str(temporal_port), "--ui-port", str(ui_port)]
    if api_port is not None:
        flags = ["--api-port", str(api_port), *flags]
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "up", "--data-dir", str(data_dir), *flags],
            cwd=REPO_ROOT,
            env=_env(**env),
            stdin=subprocess.DEVNULL,
            stdout=o,
            stderr=e,
        )
    stack = Stack(proc, out, err, "", "", f"127.0.0.1:{temporal_port}", data_dir)
    deadline = time.monotonic() + START_TIMEOUT
    while "Press Ctrl-C to stop." not in stack.output():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"leasehold up did not come up (code {proc.poll()}):\n{stack.diagnostics()}")
        time.sleep(0.2)
    text = stack.output()
    api = re.search(r"API:\s+(http://\S+)", text)
    ui = re.search(r"Temporal Web UI:\s+(http://\S+)", text)
    assert api and ui, text
    stack.api, stack.ui = api.group(1), ui.group(1)
    assert stack.api == f"http://127.0.0.1:{api_port or env.get('LEASEHOLD_API_PORT', 8000)}"
    assert stack.ui == f"http://127.0.0.1:{ui_port}"
    assert f"{stack.api}/docs" in text
    return stack


@pytest.fixture
def stacks() -> Iterator[list[Stack]]:
    """Whatever a test started is killed at the end, whatever happened."""
    started: list[Stack] = []
    yield started
    for stack in started:
        tree = process_tree(stack.proc.pid) if stack.proc.poll() is None else {}
        if stack.proc.poll() is None:
            stack.proc.kill()
            stack.proc.wait(timeout=10)
        for pid in tree:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


async def _start_probe(address: str, workflow_id: str) -> None:
    client = await Client.connect(address)
    await client.start_workflow("LeaseholdUpProbe", id=workflow_id, task_queue=UNPOLLED_QUEUE)


async def _describe_probe(address: str, workflow_id: str) -> tuple[WorkflowExecutionStatus | None, str]:
    client = await Client.connect(address)
    desc = await client.get_workflow_handle(workflow_id).describe()
    return desc.status, desc.workflow_type


def test_up_stop_restart_and_no_orphans(tmp_path: Path, ports: tuple[int, int, int], stacks: list[Stack]) -> None:
    data_dir = tmp_path / "data"

    # First start: a fresh data dir gets a key, printed once and written 0600.
    stack = start_stack(data_dir, ports, "first")
    stacks.append(stack)
    key_file = data_dir / "api-key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    key = key_file.read_text().strip()
    assert key.startswith("lh_")
    assert key in stack.output()
    auth = {"Authorization": f"Bearer {key}"}

    health = httpx.get(f"{stack.api}/healthz", timeout=10)
    assert health.status_code == 200, health.text
    assert httpx.get(f"{stack.api}/v1/repos", timeout=10).status_code == 401
    assert httpx.get(f"{stack.api}/v1/repos", headers=auth, timeout=10).status_code == 200
    assert httpx.get(f"{stack.api}/docs", timeout=10).status_code == 200
    assert httpx.get(stack.ui, timeout=10, follow_redirects=True).status_code == 200

    # Something durable to find after the restart: a workflow on a queue nobody polls.
    probe_id = f"up-probe-{uuid.uuid4().hex[:8]}"
    asyncio.run(_start_probe(stack.temporal, probe_id))

    # A crashed child is restarted.
    tree = process_tree(stack.proc.pid)
    api_pid = child_pid(tree, "cli.main api")
    os.kill(api_pid, signal.SIGKILL)
    deadline = time.monotonic() + 90
    while True:
        assert time.monotonic() < deadline, f"the API was not restarted:\n{stack.diagnostics()}"
        try:
            if httpx.get(f"{stack.api}/healthz", timeout=5).status_code == 200:
                new_pid = child_pid(process_tree(stack.proc.pid), "cli.main api")
                if new_pid != api_pid:
                    break
        except (httpx.HTTPError, AssertionError):
            pass
        time.sleep(0.3)
    assert httpx.get(f"{stack.api}/v1/repos", headers=auth, timeout=10).status_code == 200

    # Ctrl-C stops everything: the supervisor exits and no process of its tree is left.
    # Take the whole tree first (supervisor, temporal, api, three workers); on a loaded
    # machine a child may be between a crash and its restart, so give the supervisor time.
    deadline = time.monotonic() + 60
    tree = process_tree(stack.proc.pid)
    while len(tree) < 6 and time.monotonic() < deadline:
        time.sleep(0.5)
        tree = process_tree(stack.proc.pid)
    assert len(tree) >= 6, f"{tree}\n{stack.diagnostics()}"
    stack.proc.send_signal(signal.SIGINT)
    assert stack.proc.wait(timeout=STOP_TIMEOUT) == 0, stack.diagnostics()
    assert wait_gone(tree, 10) == []
    assert "leasehold stopped" in stack.output()
    for port in ports:
        assert port_is_free(port), f"port {port} still bound after stop"

    # Second start on the same data dir: no new key, the old one works, Temporal kept its data.
    stack = start_stack(data_dir, ports, "second")
    stacks.append(stack)
    assert key not in stack.output()
    assert key_file.read_text().strip() == key
    assert httpx.get(f"{stack.api}/v1/repos", headers=auth, timeout=10).status_code == 200
    assert asyncio.run(_describe_probe(stack.temporal, probe_id)) == (
        WorkflowExecutionStatus.RUNNING,
        "LeaseholdUpProbe",
    )

    # SIGTERM stops in order, each child gracefully: the API, then the workers, Temporal last.
    api_log = data_dir / "logs" / "api.log"
    finished_before = api_log.read_text().count("Finished server process")
    tree = process_tree(stack.proc.pid)
    stack.proc.send_signal(signal.SIGTERM)
    assert stack.proc.wait(timeout=STOP_TIMEOUT) == 0, stack.diagnostics()
    assert wait_gone(tree, 10) == []
    stopped = re.findall(r"leasehold\.up: (\S+) stopped \(exit code (-?\d+)\)", stack.err.read_text())
    names = [name for name, _code in stopped]
    assert names[0] == "api" and names[-1] == "temporal", stopped
    assert sorted(names[1:-1]) == ["orchestration", "worker-ci", "worker-gpu"], stopped
    codes = dict(stopped)
    assert all(codes[name] == "0" for name in names[1:]), (stopped, stack.diagnostics())
    # uvicorn re-raises SIGTERM once it has shut down gracefully, so the API's code is -15.
    assert codes["api"] in ("0", "-15"), stopped
    assert api_log.read_text().count("Finished server process") == finished_before + 1

    # kill -9 of the supervisor: no chance to clean up, yet every child goes (PDEATHSIG).
    stack = start_stack(data_dir, ports, "third")
    stacks.append(stack)
    tree = process_tree(stack.proc.pid)
    assert len(tree) >= 6, tree
    stack.proc.kill()
    stack.proc.wait(timeout=10)
    assert wait_gone(tree, STOP_TIMEOUT) == []


def _run_up(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "up", *args],
        cwd=REPO_ROOT,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("leasehold: error: ")
    return lines[0]


@pytest.mark.parametrize("which", ["--api-port", "--temporal-port", "--ui-port"])
def test_port_in_use(tmp_path: Path, which: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        ports = {"--api-port": free_port(), "--temporal-port": free_port(), "--ui-port": free_port(), which: taken}
        args = ["--data-dir", str(tmp_path / "d")]
        for flag, port in ports.items():
            args += [flag, str(port)]
        line = _one_line_error(_run_up(args))
    assert str(taken) in line
    assert "in use" in line
    assert which in line


@pytest.mark.parametrize("data_dir", ["/proc/leasehold-test", "/dev/null/leasehold"])
def test_unwritable_data_dir(data_dir: str) -> None:
    line = _one_line_error(_run_up(["--data-dir", data_dir, "--api-port", str(free_port())]))
    assert data_dir in line
    assert "not writable" in line


def test_missing_temporal_binary(tmp_path: Path) -> None:
    missing = tmp_path / "no-such" / "temporal"
    line = _one_line_error(
        _run_up(
            [
                *("--data-dir", str(tmp_path / "d"), "--api-port", str(free_port())),
                *("--temporal-port", str(free_port()), "--ui-port", str(free_port())),
            ],
            LEASEHOLD_TEMPORAL_BINARY=str(missing),
        )
    )
    assert str(missing) in line
    assert not (tmp_path / "d" / "temporal.db").exists()


def test_data_dir_in_use_by_another_stack(tmp_path: Path) -> None:
    import fcntl

    data = tmp_path / "d"
    data.mkdir()
    with (data / "up.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write("4242\n")
        lock.flush()
        line = _one_line_error(_run_up(["--data-dir", str(data), "--api-port", str(free_port())]))
    assert str(data) in line
    assert "in use by another leasehold up (pid 4242)" in line
