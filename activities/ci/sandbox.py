"""What the CI job activity needs from a sandbox: start a command, read its output, kill its tree.

Backends live in ``worker_ci/`` (bubblewrap, Docker, unsafe plain process); the worker picks one
from settings and injects it into ``CIJobActivities``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandboxed step: ``memory_bytes`` and ``max_processes`` hold for the whole
    step (a cgroup, where the backend has one), the others per process (rlimits)."""

    memory_bytes: int
    max_processes: int
    max_file_bytes: int
    cpu_seconds: int
    # Size of the step's /dev/shm (a tmpfs, counted in ``memory_bytes`` too).
    shm_bytes: int = 64 << 20


@dataclass
class SandboxRequest:
    """One command to run in a fresh sandbox over a job's workspace.

    ``root`` is the host directory made by ``Sandbox.prepare`` (``activities.ci.jobroot``):
    ``work/`` (the checkout), ``tmp/``, ``home/`` and ``actions/`` belong to the job's user;
    ``runner/`` (step scripts, the job-side helper) and ``io/`` (this step's ``$GITHUB_OUTPUT``
    and kin) are directories the job cannot change. The sandbox shows ``root`` at
    ``Sandbox.mount_point(root)`` and nothing else of the host's files except read-only system
    directories. ``cwd`` and ``argv`` are paths as seen inside.

    ``stdin_fd`` (a descriptor the worker opened) becomes the process's standard input instead
    of ``/dev/null``; ``data_fd`` becomes its descriptor 3. Both are how bytes cross between the
    worker and the job-side helper: through descriptors, never through a path.
    """

    argv: list[str]
    env: dict[str, str]
    root: Path
    cwd: str
    network: bool = False
    limits: SandboxLimits | None = None
    name: str = "job"
    extra: dict[str, str] = field(default_factory=dict)
    stdin_fd: int | None = None
    data_fd: int | None = None
    # ``actions/`` (remote actions' files) is read-only to the job's steps; only the job-side
    # helper, which puts them there and removes them, sees it writable.
    writable_actions: bool = False
    # Host paths (outside any job tree: the worker's own) shown inside at the given paths,
    # e.g. the attempt's artifact service socket; only the bubblewrap sandbox honours them.
    binds: tuple[tuple[str, str], ...] = ()


class SandboxProcess(Protocol):
    """A running sandboxed command."""

    @property
    def stdout(self) -> IO[bytes]:
        """Combined stdout and stderr."""

    @property
    def pid(self) -> int:
        """Host pid of the process the worker started (its exit ends the step; the job
        supervisor waits on it through a pidfd rather than polling)."""

    def poll(self) -> int | None:
        """Exit status, or ``None`` while running."""

    def wait(self, timeout: float | None = None) -> int:
        """Wait for exit (raises ``subprocess.TimeoutExpired``)."""

    def terminate_tree(self) -> None:
        """SIGTERM to every process of the sandbox."""

    def kill_tree(self) -> None:
        """SIGKILL the whole sandbox; nothing of it survives."""

    def host_pids(self) -> list[int]:
        """Host pids of the processes in the sandbox (for tests and diagnostics)."""

    def finish(self) -> list[str]:
        """Release what the step held (cgroup, network); returns notes for the job's log,
        such as an out-of-memory kill."""


@dataclass(frozen=True)
class JobOwner:
    """The host uid and gid a job's files belong to (``None`` fields: leave as created)."""

    uid: int | None = None
    gid: int | None = None


class Sandbox(Protocol):
    """A sandbox backend."""

    name: str

    def mount_point(self, root: Path) -> str:
        """Where the workspace root appears inside the sandbox."""

    @property
    def supports_network(self) -> bool:
        """Whether the backend can give a job (filtered) network."""

    def prepare(self, root: Path) -> JobOwner:
        """Make ``root``'s layout for one job attempt and lease it a user; the files the job
        may write must then belong to the returned owner."""

    def release(self, root: Path) -> None:
        """Give back what ``prepare`` leased (after every process of the job is gone)."""

    def start(self, request: SandboxRequest) -> SandboxProcess:
        """Start ``request.argv``; raises ``SandboxError`` when the sandbox cannot start."""


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the job): misconfiguration or missing backend."""
