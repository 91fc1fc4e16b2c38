"""The host side of a CI step's process, shared by the sandbox backends: the Popen plumbing, and
the wrappers a step's argv gets for its rlimits and its data descriptor."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import IO, TypedDict, Unpack

from activities.ci.sandbox import SandboxError, SandboxLimits


class PopenProcess:
    """Shared Popen plumbing; subclasses say how to find and signal the tree."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    @property
    def stdout(self) -> IO[bytes]:
        assert self._proc.stdout is not None
        return self._proc.stdout

    @property
    def pid(self) -> int:
        return self._proc.pid

    def poll(self) -> int | None:
        return self._proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._proc.wait(timeout)

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def finish(self) -> list[str]:
        return []


class StepOptions(TypedDict, total=False):
    """What a sandbox backend sets of a step's process: its directory, environment, descriptors."""

    cwd: str | Path
    env: Mapping[str, str]
    pass_fds: Collection[int]


def popen_step(argv: Sequence[str], stdin_fd: int | None, **options: Unpack[StepOptions]) -> subprocess.Popen[bytes]:
    """Start a step's process (or what runs it): stdin from ``stdin_fd`` (none: ``/dev/null``),
    stdout and stderr into one pipe, the log's, and a session of its own, so that a signal to
    its group reaches the whole tree."""
    return subprocess.Popen(
        argv,
        stdin=stdin_fd if stdin_fd is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        **options,
    )


def data_fd_wrapper(data_fd: int | None) -> list[str]:
    """Inside the sandbox, after the uid drop: the worker's ``data_fd`` becomes descriptor 3
    (bubblewrap's own descriptors may hold that number outside; inside, they are the job's
    copies, so replacing one there changes nothing of bubblewrap's)."""
    if data_fd is None:
        return []
    fd = int(data_fd)
    moves = "" if fd == 3 else f"exec 3>&{fd} {fd}>&-; "
    # bash: dash takes only one-digit descriptors in a redirection.
    return ["/bin/bash", "-c", moves + 'exec "$@"', "bash"]


def prlimit_argv(limits: SandboxLimits | None) -> list[str]:
    if limits is None:
        return []
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        raise SandboxError("prlimit (util-linux) is required to limit CI jobs")
    return [
        prlimit,
        f"--as={limits.memory_bytes}",
        f"--nproc={limits.max_processes}",
        f"--fsize={limits.max_file_bytes}",
        f"--cpu={limits.cpu_seconds}",
        "--core=0",
        "--",
    ]
