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
    """Per-process rlimits applied to everything in the sandbox."""

    memory_bytes: int
    max_processes: int
    max_file_bytes: int
    cpu_seconds: int


@dataclass
class SandboxRequest:
    """One command to run in a fresh sandbox over a job's workspace.

    ``root`` is the host directory holding ``work/`` (the checkout), ``tmp/``, ``home/`` and
    ``runner/`` (step scripts, ``$GITHUB_OUTPUT`` files); the sandbox shows it at
    ``Sandbox.mount_point(root)`` and nothing else of the host's files except read-only system
    directories. ``cwd`` and ``argv`` are paths as seen inside.
    """

    argv: list[str]
    env: dict[str, str]
    root: Path
    cwd: str
    network: bool = False
    limits: SandboxLimits | None = None
    name: str = "job"
    extra: dict[str, str] = field(default_factory=dict)


class SandboxProcess(Protocol):
    """A running sandboxed command."""

    @property
    def stdout(self) -> IO[bytes]:
        """Combined stdout and stderr."""

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


class Sandbox(Protocol):
    """A sandbox backend."""

    name: str

    def mount_point(self, root: Path) -> str:
        """Where the workspace root appears inside the sandbox."""

    def start(self, request: SandboxRequest) -> SandboxProcess:
        """Start ``request.argv``; raises ``SandboxError`` when the sandbox cannot start."""


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the job): misconfiguration or missing backend."""
