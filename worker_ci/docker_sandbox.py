"""The Docker backend for CI jobs: each command in a fresh container (see ``DockerSandbox``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from activities.ci.sandbox import JobOwner, SandboxError, SandboxRequest
from worker_ci.host_view import MOUNT_POINT
from worker_ci.job_users import JobUserPool
from worker_ci.step_process import PopenProcess, popen_step


class _DockerProcess(PopenProcess):
    def __init__(self, proc: subprocess.Popen[bytes], docker: str, name: str) -> None:
        super().__init__(proc)
        self._docker = docker
        self._name = name

    def host_pids(self) -> list[int]:
        out = subprocess.run(
            [self._docker, "top", self._name, "-eo", "pid"], capture_output=True, text=True, check=False
        ).stdout
        return sorted(int(x) for x in out.split() if x.isdigit())

    def terminate_tree(self) -> None:
        subprocess.run([self._docker, "kill", "--signal", "TERM", self._name], capture_output=True, check=False)

    def kill_tree(self) -> None:
        subprocess.run([self._docker, "kill", self._name], capture_output=True, check=False)
        self._signal_group(signal.SIGKILL)


class DockerSandbox:
    """Each command in a fresh container (``--rm``, no capabilities, no network), as the job's
    own leased uid over the same root-owned layout as bubblewrap's. Docker's bridge network
    reaches the host and its neighbours, so this backend refuses jobs that ask for network."""

    name = "docker"
    supports_network = False

    def __init__(self, image: str, users: JobUserPool, docker: str | None = None) -> None:
        found = docker or shutil.which("docker")
        if found is None:
            raise SandboxError("docker CLI not found")
        probe = subprocess.run([found, "info", "--format", "{{.ServerVersion}}"], capture_output=True, check=False)
        if probe.returncode != 0:
            raise SandboxError("no Docker daemon is reachable")
        self._docker = found
        self._image = image
        self._users = users

    def mount_point(self, root: Path) -> str:
        return MOUNT_POINT

    def prepare(self, root: Path) -> JobOwner:
        return self._users.lease_root(root)

    def release(self, root: Path) -> None:
        self._users.release_root(root)

    def start(self, request: SandboxRequest) -> _DockerProcess:
        owner = self._users.owner_of(request.root)
        if request.network:
            raise SandboxError("the docker backend gives jobs no network")
        if request.data_fd is not None:
            raise SandboxError("the docker backend cannot pass a data descriptor into a container")
        name = f"leasehold-ci-{os.urandom(6).hex()}"
        limits = request.limits
        args = [
            self._docker,
            "run",
            "--rm",
            *(["--interactive"] if request.stdin_fd is not None else []),
            "--name",
            name,
            "--network",
            "none",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--user",
            f"{owner.uid}:{owner.gid}",
            "-v",
            f"{request.root}:{MOUNT_POINT}",
            "-v",
            f"{request.root / 'tmp'}:/tmp",
            "-w",
            request.cwd,
        ]
        if limits is not None:
            args += [
                "--memory",
                str(limits.memory_bytes),
                "--pids-limit",
                str(limits.max_processes),
                "--ulimit",
                f"fsize={limits.max_file_bytes}",
                "--ulimit",
                f"cpu={limits.cpu_seconds}",
            ]
        for key, value in request.env.items():
            args += ["-e", f"{key}={value}"]
        args += [self._image, *request.argv]
        proc = popen_step(args, request.stdin_fd)
        return _DockerProcess(proc, self._docker, name)
