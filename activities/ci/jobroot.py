"""The one place where the CI worker, running as root, touches a job's root directory.

**The root rule.** A process running as root never opens, walks, hashes, extracts or deletes a
path inside a tree a job could have written. Path-by-path hardening (``O_NOFOLLOW``,
``realpath`` checks, tarfile's filters) was broken twice: a symlink chain longer than
``PATH_MAX`` defeats every check made by path, and no check made by root is a safe design. So
everything done inside a job's tree runs as the job's uid inside the job's mount namespace (the
job-side helper, ``activities/ci/jobside.py``, started through the job's own ``Sandbox``), where
a planted link can reach only what the job could reach anyway. This module is where that is
enforced; ``tests/security/test_root_rule.py`` fails if any other module of the worker opens,
walks, hashes, extracts or deletes a path under a job root.

What root itself does here, and why each is safe:

- **Layout** (``make_layout``): a new job root in the worker's private workspaces directory.
  The root and its ``runner/`` and ``io/`` stay root's (the job cannot add, rename or delete
  entries in them); ``work/``, ``home/``, ``tmp/`` and ``actions/`` are made empty and handed to
  the job's uid through a descriptor of the directory root just created. ``actions/`` is
  bound read-only into the job's steps (an action's files cannot be changed by the job) and
  writable only into the helper that unpacks and removes them. ``home/`` is seeded with the
  tool cache (``tool_cache``) before it is handed over, while nothing of the job exists yet.
- **Root's own files** (``write_new``): step scripts, the event JSON, ``passwd`` stubs and the
  helper itself, created in ``runner/`` with ``O_CREAT|O_EXCL|O_NOFOLLOW`` relative to a
  directory descriptor; the job sees ``runner/`` read-only.
- **Step files** (``StepFiles``): ``$GITHUB_OUTPUT`` and its kin, created by root in ``io/`` and
  given to the job; root keeps a descriptor on each and reads them back through it (bounded),
  never by path, so the job cannot swap them for a link, a FIFO or a host file.
- **Everything else** (``JobRoot``): checkout and action placement, cache restore and save,
  ``hashFiles``, disk usage, cleanup run in the helper. Bytes cross on pipes or through root's
  own temporary files, bounded in size and time; what comes back is data (a JSON line, a
  stream), never a path that root then opens.
- **Removal** (``JobRoot.remove``): after the helper has emptied the job's directories, root
  unlinks its own entries in ``runner/`` and ``io/`` and removes the empty directories by name
  relative to the root's descriptor (``rmdir`` never follows a link).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import select
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from activities.ci import tool_cache
from activities.ci.sandbox import JobOwner, Sandbox, SandboxError, SandboxLimits, SandboxProcess, SandboxRequest

log = logging.getLogger(__name__)

# The job's own directories (handed to its uid) and root's (read-only or closed to the job).
JOB_DIRS = ("work", "home", "tmp", "actions")
ROOT_DIRS = ("runner", "io")
HELPER_NAME = "jobside.py"
HELPER_SOURCE = Path(__file__).with_name(HELPER_NAME)
# The sandbox's interpreter (the host's read-only /usr): -I ignores the environment, the user's
# site directory and the script's directory, -S skips site: nothing the job wrote is imported.
HELPER_PYTHON = "/usr/bin/python3"
HELPER_PATH = "/usr/local/bin:/usr/bin:/bin"
# Names GitHub's Ubuntu images have that a Debian host may lack (``python`` is python3 there):
# links in ``runner/bin``, last on a step's PATH, so a tool of the host's own always wins.
TOOL_LINKS = (("python", "/usr/bin/python3"), ("pip", "/usr/bin/pip3"))
TOOLS_DIR = "bin"
# What one helper may say on stdout (its result is one short JSON line at the end).
MAX_HELPER_OUTPUT = 64 << 10
# How long each kind of helper may take.
EXTRACT_SECONDS = 900.0
ARCHIVE_SECONDS = 900.0
HASH_SECONDS = 120.0
DU_SECONDS = 30.0
CLEAN_SECONDS = 300.0
STEP_FILE_NAMES = ("output", "env", "path", "summary", "state")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_PRINTABLE = re.compile(r"[^\x20-\x7e]")


class JobTreeError(RuntimeError):
    """A helper over the job's tree failed; the message is safe to show the job (the helper's
    own words name paths as the job sees them, never the host's)."""


