"""The OCI backend driven directly (no Temporal): a step's environment never reaches a command
line (single-line values go through a 0600 env file, multi-line ones through podman's own
environment, never under a name podman itself reads), stdin and the data descriptor cross as on
bubblewrap, and the step's limits and identity hold."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.ci.sandbox import SandboxError, SandboxLimits, SandboxRequest
from tests.ci_containers.conftest import Mirror
from worker_ci.cgroups import CgroupLimiter
from worker_ci.job_users import JobUserPool
from worker_ci.oci_podman import Registry
from worker_ci.oci_sandbox import OciSandbox

UID_BASE = 1_730_000
LIMITS = SandboxLimits(memory_bytes=256 << 20, max_processes=64, max_file_bytes=64 << 20, cpu_seconds=60)
SECRET = f"secret-{uuid.uuid4().hex}"


@pytest.fixture
def sandbox(oci_mirror: Mirror, tmp_path: Path) -> Iterator[tuple[OciSandbox, Path]]:
    users = JobUserPool(tmp_path / "uids", UID_BASE, 4)
    backend = OciSandbox(
        users, Registry(oci_mirror.host, tls_verify=False), oci_mirror.base, tmp_path / "oci", CgroupLimiter.detect()
    )
    root = tmp_path / "ws" / uuid.uuid4().hex
    root.parent.mkdir()
    backend.prepare(root)
    try:
        yield backend, root
    finally:
        backend.release(root)


def run(backend: OciSandbox, root: Path, script: str, env: dict[str, str], **extra: object) -> tuple[int, str]:
    request = SandboxRequest(argv=["/bin/bash", "-c", script], env=env, root=root, cwd="/ci/work", limits=LIMITS)
    for key, value in extra.items():
        setattr(request, key, value)
    proc = backend.start(request)
    out = proc.stdout.read().decode()
    code = proc.wait(60)
    proc.finish()
    return code, out


def podman_command_lines() -> list[bytes]:
    lines = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                lines.append(Path(f"/proc/{entry}/cmdline").read_bytes())
            except OSError:
                continue
    return [line for line in lines if b"podman" in line]


def test_secrets_stay_off_command_lines_and_multi_line_values_arrive(sandbox: tuple[OciSandbox, Path]) -> None:
    backend, root = sandbox
    request = SandboxRequest(
        argv=["/bin/bash", "-c", 'echo "one=$ONE"; printf "multi=%s\\n" "$MULTI"; sleep 2'],
        env={"ONE": SECRET, "MULTI": f"{SECRET}\nline two", "PATH": "/usr/bin:/bin"},
        root=root,
        cwd="/ci/work",
        limits=LIMITS,
    )
    proc = backend.start(request)
    time.sleep(1)
    seen = podman_command_lines()
    out = proc.stdout.read().decode()
    assert proc.wait(60) == 0, out
    proc.finish()
    assert seen, "no podman process was seen running"
    assert not any(SECRET.encode() in line for line in seen)
    assert f"one={SECRET}" in out and f"multi={SECRET}\nline two" in out, out
    # The env file is gone once the step is.
    assert not list((root.parent.parent / "oci").glob("env-*"))


def test_a_multi_line_value_under_a_name_podman_reads_is_refused(sandbox: tuple[OciSandbox, Path]) -> None:
    backend, root = sandbox
    with pytest.raises(SandboxError, match="CONTAINERS_CONF"):
        run(backend, root, "true", {"CONTAINERS_CONF": "a\nb"})


def test_stdin_data_descriptor_identity_and_limits(sandbox: tuple[OciSandbox, Path]) -> None:
    backend, root = sandbox
    read_end, write_end = os.pipe()
    stdin_read, stdin_write = os.pipe()
    os.write(stdin_write, b"from-the-worker\n")
    os.close(stdin_write)
    script = (
        'read line; echo "stdin=$line"; echo -n data-out >&3; echo "uid=$(id -u)"; '
        "grep CapEff /proc/self/status; touch /etc/x 2>/dev/null || echo ROOT_READ_ONLY; "
        "python3 -c 'import os\nfor _ in range(200): os.fork() or os._exit(0)' 2>&1 | tail -1 || true"
    )
    try:
        code, out = run(backend, root, script, {"PATH": "/usr/bin:/bin"}, stdin_fd=stdin_read, data_fd=write_end)
    finally:
        os.close(write_end)
        os.close(stdin_read)
    data = os.read(read_end, 100)
    os.close(read_end)
    assert code == 0, out
    assert "stdin=from-the-worker" in out and data == b"data-out", (out, data)
    uid = int(out.split("uid=")[1].split()[0])
    assert UID_BASE <= uid < UID_BASE + 4
    assert "CapEff:\t0000000000000000" in out and "ROOT_READ_ONLY" in out, out
    # 200 forks against a limit of 64 processes.
    assert "BlockingIOError" in out, out
