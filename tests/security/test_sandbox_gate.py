"""The first process of a sandboxed step: every process of the sandbox starts inside the step's
cgroups and under its rlimits, and nothing of the step runs unless the worker opens the gate.
Real bubblewrap and real cgroups (the CI worker's conditions: root, cgroups with pids and
memory)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.ci.sandbox import SandboxLimits, SandboxRequest
from leasehold.settings import Settings
from worker_ci.sandbox import GATE_SCRIPT, BubblewrapSandbox, make_sandbox

LIMITS = SandboxLimits(
    memory_bytes=512 << 20, max_processes=77, max_file_bytes=3 << 20, cpu_seconds=123, shm_bytes=8 << 20
)
# /proc/<pid>/limits rows for LIMITS (soft and hard alike). The step's memory cgroup bounds its
# memory, so the address space is left unlimited (runtimes such as V8 reserve far more than
# they use); without a cgroup it would be LIMITS.memory_bytes.
EXPECTED_LIMITS = {
    "Max address space": "unlimited",
    "Max processes": str(LIMITS.max_processes),
    "Max file size": str(LIMITS.max_file_bytes),
    "Max cpu time": str(LIMITS.cpu_seconds),
    "Max core file size": "0",
}


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[BubblewrapSandbox]:
    if os.geteuid() != 0:
        pytest.skip("the bubblewrap sandbox needs a root CI worker")
    made = make_sandbox(Settings(data_dir=tmp_path / "data", ci_sandbox="bubblewrap", ci_sandbox_uid_base=1_710_000))
    assert isinstance(made, BubblewrapSandbox)
    yield made


def _limits(pid: int) -> dict[str, tuple[str, str]]:
    rows = {}
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]:
        name = line[:26].strip()
        soft, hard = line[26:].split()[:2]
        rows[name] = (soft, hard)
    return rows


def _groups(pid: int) -> dict[str, str]:
    found = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _id, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            found[c] = path
    return found


def test_every_process_of_a_step_starts_in_its_cgroups_under_its_rlimits(
    sandbox: BubblewrapSandbox, tmp_path: Path
) -> None:
    root = tmp_path / "job"
    sandbox.prepare(root)
    proc = sandbox.start(
        SandboxRequest(
            argv=["/bin/sh", "-c", "sleep 30 & sleep 30"],
            env={"PATH": "/usr/bin:/bin"},
            root=root,
            cwd="/ci/work",
            limits=LIMITS,
        )
    )
    try:
        cgroup = proc._cgroup
        assert cgroup is not None, "this host runs jobs without cgroups"
        deadline = time.monotonic() + 10
        while len(cgroup.pids()) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        members = cgroup.pids()
        # bubblewrap, its namespace's init, the job's shell and its two sleeps.
        assert len(members) >= 5, members
        sandboxed = set(proc.host_pids()) | {proc.pid}
        assert sandboxed <= set(members), (sandboxed, members)
        for pid in sandboxed:
            groups = _groups(pid)
            if cgroup.version == 1:
                assert groups["pids"].endswith(f"/leasehold-ci/{cgroup.pids_dir.name}"), groups
                assert groups["memory"].endswith(f"/leasehold-ci/{cgroup.memory_dir.name}"), groups
            else:
                assert groups[""].endswith(f"/leasehold-ci/{cgroup.pids_dir.name}"), groups
            limits = _limits(pid)
            memory_max = (
                cgroup.memory_dir / ("memory.max" if cgroup.version == 2 else "memory.limit_in_bytes")
            ).read_text()
            assert int(memory_max) == LIMITS.memory_bytes, memory_max
            for name, value in EXPECTED_LIMITS.items():
                assert limits[name] == (value, value), (pid, name, limits[name])
    finally:
        proc.kill_tree()
        proc.wait(10)
        proc.finish()
        sandbox.release(root)
    assert not cgroup.memory_dir.exists() and not cgroup.pids_dir.exists()


@pytest.mark.parametrize("said", [b"", b"no\n", b"go"])
def test_a_gate_not_opened_with_go_runs_nothing(tmp_path: Path, said: bytes) -> None:
    marker = tmp_path / "ran"
    read, write = os.pipe()
    proc = subprocess.Popen(["/bin/sh", "-c", GATE_SCRIPT, "sh", "--", "/usr/bin/touch", str(marker)], stdin=read)
    os.close(read)
    os.write(write, said)
    os.close(write)
    assert proc.wait(10) == 125
    assert not marker.exists()


def test_a_gate_opened_with_go_runs_the_command_with_null_stdin(tmp_path: Path) -> None:
    out = tmp_path / "stdin"
    read, write = os.pipe()
    proc = subprocess.Popen(
        ["/bin/sh", "-c", GATE_SCRIPT, "sh", "--", "/bin/sh", "-c", f"readlink /proc/self/fd/0 > {out}"], stdin=read
    )
    os.close(read)
    os.write(write, b"go\nmore for the job\n")
    os.close(write)
    assert proc.wait(10) == 0
    assert out.read_text().strip() == "/dev/null"


def test_the_gate_shell_fails_when_it_cannot_join_a_group(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    read, write = os.pipe()
    missing = tmp_path / "no-such-cgroup" / "tasks"
    proc = subprocess.Popen(
        ["/bin/sh", "-c", GATE_SCRIPT, "sh", str(missing), "--", "/usr/bin/touch", str(marker)],
        stdin=read,
        stderr=subprocess.DEVNULL,
    )
    os.close(read)
    # The shell may be gone before the worker says go (the worker then reports a sandbox error).
    with contextlib.suppress(BrokenPipeError):
        os.write(write, b"go\n")
    os.close(write)
    assert proc.wait(10) == 125
    assert not marker.exists()