def _mode(path_fd: int, mode: int) -> None:
    # Explicit modes: the worker's umask may be 077, and the job must still traverse its root.
    os.fchmod(path_fd, mode)


def _mkdir_at(dir_fd: int, name: str, mode: int, owner: JobOwner | None) -> None:
    os.close(tool_cache.make_dir_at(dir_fd, name, owner, mode))


def make_layout(root: Path, owner: JobOwner) -> None:
    """A new job root (``root`` must not exist): root-owned and closed to the job; the job's own
    directories handed to ``owner``; the job-side helper in ``runner/``."""
    root.mkdir(mode=0o755)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        _mode(fd, 0o755)
        for name in JOB_DIRS:
            _mkdir_at(fd, name, 0o755, None if name == "home" else owner)
        _seed_home(fd, owner)
        for name in ROOT_DIRS:
            _mkdir_at(fd, name, 0o755, None)
    finally:
        os.close(fd)
    write_new(root / "runner", HELPER_NAME, HELPER_SOURCE.read_bytes())
    _tool_links(root / "runner")


def _seed_home(root_fd: int, owner: JobOwner) -> None:
    """``home/``, still root's and empty, gets the tool cache (``tool_cache``), then goes to the
    job's uid: nothing of the job has run yet, and every entry is made relative to a descriptor."""
    home = os.open("home", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)
    try:
        tool_cache.seed(home, owner)
        if owner.uid is not None:
            os.fchown(home, owner.uid, owner.gid if owner.gid is not None else owner.uid)
    finally:
        os.close(home)


