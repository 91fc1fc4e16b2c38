"""The lock a running ``leasehold up`` holds on its data dir, and finding it from elsewhere.

``up`` holds an exclusive ``flock`` on ``<data dir>/up.lock`` (with its pid written in it) for
as long as it runs, so a second stack on the same data dir is refused. The same open file
tells an admin command which data dir a running stack uses: it is among the stack's open
descriptors (``/proc/<pid>/fd``), which needs no registry of stacks to keep current.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from cli.common import UsageError

LOCK_NAME = "up.lock"


def lock_data_dir(data_dir: Path) -> int:
    """Hold an exclusive lock on the data dir while the stack runs (the kernel drops it when we die).

    Two stacks on one data dir would share one SQLite file for Temporal and corrupt it.
    """
    fd = os.open(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise UsageError(f"data dir {data_dir} is in use by another leasehold up (pid {holder})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def running_stacks() -> list[tuple[int, Path]]:
    """(pid, data dir) of each ``leasehold up`` this user runs on this machine.

    A process counts when it holds ``up.lock`` open and the file names it (its pid), so a
    stale lock file, or another program's file of that name, is not taken for a stack.
    """
    found: list[tuple[int, Path]] = []
    uid = os.getuid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found  # no procfs: nothing to name
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid or b"up" not in Path(f"/proc/{pid}/cmdline").read_bytes().split(
                b"\0"
            ):
                continue
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if not target.endswith(f"/{LOCK_NAME}"):
                continue
            lock = Path(target)
            try:
                holder = lock.read_text().strip()
            except OSError:
                continue
            if holder == str(pid):
                found.append((pid, lock.parent))
    return sorted(found)
