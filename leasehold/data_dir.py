"""The data directory is private: only the user running leasehold may read what it holds.

It holds the admin API key, the secrets keyring, the URL-signing key, the SQLite databases
(``leasehold.db``, Temporal's ``temporal.db``), objects and logs. Every leasehold process sets
``PRIVATE_UMASK`` at start, so what it creates (and what its children, the Temporal dev
server included, create) is owner-only; ``secure_data_dir`` also takes group and other
access away from what an older version, or another umask, left behind.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_UMASK = 0o077
# The CI worker makes trees that jobs, running as other uids, must read (runner scripts,
# workspaces); the sandbox sets their modes itself, relying on the conventional umask. What
# it writes stays out of other users' reach below the data dir's 0700.
CI_WORKER_UMASK = 0o022
# Subdirectories whose files are tightened too (the data dir's own entries always are).
# Not recursive: objects and CI trees are large, and the data dir's own mode already keeps
# everyone else out of them.
_FILES_TIGHTENED_IN = ("logs",)


def set_private_umask() -> None:
    """Make every file this process (and any child) creates owner-only."""
    os.umask(PRIVATE_UMASK)


def set_ci_worker_umask() -> None:
    """The CI worker's umask (see ``CI_WORKER_UMASK``)."""
    os.umask(CI_WORKER_UMASK)


def secure_data_dir(data_dir: Path) -> None:
    """Create ``data_dir`` (0700) if needed and take group/other access away from it, its
    entries and the files under ``logs/``; symlinks are never followed."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    make_private(data_dir)
    for entry in os.scandir(data_dir):
        make_private(Path(entry.path))
        if entry.name in _FILES_TIGHTENED_IN and entry.is_dir(follow_symlinks=False):
            for sub in os.scandir(entry.path):
                make_private(Path(sub.path))


def make_private(path: Path) -> None:
    """Clear the group and other bits of a regular file or directory we own (through an
    ``O_NOFOLLOW`` descriptor, so a symlink swapped in meanwhile changes nothing)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return  # a symlink, a socket, or gone: nothing of ours to tighten
    try:
        info = os.fstat(fd)
        mode = stat.S_IMODE(info.st_mode)
        if (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)) and mode & 0o077:
            os.fchmod(fd, mode & ~0o077)
    except OSError as exc:
        log.warning("could not make %s private: %s", path, exc.strerror or exc)
    finally:
        os.close(fd)


def read_or_create_secret(path: Path, make: Callable[[], str]) -> str:
    """The content of the owner-only file ``path``, which ``make`` fills the first time.

    Processes start together on a fresh data dir (``make up`` starts the API and the workers
    at once), so two may create the same key: the content is written to a private temporary
    file first and linked into place (``link`` fails if the name exists), so exactly one
    content wins, every process reads that one, and nobody ever reads a half-written file.
    """
    try:
        return path.read_text()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(make())
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process won: read its key
    finally:
        tmp.unlink(missing_ok=True)
    return path.read_text()
