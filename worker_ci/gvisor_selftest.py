"""The start-up self-test of the gVisor backend (``worker_ci.gvisor``): the checks a runsc must
pass before it runs jobs, and what a failure means."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from activities.ci.sandbox import SandboxError, SandboxLimits
from worker_ci.gvisor_bundle import INIT_ARGV

SELF_TEST_LIMITS = SandboxLimits(
    memory_bytes=128 << 20,
    max_processes=256,
    # Larger than the memory check's file: the memory bound, not the file size, must stop it.
    max_file_bytes=1 << 30,
    cpu_seconds=120,
    shm_bytes=1 << 30,
)
SELF_TEST_SECONDS = 60.0
FILE_PREFIX = b"zero\n"


@dataclass(frozen=True)
class SelfTestCheck:
    """One check of the start-up self-test: ``argv`` run as a step of a throwaway job.

    ``lines``: lines its output must include (exit status 0); ``stdin``: what it reads on
    standard input; ``data``: its fd 3, a pipe or a host regular file already holding
    ``FILE_PREFIX``, which must then hold ``data_out``; ``refused``: a word it prints only if a
    limit did not hold (it must also fail)."""

    name: str
    argv: tuple[str, ...]
    lines: tuple[str, ...] = ()
    stdin: bytes | None = None
    data: Literal["pipe", "file"] | None = None
    data_out: bytes | None = None
    refused: str | None = None


SELF_TEST_CHECKS = (
    SelfTestCheck("ls /", ("/bin/ls", "-a", "/"), lines=("ci", "etc", "proc", "tmp", "usr")),
    SelfTestCheck("stat /", ("/usr/bin/stat", "-c", "%F %u", "/"), lines=("directory 0",)),
    SelfTestCheck(
        "stdin and fd 3",
        ("/bin/sh", "-c", 'read -r line; echo "$line"; echo data >&3'),
        lines=("in",),
        stdin=b"in\n",
        data="pipe",
        data_out=b"data\n",
    ),
    SelfTestCheck(
        "sh -c 'echo one > /tmp/f; echo two >> /tmp/f; cat /tmp/f'",
        ("/bin/sh", "-c", "echo one > /tmp/f; echo two >> /tmp/f; cat /tmp/f; cat /tmp/f >&3"),
        lines=("one", "two"),
        data="file",
        data_out=FILE_PREFIX + b"one\ntwo\n",
    ),
    SelfTestCheck(
        "50 forks",
        ("/bin/sh", "-c", 'i=0; while [ $i -lt 50 ]; do /bin/sh -c true || exit 1; i=$((i+1)); done; echo "forked $i"'),
        lines=("forked 50",),
    ),
    # Last: when the bound holds, the sandbox is killed whole.
    SelfTestCheck(
        "memory bound (512 MiB into /dev/shm under a 128 MiB limit)",
        ("/bin/sh", "-c", "head -c 536870912 /dev/zero > /dev/shm/fill && echo filled"),
        refused="filled",
    ),
)


# How the self-test names a sandbox that does not even start (``runsc run`` of the idle init).
LAUNCH_CHECK = SelfTestCheck("runsc run (the job's idle init)", INIT_ARGV)


class LaunchError(SandboxError):
    """A job's sandbox did not start."""


def explain_failure(check: SelfTestCheck, printed: str) -> str:
    """What a failed check means, where the cause is known."""
    if check.name in ("ls /", "stat /") and "Invalid argument" in printed:
        return "this runsc refuses statx with AT_NO_AUTOMOUNT"
    if "pass-fd" in printed:
        return "this runsc cannot pass a descriptor into a process (runsc exec --pass-fd)"
    if check.data == "file" and "not starting with" in printed:
        return "this runsc writes a passed regular file from offset 0, over what it held"
    return ""


def shown_output(output: bytes, limit: int = 400) -> str:
    text = output.decode("utf-8", "replace").strip().replace("\n", "; ")
    return text if len(text) <= limit else "..." + text[-limit:]


def read_data(pipe_fd: int, file_fd: int) -> bytes:
    """What a check wrote to its fd 3: the pipe read to its end, or the regular file from its start."""
    if file_fd >= 0:
        return os.pread(file_fd, 1 << 16, 0)
    out = b""
    while chunk := os.read(pipe_fd, 1 << 16):
        out += chunk
    return out
