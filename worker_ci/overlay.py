"""A job's ``work/`` as an overlay mount: the commit's shared tree below, a layer of the job's own above.

The worker (root) mounts ``overlay`` at the job's ``work/`` with the shared tree
(``activities.ci.git.SharedTree``, root-owned) as the read-only lower layer and a fresh upper
layer per job attempt. The layers live outside the job root, which is all the sandbox binds: a
job sees the merged view only, so whatever it writes, deletes or renames lands in its own upper
layer, and the shared tree, seen by every other job of the commit, never changes. ``metacopy``
makes handing the checkout to the job's uid (a chown of every file) copy metadata, not data.

Mounts live in the worker's mount namespace (bubblewrap's recursive bind of the job root shows
them in the sandbox). A worker killed with SIGKILL leaves its jobs' mounts behind: any CI worker
on the same data dir detaches those of workers no longer alive when it starts and before each
checkout it makes (a directory listing and a signal 0 per worker: cheap).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import shutil
import tempfile
from pathlib import Path

from activities.ci.sandbox import SandboxError

log = logging.getLogger(__name__)

MS_NOSUID = 2
MS_NODEV = 4
MNT_DETACH = 2
LAYERS_DIR = ".layers"


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


def _unescape(field: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as octal.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _overlay_mounts() -> list[tuple[str, str]]:
    """(mount point, super options) of every overlay mount this process sees."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) > 4 and len(tail) > 2 and tail[0] == "overlay":
                found.append((_unescape(fields[4]), _unescape(tail[2])))
    return found


class OverlayTree:
    """``WorkTree`` by overlay mount (see the module docstring)."""

    name = "overlay"

    def __init__(self, workspaces: Path) -> None:
        if os.geteuid() != 0:
            raise SandboxError("overlay checkouts need the CI worker to run as root")
        self._libc = _libc()
        self._root = workspaces / LAYERS_DIR
        self._root.mkdir(parents=True, exist_ok=True)
        os.chmod(self._root, 0o700)
        self._sweep_dead_workers()
        self._mine = self._root / str(os.getpid())
        shutil.rmtree(self._mine, ignore_errors=True)
        self._mine.mkdir(mode=0o700)
        self._metacopy = True
        self._probe()

    def _options(self, tree: Path, layers: Path) -> str:
        for path in (tree, layers):
            if any(c in str(path) for c in ",:\\\n"):
                raise SandboxError(f"path {path} cannot be given to an overlay mount")
        options = f"lowerdir={tree},upperdir={layers / 'upper'},workdir={layers / 'work'}"
        return options + (",metacopy=on" if self._metacopy else "")

    def _mount(self, tree: Path, work: Path, layers: Path) -> None:
        for sub in ("upper", "work"):
            (layers / sub).mkdir(mode=0o755, parents=True)
        while True:
            opts = self._options(tree, layers).encode()
            if self._libc.mount(b"overlay", str(work).encode(), b"overlay", MS_NOSUID | MS_NODEV, opts) == 0:
                return
            err = ctypes.get_errno()
            if err == errno.EINVAL and self._metacopy:
                # A kernel without metacopy: the chown copies data up, still correct.
                self._metacopy = False
                continue
            raise OSError(err, f"mount overlay at {work}: {os.strerror(err)}")

    def _unmount(self, work: Path) -> None:
        if self._libc.umount2(str(work).encode(), MNT_DETACH) != 0:
            err = ctypes.get_errno()
            if err not in (errno.EINVAL, errno.ENOENT):
                raise OSError(err, f"umount {work}: {os.strerror(err)}")

    def _probe(self) -> None:
        """Mount and unmount a tiny overlay now: refuse at start-up rather than at a job."""
        with tempfile.TemporaryDirectory(dir=self._mine) as tmp:
            base = Path(tmp)
            (base / "lower").mkdir()
            (base / "merged").mkdir()
            try:
                self._mount(base / "lower", base / "merged", base / "layers")
            except OSError as exc:
                raise SandboxError(f"overlay mounts are not available: {exc}") from exc
            self._unmount(base / "merged")

    def _layers(self, work: Path) -> Path:
        return self._mine / work.parent.name

    def attach(self, tree: Path, work: Path) -> None:
        self._sweep_dead_workers()
        layers = self._layers(work)
        shutil.rmtree(layers, ignore_errors=True)
        try:
            self._mount(tree, work, layers)
        except OSError:
            shutil.rmtree(layers, ignore_errors=True)
            raise

    def detach(self, work: Path) -> None:
        self._unmount(work)
        shutil.rmtree(self._layers(work), ignore_errors=True)

    def _sweep_dead_workers(self) -> None:
        """Detach the mounts of CI workers (on this data dir) that died without cleaning up."""
        for entry in self._root.iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                os.kill(int(entry.name), 0)
                continue  # alive: its mounts are its own
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
            prefix = f"upperdir={entry}/"
            for point, options in _overlay_mounts():
                if prefix in options:
                    with contextlib.suppress(OSError):
                        self._unmount(Path(point))
                    log.info("detached %s, left by a CI worker that is gone", point)
            shutil.rmtree(entry, ignore_errors=True)