def _tool_links(runner: Path) -> None:
    """``runner/bin`` (root's, read-only to the job) with ``TOOL_LINKS`` whose target exists."""
    fd = os.open(runner, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        _mkdir_at(fd, TOOLS_DIR, 0o755, None)
        bin_fd = os.open(TOOLS_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        for name, target in TOOL_LINKS:
            if os.path.exists(target):
                os.symlink(target, name, dir_fd=bin_fd)
    finally:
        os.close(bin_fd)


def write_new(directory: Path, name: str, data: bytes, owner: JobOwner | None = None) -> None:
    """Create ``directory/name`` afresh in one of root's own directories: never through a
    symlink, never into an existing file; root's (readable by the job) unless ``owner``."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if owner is not None and owner.uid is not None:
                os.fchown(f.fileno(), owner.uid, owner.gid if owner.gid is not None else owner.uid)
            else:
                os.fchmod(f.fileno(), 0o644)
    finally:
        os.close(dir_fd)


class StepFiles:
    """One step's ``io/`` files, made by root and given to the job; read back only through the
    descriptors root opened when it made them."""

    def __init__(self, root: Path, owner: JobOwner) -> None:
        self._dir_fd = os.open(root / "io", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        self._fds: dict[str, int] = {}
        try:
            for name in STEP_FILE_NAMES:
                # A previous step's file: root's own entry in root's own directory.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=self._dir_fd)
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=self._dir_fd)
                self._fds[name] = fd
                if owner.uid is not None:
                    os.fchown(fd, owner.uid, owner.gid if owner.gid is not None else owner.uid)
                else:
                    os.fchmod(fd, 0o644)
        except BaseException:
            self.close()
            raise

    def read(self, name: str, limit: int) -> bytes:
        """At most ``limit`` bytes the step wrote to its ``name`` file."""
        fd = self._fds[name]
        out = bytearray()
        while len(out) < limit:
            chunk = os.pread(fd, min(1 << 20, limit - len(out)), len(out))
            if not chunk:
                break
            out += chunk
        return bytes(out)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1


@dataclass
class _Pipes:
    """What a running helper is read through."""

    out: bytearray
    out_fd: int
    data_fd: int


class JobRoot:
    """A job attempt's root directory, and every operation inside its tree (each one a
    job-side helper in the job's sandbox; see the module docstring)."""

    def __init__(
        self,
        path: Path,
        sandbox: Sandbox,
        limits: SandboxLimits | None,
        heartbeat: Callable[[], None] = lambda: None,
    ) -> None:
        self.path = path
        self.mount = sandbox.mount_point(path)
        self._sandbox = sandbox
        self._limits = limits
        self._heartbeat = heartbeat
        self._seq = 0

    def detached(self) -> JobRoot:
        """The same root for work after the attempt's activity has returned (the reaper's):
        there is no activity left to heartbeat."""
        return JobRoot(self.path, self._sandbox, self._limits, lambda: None)

    # Root's own files -----------------------------------------------------------------

    def write_runner(self, name: str, data: bytes) -> None:
        """A file of root's in ``runner/`` that the job reads (a step script, the event)."""
        write_new(self.path / "runner", name, data)

    def step_files(self, owner: JobOwner) -> StepFiles:
        return StepFiles(self.path, owner)

    # Helpers as the job -----------------------------------------------------------------

    def _start(
        self, op: str, args: list[str], stdin_fd: int | None, data_fd: int | None, cwd: str | None
    ) -> SandboxProcess:
        self._seq += 1
        # ``actions/`` is writable only to the ops that fill or empty it; a read (the disk
        # check beside a running step, a hash, an archive) sees it as the steps do.
        writable = op == "clean" or (op == "extract" and args[0].removeprefix(f"{self.mount}/").startswith("actions"))
        request = SandboxRequest(
            argv=[HELPER_PYTHON, "-I", "-S", f"{self.mount}/runner/{HELPER_NAME}", op, *args],
            env={"PATH": HELPER_PATH, "LANG": "C.UTF-8", "HOME": f"{self.mount}/home"},
            root=self.path,
            cwd=cwd or self.mount,
            network=False,
            limits=self._limits,
            name=f"helper-{op}-{self._seq}",
            stdin_fd=stdin_fd,
            data_fd=data_fd,
            writable_actions=writable,
        )
        return self._sandbox.start(request)

    def _pump(self, proc: SandboxProcess, pipes: _Pipes, sink: Callable[[bytes], None] | None, deadline: float) -> None:
        open_fds = [pipes.out_fd] + ([pipes.data_fd] if pipes.data_fd >= 0 else [])
        while open_fds:
            now = time.monotonic()
            if now >= deadline:
                raise JobTreeError("timed out")
            ready, _, _ = select.select(open_fds, [], [], min(1.0, deadline - now))
            self._heartbeat()
            for fd in ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    open_fds.remove(fd)
                elif fd == pipes.out_fd:
                    if len(pipes.out) < MAX_HELPER_OUTPUT:
                        pipes.out += chunk[: MAX_HELPER_OUTPUT - len(pipes.out)]
                elif sink is not None:
                    sink(chunk)
        while proc.poll() is None:
            if time.monotonic() >= deadline:
                raise JobTreeError("timed out")
            with contextlib.suppress(Exception):
                proc.wait(0.5)
            self._heartbeat()

    def _run(
        self,
        op: str,
        args: list[str],
        timeout: float,
        stdin_fd: int | None = None,
        sink: Callable[[bytes], None] | None = None,
        cwd: str | None = None,
    ) -> dict[str, Any]:
        """Run the helper's ``op``; its JSON result (``ok`` true), else ``JobTreeError``."""
        data_read, data_write = os.pipe() if sink is not None else (-1, -1)
        try:
            proc = self._start(op, args, stdin_fd, data_write if sink is not None else None, cwd)
        except SandboxError:
            if data_read >= 0:
                os.close(data_read)
                os.close(data_write)
            raise
        if data_write >= 0:
            os.close(data_write)
        pipes = _Pipes(bytearray(), proc.stdout.fileno(), data_read)
        try:
            self._pump(proc, pipes, sink, time.monotonic() + timeout)
        finally:
            if data_read >= 0:
                os.close(data_read)
            proc.kill_tree()
            with contextlib.suppress(Exception):
                proc.wait(10)
            with contextlib.suppress(Exception):
                proc.stdout.close()
            proc.finish()
        return _result(op, bytes(pipes.out))

    def extract(self, into: str, stream_fd: int, only: list[str] | None = None) -> dict[str, Any]:
        """Unpack the tar stream on ``stream_fd`` (a pipe or root's own file) into the job's
        ``into`` directory (``''``: the root, for cache paths such as ``work/x``), as the job.
        ``only`` keeps members at or below those relative paths."""
        args = [f"{self.mount}/{into}".rstrip("/")]
        for prefix in only or []:
            args += ["--only", prefix]
        return self._run("extract", args, EXTRACT_SECONDS, stdin_fd=stream_fd)

    def archive(self, paths: list[str], sink: Callable[[bytes], None], max_bytes: int) -> list[str]:
        """The job's ``paths`` (relative to the root) as tar.gz into ``sink``; the paths that
        existed. ``sink`` may raise to stop (a size bound)."""
        result = self._run("archive", [str(max_bytes), *paths], ARCHIVE_SECONDS, sink=sink)
        present = result.get("paths")
        if not isinstance(present, list) or not all(isinstance(p, str) and p in paths for p in present):
            raise JobTreeError("the archive helper gave no valid path list")
        return present

    def hash_files(self, patterns: list[str]) -> str:
        """``hashFiles()`` over the checkout, computed as the job."""
        result = self._run("hash", patterns, HASH_SECONDS, cwd=f"{self.mount}/work")
        digest = result.get("hash")
        if not isinstance(digest, str) or not (digest == "" or _HEX64.fullmatch(digest)):
            raise JobTreeError("hashFiles gave no valid hash")
        return digest

    def disk_usage(self) -> int:
        """Bytes of disk the job's files take (its own directories), measured as the job."""
        result = self._run("du", [f"{self.mount}/{d}" for d in JOB_DIRS], DU_SECONDS)
        size = result.get("bytes")
        if not isinstance(size, int) or size < 0:
            raise JobTreeError("the disk usage helper gave no valid size")
        return size

    def clean(self) -> int:
        """Remove everything in the job's directories, as the job; how many entries are left."""
        result = self._run("clean", [f"{self.mount}/{d}" for d in JOB_DIRS], CLEAN_SECONDS)
        left = result.get("left")
        return left if isinstance(left, int) and left >= 0 else 1

    def remove(self) -> None:
        """Remove the whole root once no process of the job runs: the job's files by the helper,
        then root's own entries and the empty directories."""
        left = 0
        try:
            left = self.clean()
        except (JobTreeError, SandboxError) as exc:
            log.warning("could not empty the job root %s: %s", self.path, exc)
            left = 1
        remove_layout(self.path)
        if left:
            log.warning("job root %s kept %d entries the job made unremovable", self.path, left)


def remove_layout(root: Path) -> bool:
    """Remove root's own files and the job's (empty) directories of a job root; ``False`` when
    something is left (a directory the helper could not empty stays, and so does the root)."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True
    complete = True
    try:
        for name in ROOT_DIRS:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                try:
                    # Only root made entries here (the job cannot write to these directories).
                    for entry in os.listdir(sub):
                        with contextlib.suppress(FileNotFoundError):
                            if name == "runner" and entry == TOOLS_DIR:
                                _empty_tools(sub)
                            else:
                                os.unlink(entry, dir_fd=sub)
                finally:
                    os.close(sub)
        for name in (*JOB_DIRS, *ROOT_DIRS):
            try:
                os.rmdir(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EBUSY):
                    raise
                complete = False
    finally:
        os.close(fd)
    if complete:
        with contextlib.suppress(OSError):
            os.rmdir(root)
    return complete


def _result(op: str, out: bytes) -> dict[str, Any]:
    for line in reversed(out.decode(errors="replace").splitlines()):
        line = line.strip()
        if not line:
            continue
        try:
            result = json.loads(line)
        except ValueError:
            break
        if isinstance(result, dict) and isinstance(result.get("ok"), bool):
            if result["ok"]:
                return result
            error = result.get("error")
            raise JobTreeError(_PRINTABLE.sub("?", str(error))[:500] if error else f"{op} failed")
        break
    tail = _PRINTABLE.sub("?", out.decode(errors="replace").strip()[-300:])
    raise JobTreeError(f"{op} ended without a result" + (f": {tail}" if tail else ""))


def owner_of_dir(root: Path, name: str) -> JobOwner | None:
    """Who owns a job directory of a leftover root (an ``lstat`` of root's own entry: the job
    could not replace it), for cleaning it up as that user."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not stat.S_ISDIR(st.st_mode):
        return None
    return JobOwner(st.st_uid, st.st_gid)


def refresh_runner(root: Path, clear: bool = True) -> None:
    """Make root's ``runner/`` of a leftover job root anew (its own entries only: the job cannot
    write there), with the helper in it."""
    fd = os.open(root / "runner", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        if clear:
            for entry in os.listdir(fd):
                with contextlib.suppress(FileNotFoundError):
                    if entry == TOOLS_DIR:
                        _empty_tools(fd)
                    else:
                        os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    write_new(root / "runner", HELPER_NAME, HELPER_SOURCE.read_bytes())
    if clear:
        _tool_links(root / "runner")


def _empty_tools(runner_fd: int) -> None:
    """Remove root's ``runner/bin`` (its own links only: the job cannot write there)."""
    bin_fd = os.open(TOOLS_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=runner_fd)
    try:
        for name in os.listdir(bin_fd):
            os.unlink(name, dir_fd=bin_fd)
    finally:
        os.close(bin_fd)
    os.rmdir(TOOLS_DIR, dir_fd=runner_fd)


# A root younger than this may be one another worker on the same data dir is making right now.
LEFTOVER_MIN_AGE_SECONDS = 60.0


def sweep_leftover_roots(workspaces: Path, sandbox: Sandbox, limits: SandboxLimits | None) -> int:
    """Remove the job roots that workers killed mid-job left behind, each emptied by the helper
    as the user its files belong to (the sandbox leases that very uid first: a root whose user
    an attempt holds is live and left alone). Returns how many were removed."""
    adopt: Callable[[Path], bool] | None = getattr(sandbox, "adopt", None)
    try:
        names = os.listdir(workspaces)
    except FileNotFoundError:
        return 0
    removed = 0
    now = time.time()
    for name in names:
        root = workspaces / name
        if name.startswith("."):
            continue
        try:
            st = os.stat(root, follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
            continue
        owner = owner_of_dir(root, "work")
        if owner is None:
            # Never got its job directories: only root's own entries are in it.
            if now - st.st_mtime > LEFTOVER_MIN_AGE_SECONDS and remove_layout(root):
                removed += 1
            continue
        if adopt is None or not adopt(root):
            continue
        try:
            JobRoot(root, sandbox, limits).remove()
        finally:
            sandbox.release(root)
        if not os.path.lexists(root):
            removed += 1
            log.info("removed job root %s, left by a worker that was killed", name)
    return removed
