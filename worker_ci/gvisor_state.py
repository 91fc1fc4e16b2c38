"""What the gVisor backend (``worker_ci.gvisor``) keeps on disk across workers: how runsc is run,
and the sweep of the state that workers which died left behind."""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

# The environment runsc itself runs with (never the worker's: it holds the worker's settings).
RUNSC_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"}
RUNSC_SECONDS = 30.0


def sweep_stale(binary: str, state_dir: Path) -> None:
    """Delete what workers that died left (their sandboxes died with them; their state,
    cgroups and bundles did not)."""
    for entry in stale_dirs(state_dir):
        state = entry / "state"
        if state.is_dir():
            listed = subprocess.run(
                [binary, f"--root={state}", "list", "--quiet"],
                capture_output=True,
                env=RUNSC_ENV,
                timeout=RUNSC_SECONDS,
                check=False,
            )
            for cid in listed.stdout.decode("utf-8", "replace").split():
                subprocess.run(
                    [binary, f"--root={state}", "delete", "--force", cid],
                    capture_output=True,
                    env=RUNSC_ENV,
                    timeout=RUNSC_SECONDS,
                    check=False,
                )
        shutil.rmtree(entry, ignore_errors=True)
        log.info("removed the gVisor state of a stopped worker: %s", entry.name)


def stale_dirs(state_dir: Path) -> Iterator[Path]:
    """The worker directories whose lock no live worker holds."""
    for entry in state_dir.iterdir():
        if not entry.name.startswith("w-") or not entry.is_dir() or entry.is_symlink():
            continue
        try:
            fd = os.open(entry / "lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            yield entry
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        try:
            yield entry
        finally:
            os.close(fd)
