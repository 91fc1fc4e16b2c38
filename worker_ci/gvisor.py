"""The gVisor backend for CI jobs: each job attempt in a ``runsc`` sandbox, a kernel in user space.

For tenants that must not share the host kernel (``leasehold plans isolation --tenant T gvisor``).
bubblewrap puts the job's processes on the host kernel behind a seccomp filter; here the job's
syscalls are served by gVisor's sentry, and the host kernel sees only the sentry's (and its file
helper's, the gofer's) own narrow, seccomp-filtered syscalls. The gofer runs as host root: it
opens the files the sandbox's mounts name, so the mounts are the whole of what the job reaches.

What the worker guarantees, as the bubblewrap backend does (``worker_ci.sandbox``):

- **Who the job is.** The job attempt's leased uid and gid (``JobUserPool``), in both the
  sandbox's idle init and every step (``process.user``); empty capability sets;
  ``noNewPrivileges``; every mount ``nosuid``.
- **What it sees.** An OCI bundle per container, written by root into a directory of the
  worker's own (``<data>/ci/gvisor/w-<pid>-<id>/<container>``, 0700, never inside the job root and
  never mounted): ``config.json`` (0600) and an empty, root-owned ``rootfs/`` the sandbox shows
  read-only, holding only mount points and the merged-``/usr`` links. Mounted: ``/usr`` (and the
  other system directories) read-only, the harmless ``/etc`` files bubblewrap binds, stub
  ``passwd``/``group`` from ``runner/``, the job root at ``/ci`` (``MOUNT_POINT``), ``runner/``
  read-only at ``/ci/runner``, the job's ``tmp/`` at ``/tmp``, a sized ``/dev/shm`` and gVisor's
  own ``/proc`` (the sandbox's processes only). No ``/home``, ``/root``, ``/var``, ``/opt``, ``/run``.
- **Limits.** ``process.rlimits`` (address space, processes, file size, CPU, no core files) hold
  for every process of the sandbox. Memory is ``linux.resources.memory.limit`` on the cgroup
  runsc makes for the sandbox (below the worker's own, ``linux.cgroupsPath`` is relative): it
  counts the sentry's memory, so ``/dev/shm`` and every guest page, and the host kills the whole
  sandbox when it is reached. It holds for the whole job (the sentry included), not per step.
  The process count is ``RLIMIT_NPROC`` inside, never a cgroup ``pids.max``: that counts
  gVisor's own threads (300 guest processes are ~850 host tasks) and reaching it crashes the
  sandbox. runsc is never given ``--ignore-cgroups``.
- **Secrets.** A step's environment goes into its process spec (``runsc exec --process FILE``,
  0600 in the bundle directory), never onto a command line; runsc itself gets a minimal
  environment, not the worker's.
- **Network.** ``--network=none``: the sandbox has loopback only (see ``supports_network``).

**One sandbox per job, one exec per step.** Starting a sandbox costs 130-460 ms, so the first
step of a job starts it (``runsc run``, attached: the worker keeps it as a child that dies with
the worker, ``setpriv --pdeathsig``) with an idle init, and every step, helper included, is a
``runsc exec``. The init is bash reading a pipe the worker never writes: it has no child of its
own, reaps what is orphaned to it, ignores SIGTERM, and ends when the worker goes. So in a
job's sandbox, every process but pid 1 is the running step's (steps run one at a time): the
step's tree is "all but init", signalled with ``runsc kill --all`` (SIGTERM, which init ignores)
or, for SIGKILL, stopped whole and killed one by one (``runsc kill --pid``); processes a step
leaves behind are killed when it finishes, as bubblewrap's pid namespace does. A job that
outgrows that (many processes) or a sandbox that stops (out of memory) is torn down, and the
next step starts a fresh one.

**The gate.** The constructor runs a self-test through this very path (``SELF_TEST_CHECKS``):
``ls /``, ``stat /``, stdin and fd 3, a file written through a passed descriptor, 50 forks and a
memory bound. The first that fails raises ``SandboxError`` naming it and what runsc printed.
Debian's 2022 build (``apt-get install runsc``) fails the first: it refuses ``statx`` with
``AT_NO_AUTOMOUNT``, writes passed regular files from offset 0 and has no ``exec --pass-fd``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from activities.ci.sandbox import JobOwner, SandboxError, SandboxLimits, SandboxRequest
from leasehold.settings import Settings
from worker_ci.sandbox import ETC_FILES, MOUNT_POINT, SYSTEM_DIRS, JobUserPool, _PopenProcess, _runner_files

log = logging.getLogger(__name__)

# The sandbox's idle init: no child of its own (so every other process is a step's), reaps the
# orphans re-parented to it (bash does; dash leaves them zombies), ignores SIGTERM (so
# ``runsc kill --all TERM`` reaches only the step), and ends at EOF: when the worker is gone.
INIT_ARGV = ("/bin/bash", "-c", 'trap "" TERM INT HUP; while read -r _; do :; done')
INIT_PID = 1
INIT_PATH = "/usr/local/bin:/usr/bin:/bin"
# The environment runsc itself runs with (never the worker's: it holds the worker's settings).
RUNSC_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"}
# A step's leftover processes are killed one by one (``runsc kill --pid``) up to this many; past
# it the sandbox is torn down whole and the next step starts a fresh one.
KILL_ONE_BY_ONE = 32
START_SECONDS = 30.0
RUNSC_SECONDS = 30.0
STOP_SECONDS = 10.0
# Descriptor numbers inside the sandbox.
DATA_FD = 3
# cgroup v1 and v2 as runsc finds them (its root is fixed at /sys/fs/cgroup).
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _oci_rlimits(limits: SandboxLimits) -> list[dict[str, Any]]:
    """The per-process limits bubblewrap's steps get (``worker_ci.sandbox._rlimits``), in OCI form."""
    values = [
        ("RLIMIT_AS", limits.memory_bytes),
        ("RLIMIT_NPROC", limits.max_processes),
        ("RLIMIT_FSIZE", limits.max_file_bytes),
        ("RLIMIT_CPU", limits.cpu_seconds),
        ("RLIMIT_CORE", 0),
    ]
    return [{"type": name, "hard": value, "soft": value} for name, value in values]


def _no_capabilities() -> dict[str, list[str]]:
    return {"bounding": [], "effective": [], "inheritable": [], "permitted": [], "ambient": []}


def _env_list(env: dict[str, str]) -> list[str]:
    # A NUL would end the value early in the guest's execve; a key with "=" or none is no variable.
    out = []
    for key, value in env.items():
        key, value = key.replace("\x00", ""), value.replace("\x00", "")
        if key and "=" not in key:
            out.append(f"{key}={value}")
    return out


def _bind(source: str | Path, destination: str, writable: bool = False) -> dict[str, Any]:
    return {
        "destination": destination,
        "type": "bind",
        "source": str(source),
        "options": ["bind", "rw" if writable else "ro", "nosuid", "nodev"],
    }


@dataclass(frozen=True)
class HostLayout:
    """What of the host's system files a sandbox shows: each of ``SYSTEM_DIRS`` as a read-only
    bind or as the link it is, and those of ``ETC_FILES`` that exist (looked up once per worker:
    the host's layout does not change under a running worker)."""

    links: tuple[tuple[str, str], ...]
    dirs: tuple[str, ...]
    etc: tuple[tuple[str, bool], ...]

    @classmethod
    def detect(cls) -> HostLayout:
        links, dirs = [], []
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                links.append((path, os.readlink(path)))
            elif os.path.isdir(path):
                dirs.append(path)
        etc = [(path, os.path.isdir(path)) for path in ETC_FILES if os.path.exists(path)]
        return cls(tuple(links), tuple(dirs), tuple(etc))

    def populate(self, rootfs: Path) -> None:
        """The mount points and links of an empty root-owned ``rootfs`` (shown read-only)."""
        dirs = [*self.dirs, "/proc", "/dev", "/tmp", "/etc", MOUNT_POINT]
        dirs += [path for path, is_dir in self.etc if is_dir]
        dirs += sorted({os.path.dirname(path) for path, _ in self.etc} - {"/etc"})
        for path in sorted(set(dirs)):
            target = rootfs / path.lstrip("/")
            target.mkdir(mode=0o755, parents=True, exist_ok=True)
            os.chmod(target, 0o755)
        for path, link in self.links:
            os.symlink(link, rootfs / path.lstrip("/"))
        files = [path for path, is_dir in self.etc if not is_dir] + ["/etc/passwd", "/etc/group"]
        for path in files:
            fd = os.open(rootfs / path.lstrip("/"), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            os.close(fd)


def _swap_accounted() -> bool:
    """Whether the worker's memory cgroup counts swap (then the limit covers swap too)."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return False
    for _id, controllers, path in lines:
        if "memory" in controllers.split(","):
            return (CGROUP_ROOT / "memory" / path.lstrip("/") / "memory.memsw.limit_in_bytes").exists()
        if controllers == "" and (CGROUP_ROOT / path.lstrip("/") / "memory.swap.max").exists():
            return True
    return False


def oci_config(
    root: Path,
    owner: JobOwner,
    limits: SandboxLimits | None,
    layout: HostLayout,
    cgroup: str,
    swap: bool = False,
    writable_actions: bool = False,
) -> dict[str, Any]:
    """The ``config.json`` of a job's sandbox over the job root ``root`` (see the module
    docstring); its process is the idle init, as the job's uid. ``actions/`` is read-only, as
    to bubblewrap's steps, unless ``writable_actions`` (a sandbox for the helper that fills or
    empties it)."""
    runner = root / "runner"
    mounts: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
    ]
    shm = limits.shm_bytes if limits is not None else 64 << 20
    mounts.append(
        {
            "destination": "/dev/shm",
            "type": "tmpfs",
            "source": "shm",
            "options": ["nosuid", "nodev", "mode=1777", f"size={shm}"],
        }
    )
    mounts += [_bind(path, path) for path in layout.dirs]
    mounts += [_bind(path, path) for path, _ in layout.etc]
    mounts += [_bind(runner / "passwd", "/etc/passwd"), _bind(runner / "group", "/etc/group")]
    mounts += [
        _bind(root, MOUNT_POINT, writable=True),
        _bind(runner, f"{MOUNT_POINT}/runner"),
    ]
    if not writable_actions:
        mounts.append(_bind(root / "actions", f"{MOUNT_POINT}/actions"))
    mounts.append(_bind(root / "tmp", "/tmp", writable=True))
    process: dict[str, Any] = {
        "terminal": False,
        "user": {"uid": owner.uid, "gid": owner.gid},
        "args": list(INIT_ARGV),
        "env": [f"PATH={INIT_PATH}"],
        "cwd": "/",
        "capabilities": _no_capabilities(),
        "noNewPrivileges": True,
        "rlimits": _oci_rlimits(limits) if limits is not None else [{"type": "RLIMIT_CORE", "hard": 0, "soft": 0}],
    }
    linux: dict[str, Any] = {
        "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
        "cgroupsPath": cgroup,
    }
    if limits is not None:
        memory: dict[str, int] = {"limit": limits.memory_bytes}
        if swap:
            # memory + swap: no swap beyond the limit.
            memory["swap"] = limits.memory_bytes
        linux["resources"] = {"memory": memory}
    return {
        "ociVersion": "1.0.2",
        "process": process,
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "ci",
        "mounts": mounts,
        "linux": linux,
    }


def process_spec(request: SandboxRequest, owner: JobOwner) -> dict[str, Any]:
    """The process file of one step (``runsc exec --process``): its argv, cwd and environment,
    secrets included, as the job's uid with no capabilities."""
    if not request.cwd.startswith("/"):
        raise SandboxError(f"the step's working directory must be absolute: {request.cwd!r}")
    return {
        "terminal": False,
        "user": {"uid": owner.uid, "gid": owner.gid},
        "args": [a.replace("\x00", "") for a in request.argv],
        "env": _env_list(request.env),
        "cwd": request.cwd,
        "capabilities": _no_capabilities(),
        "noNewPrivileges": True,
        "rlimits": _oci_rlimits(request.limits) if request.limits is not None else [],
    }


def _write_private(path: Path, data: bytes) -> None:
    """A new file of root's, 0600, never through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        os.fchmod(f.fileno(), 0o600)


@dataclass
class _Container:
    """One job's running sandbox."""

    cid: str
    bundle: Path
    limits: SandboxLimits | None
    run: subprocess.Popen[bytes]
    init_stdin: int
    # ``actions/`` is writable in this sandbox (made for the helper; a step needs a fresh one).
    writable_actions: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)
    seq: int = 0
    step: _GVisorProcess | None = None
    # Whether the last look found nothing but init, with the step's exec ended: until the next
    # step starts, nothing can start a process there.
    clean: bool = True

    def alive(self) -> bool:
        return self.run.poll() is None

    def stepping(self) -> bool:
        """A step's exec is running."""
        return self.step is not None and self.step.poll() is None


class _Exec(_PopenProcess):
    """One ``runsc exec`` on the host: its output, exit and pid (the Popen plumbing is the
    other backends')."""

    def host_pids(self) -> list[int]:
        """The host pid of the ``runsc exec`` while it runs. The job's own processes have none:
        they are the sentry's tasks (``guest_pids`` lists a step's as the sandbox numbers them)."""
        return [self._proc.pid] if self._proc.poll() is None else []


class _GVisorProcess(_Exec):
    """One step: the host's ``runsc exec`` process (whose exit ends the step) and, inside the
    sandbox, every process but init."""

    def __init__(self, proc: subprocess.Popen[bytes], sandbox: GVisorSandbox, container: _Container, spec: Path):
        super().__init__(proc)
        self._sandbox = sandbox
        self._container = container
        self._spec = spec
        self._finished = False

    def terminate_tree(self) -> None:
        self._sandbox._signal_step(self._container, "TERM")

    def kill_tree(self) -> None:
        self._sandbox._kill_step(self._container)
        if not self._container.alive():
            # The sandbox is gone; its exec waits on nothing any more.
            with contextlib.suppress(OSError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    def guest_pids(self) -> list[int]:
        """The step's processes as the sandbox numbers them (every one but init)."""
        return self._sandbox._guest_pids(self._container) or []

    def finish(self) -> list[str]:
        if self._finished:
            return []
        self._finished = True
        return self._sandbox._finish_step(self._container, self, self._spec)


class _GVisorSideProcess(_Exec):
    """A helper exec'd beside a running step (the disk check): one ``runsc exec``, which a kill
    ends; whatever of it survives in the sandbox dies with the step's leftovers."""

    def __init__(self, proc: subprocess.Popen[bytes], spec: Path):
        super().__init__(proc)
        self._spec = spec

    def terminate_tree(self) -> None:
        self._signal_group(signal.SIGTERM)

    def kill_tree(self) -> None:
        self._signal_group(signal.SIGKILL)

    def guest_pids(self) -> list[int]:
        return []

    def finish(self) -> list[str]:
        self._spec.unlink(missing_ok=True)
        return []


# The self-test -------------------------------------------------------------------------------

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


class _LaunchError(SandboxError):
    """A job's sandbox did not start."""


def _explain(check: SelfTestCheck, printed: str) -> str:
    """What a failed check means, where the cause is known."""
    if check.name in ("ls /", "stat /") and "Invalid argument" in printed:
        return "this runsc refuses statx with AT_NO_AUTOMOUNT"
    if "pass-fd" in printed:
        return "this runsc cannot pass a descriptor into a process (runsc exec --pass-fd)"
    if check.data == "file" and "not starting with" in printed:
        return "this runsc writes a passed regular file from offset 0, over what it held"
    return ""


def _shown(output: bytes, limit: int = 400) -> str:
    text = output.decode("utf-8", "replace").strip().replace("\n", "; ")
    return text if len(text) <= limit else "..." + text[-limit:]


# The backend ---------------------------------------------------------------------------------


class GVisorSandbox:
    """CI jobs in gVisor sandboxes (see the module docstring); constructed only once runsc has
    passed the self-test."""

    name = "gvisor"

    def __init__(
        self,
        users: JobUserPool,
        state_dir: Path,
        runsc: str | None = None,
        platform: str = "ptrace",
        checks: tuple[SelfTestCheck, ...] = SELF_TEST_CHECKS,
    ) -> None:
        found = runsc or shutil.which("runsc")
        if found is None:
            raise SandboxError("gVisor (runsc) is not installed: install a current release from https://gvisor.dev")
        if os.geteuid() != 0:
            raise SandboxError("the gVisor sandbox needs the CI worker to run as root (runsc's cgroups and gofer)")
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise SandboxError("setpriv (util-linux) is required to tie job sandboxes to the worker's life")
        self._binary = found
        self._setpriv = setpriv
        self._platform = platform
        self._users = users
        self._layout = HostLayout.detect()
        self._swap = _swap_accounted()
        self._containers: dict[Path, _Container] = {}
        self._lock = threading.Lock()
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(state_dir, 0o700)
        self._sweep_stale(state_dir)
        # This worker's own directory, held by a lock for its life: a later worker that finds
        # the lock free cleans up after it.
        self._dir = state_dir / f"w-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._dir.mkdir(mode=0o700)
        self._lock_fd = os.open(self._dir / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._state = self._dir / "state"
        self._state.mkdir(mode=0o700)
        self._checks = checks
        self.version = self._version()
        try:
            self.self_test()
        except BaseException:
            self.close()
            raise

    # Sandbox protocol ---------------------------------------------------------------------

    @property
    def supports_network(self) -> bool:
        """No network for now. Debian's runsc cannot run ``--network=sandbox`` at all ("cannot run
        with network enabled in root network namespace"), and a current release's would put
        the job on the host's network through gVisor's own stack: a job would still need the
        user-mode egress bubblewrap's jobs get (``worker_ci.network``: no host loopback,
        link-local, private or metadata address), wired into the sandbox's namespace."""
        return False

    def mount_point(self, root: Path) -> str:
        return MOUNT_POINT

    def prepare(self, root: Path) -> JobOwner:
        return self._users.lease_root(root, _runner_files)

    def release(self, root: Path) -> None:
        with self._lock:
            container = self._containers.pop(root, None)
        if container is not None:
            self._teardown(container)
        self._users.release_root(root)

    def start(self, request: SandboxRequest) -> _GVisorProcess | _GVisorSideProcess:
        if request.network:
            raise SandboxError("the gvisor backend gives jobs no network")
        stdin_fd, data_fd = request.stdin_fd, request.data_fd
        if data_fd is not None and data_fd <= 2:
            raise SandboxError(f"data_fd {data_fd} would be taken by the step's stdio")
        owner = self._users.owner_of(request.root)
        spec_data = json.dumps(process_spec(request, owner)).encode()
        container = self._container(request.root, owner, request.limits, request.writable_actions)
        with container.lock:
            if container.stepping():
                # A helper beside the running step (the disk check); it reads, never writes.
                return self._exec_beside(container, request, spec_data)
            if not container.clean:
                # The previous step was not finished: nothing of it may run into this one.
                self._kill_step(container)
            container.seq += 1
            spec = container.bundle / f"exec-{container.seq}.json"
            _write_private(spec, spec_data)
            argv = [*self._global_args(), "exec", "--process", str(spec)]
            if data_fd is not None:
                argv += ["--pass-fd", f"{int(data_fd)}:{DATA_FD}"]
            argv.append(container.cid)
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=stdin_fd if stdin_fd is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    pass_fds=[data_fd] if data_fd is not None else [],
                    env=RUNSC_ENV,
                    start_new_session=True,
                )
            except OSError as exc:
                spec.unlink(missing_ok=True)
                raise SandboxError(f"cannot start runsc exec: {exc}") from exc
            container.clean = False
            container.step = _GVisorProcess(proc, self, container, spec)
            return container.step

    def _exec_beside(self, container: _Container, request: SandboxRequest, spec_data: bytes) -> _GVisorSideProcess:
        if request.stdin_fd is not None or request.data_fd is not None or request.writable_actions:
            raise SandboxError("only a read-only helper runs beside a job's step")
        container.seq += 1
        spec = container.bundle / f"exec-{container.seq}.json"
        _write_private(spec, spec_data)
        argv = [*self._global_args(), "exec", "--process", str(spec), container.cid]
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=RUNSC_ENV,
                start_new_session=True,
            )
        except OSError as exc:
            spec.unlink(missing_ok=True)
            raise SandboxError(f"cannot start runsc exec: {exc}") from exc
        return _GVisorSideProcess(proc, spec)

    def close(self) -> None:
        """Tear down every sandbox of this worker and its directory (at shutdown)."""
        with self._lock:
            containers = list(self._containers.values())
            self._containers.clear()
        for container in containers:
            self._teardown(container)
        shutil.rmtree(self._dir, ignore_errors=True)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # The self-test ------------------------------------------------------------------------

    def self_test(self) -> None:
        """Run the self-test's checks (``SELF_TEST_CHECKS`` unless a test names fewer) as a
        throwaway job; ``SandboxError`` names the first that fails."""
        base = self._dir / "self-test"
        base.mkdir(mode=0o700)
        root = base / "root"
        started = time.monotonic()
        self.prepare(root)
        try:
            for check in self._checks:
                self._check(root, check)
        finally:
            self.release(root)
            # Only the checks above ran in this tree (no job's code): root may remove it.
            shutil.rmtree(base, ignore_errors=True)
        log.info("gVisor self-test passed in %.1f s (%s, %s)", time.monotonic() - started, self.version, self._binary)

    def _fail(self, check: SelfTestCheck, printed: str) -> SandboxError:
        why = _explain(check, printed)
        detail = f"{printed}: {why}" if why else printed
        return SandboxError(
            f"gVisor self-test failed: `{check.name}` ({detail}; {self.version} at {self._binary}; "
            "install a current gVisor release from https://gvisor.dev)"
        )

    def _check(self, root: Path, check: SelfTestCheck) -> None:
        fds: list[int] = []
        data_read = data_file = -1
        stdin_fd = data_fd = None
        try:
            if check.stdin is not None:
                r, w = os.pipe()
                fds += [r, w]
                os.write(w, check.stdin)
                os.close(w)
                fds.remove(w)
                stdin_fd = r
            if check.data == "pipe":
                data_read, data_fd = os.pipe()
                fds += [data_read, data_fd]
            elif check.data == "file":
                data_file = os.open(root.parent / "fd3", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                fds.append(data_file)
                os.write(data_file, FILE_PREFIX)
                data_fd = data_file
            request = SandboxRequest(
                argv=list(check.argv),
                env={"PATH": INIT_PATH, "HOME": f"{MOUNT_POINT}/home", "LANG": "C"},
                root=root,
                cwd=MOUNT_POINT,
                limits=SELF_TEST_LIMITS,
                name="gvisor-self-test",
                stdin_fd=stdin_fd,
                data_fd=data_fd,
            )
            try:
                proc = self.start(request)
            except _LaunchError as exc:
                raise self._fail(LAUNCH_CHECK, str(exc)) from exc
            except SandboxError as exc:
                raise self._fail(check, str(exc)) from exc
            if data_fd is not None and data_fd != data_file:
                os.close(data_fd)
                fds.remove(data_fd)
            try:
                output, _ = proc._proc.communicate(timeout=SELF_TEST_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill_tree()
                output, _ = proc._proc.communicate(timeout=STOP_SECONDS)
                output += b" (timed out)"
            code = proc.wait()
            notes = proc.finish()
            if check.refused is not None:
                if check.refused in output.decode("utf-8", "replace").split() or code == 0:
                    raise self._fail(check, f"the limit did not hold: {_shown(output)}")
                return
            lines = output.decode("utf-8", "replace").splitlines()
            missing = [line for line in check.lines if line not in lines]
            if code != 0 or missing:
                shown = _shown(output) or f"exit status {code}"
                raise self._fail(check, "; ".join([shown, *notes]))
            if check.data_out is not None:
                got = self._read_data(data_read, data_file)
                if got != check.data_out:
                    expected = FILE_PREFIX if check.data == "file" else b""
                    how = f"not starting with {expected!r}" if expected and not got.startswith(expected) else ""
                    raise self._fail(check, f"fd 3 got {got!r}, not {check.data_out!r} {how}".strip())
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                (root.parent / "fd3").unlink()

    @staticmethod
    def _read_data(pipe_fd: int, file_fd: int) -> bytes:
        if file_fd >= 0:
            return os.pread(file_fd, 1 << 16, 0)
        out = b""
        while chunk := os.read(pipe_fd, 1 << 16):
            out += chunk
        return out

    # runsc --------------------------------------------------------------------------------

    def _global_args(self) -> list[str]:
        # --file-access-mounts=shared: the worker writes step scripts and io/ files between steps,
        # and reads what the job wrote; the sandbox must see the host's changes (the default
        # now, said outright). --overlay2=none: the root is read-only, with nothing to overlay.
        return [
            self._binary,
            f"--root={self._state}",
            "--network=none",
            f"--platform={self._platform}",
            "--file-access-mounts=shared",
            "--overlay2=none",
        ]

    def _runsc(self, *args: str, timeout: float = RUNSC_SECONDS) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(
                [*self._global_args(), *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=RUNSC_ENV,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return subprocess.CompletedProcess(list(args), 255, b"", str(exc).encode())

    def _version(self) -> str:
        try:
            out = subprocess.run(
                [self._binary, "--version"], capture_output=True, env=RUNSC_ENV, timeout=RUNSC_SECONDS, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxError(f"cannot run {self._binary}: {exc}") from exc
        first = out.stdout.decode("utf-8", "replace").strip().splitlines()
        return first[0] if first else "runsc (unknown version)"

    def _guest_pids(self, container: _Container) -> list[int] | None:
        """The sandbox's processes but init; ``None`` when runsc cannot say (a stopped sandbox)."""
        if not container.alive():
            return None
        done = self._runsc("ps", container.cid)
        if done.returncode != 0:
            return None
        pids = []
        # A table: UID PID PPID C TTY STIME TIME CMD (the JSON form has only pids in some
        # releases and more in others; the table is the same in all).
        for line in done.stdout.decode("utf-8", "replace").splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit() and int(fields[1]) != INIT_PID:
                pids.append(int(fields[1]))
        return pids

    # Containers ---------------------------------------------------------------------------

    def _container(self, root: Path, owner: JobOwner, limits: SandboxLimits | None, writable: bool) -> _Container:
        """The job's running sandbox, started (or started afresh) as needed: with ``actions/``
        writable for the helper that fills it, read-only for steps (and a helper beside one)."""
        with self._lock:
            container = self._containers.get(root)
        if container is not None and container.alive() and container.limits == limits:
            if container.writable_actions == writable or (not writable and container.stepping()):
                return container
            if container.stepping():
                raise SandboxError("actions/ cannot be made writable while a step runs")
        if container is not None:
            self._teardown(container)
        container = self._launch(root, owner, limits, writable)
        with self._lock:
            self._containers[root] = container
        return container

    def _launch(self, root: Path, owner: JobOwner, limits: SandboxLimits | None, writable: bool) -> _Container:
        cid = f"leasehold-{uuid.uuid4().hex[:16]}"
        bundle = self._dir / cid
        bundle.mkdir(mode=0o700)
        init_read = init_write = -1
        run: subprocess.Popen[bytes] | None = None
        try:
            rootfs = bundle / "rootfs"
            rootfs.mkdir(mode=0o755)
            os.chmod(rootfs, 0o755)
            self._layout.populate(rootfs)
            # Relative: below the worker's own cgroup, as the bubblewrap backend's step cgroups.
            config = oci_config(root, owner, limits, self._layout, f"leasehold-{cid}", self._swap, writable)
            _write_private(bundle / "config.json", json.dumps(config, indent=1).encode())
            init_read, init_write = os.pipe()
            os.set_inheritable(init_write, False)
            with open(bundle / "runsc.log", "wb") as runsc_log:
                run = subprocess.Popen(
                    [
                        self._setpriv,
                        "--pdeathsig",
                        "KILL",
                        "--",
                        *self._global_args(),
                        "run",
                        "--bundle",
                        str(bundle),
                        cid,
                    ],
                    stdin=init_read,
                    stdout=runsc_log,
                    stderr=subprocess.STDOUT,
                    env=RUNSC_ENV,
                    start_new_session=True,
                )
            os.close(init_read)
            init_read = -1
            container = _Container(cid, bundle, limits, run, init_write, writable)
            self._wait_running(container)
            return container
        except (OSError, SandboxError) as exc:
            if init_read >= 0:
                os.close(init_read)
            printed = b""
            with contextlib.suppress(OSError):
                printed = (bundle / "runsc.log").read_bytes()
            if run is not None:
                self._teardown(_Container(cid, bundle, limits, run, init_write))
            else:
                if init_write >= 0:
                    os.close(init_write)
                shutil.rmtree(bundle, ignore_errors=True)
            detail = _shown(printed) or str(exc)
            raise _LaunchError(f"cannot start the job's gVisor sandbox: {detail}") from exc

    def _wait_running(self, container: _Container) -> None:
        deadline = time.monotonic() + START_SECONDS
        delay = 0.005
        while time.monotonic() < deadline:
            if not container.alive():
                raise SandboxError(f"runsc run exited with status {container.run.returncode}")
            done = self._runsc("state", container.cid)
            if done.returncode == 0:
                with contextlib.suppress(ValueError):
                    if json.loads(done.stdout).get("status") == "running":
                        return
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        raise SandboxError(f"the sandbox did not start within {START_SECONDS:.0f} s")

    def _signal_step(self, container: _Container, sig: str) -> None:
        """``sig`` to every process of the sandbox; init ignores SIGTERM, SIGINT and SIGHUP."""
        with container.lock:
            if container.alive():
                self._runsc("kill", "--all", container.cid, sig)

    def _kill_step(self, container: _Container) -> None:
        """SIGKILL every process of the sandbox but init; the whole sandbox where that cannot be
        done one by one."""
        with container.lock:
            pids = self._guest_pids(container)
            if pids is None:
                self._teardown(container)
                return
            if not pids:
                container.clean = container.step is None or container.step.poll() is not None
                return
            if len(pids) > KILL_ONE_BY_ONE:
                self._teardown(container)
                return
            # Stopped, nothing forks: the list taken now is the whole of them.
            self._runsc("kill", "--all", container.cid, "STOP")
            pids = self._guest_pids(container)
            if pids is None or len(pids) > KILL_ONE_BY_ONE:
                self._teardown(container)
                return
            for pid in pids:
                self._runsc("kill", "--pid", str(pid), container.cid, "KILL")
            self._runsc("kill", "--pid", str(INIT_PID), container.cid, "CONT")
            container.clean = container.step is None or container.step.poll() is not None

    def _finish_step(self, container: _Container, step: _GVisorProcess, spec: Path) -> list[str]:
        notes = []
        with container.lock:
            if not container.alive():
                limit = container.limits.memory_bytes if container.limits is not None else None
                bound = f" (out of memory? the job may use {limit} bytes in all, the sandbox's own included)"
                notes.append(f"the job's gVisor sandbox stopped during this step{bound if limit else ''}")
                self._teardown(container)
            elif not container.clean:
                # What the step left running dies with it, as in bubblewrap's pid namespace.
                self._kill_step(container)
            if container.step is step:
                container.step = None
            spec.unlink(missing_ok=True)
        return notes

    def _teardown(self, container: _Container) -> None:
        """Kill and delete a sandbox and remove its bundle (its cgroup goes with ``delete``)."""
        with container.lock:
            if container.alive():
                self._runsc("kill", "--all", container.cid, "KILL")
                try:
                    container.run.wait(STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(OSError):
                        os.killpg(container.run.pid, signal.SIGKILL)
                    container.run.wait(STOP_SECONDS)
            else:
                container.run.wait()
            self._runsc("delete", "--force", container.cid)
            if container.init_stdin >= 0:
                os.close(container.init_stdin)
                container.init_stdin = -1
            container.clean = True
            shutil.rmtree(container.bundle, ignore_errors=True)

    def _sweep_stale(self, state_dir: Path) -> None:
        """Delete what workers that died left (their sandboxes died with them; their state,
        cgroups and bundles did not)."""
        for entry in _stale_dirs(state_dir):
            state = entry / "state"
            if state.is_dir():
                listed = subprocess.run(
                    [self._binary, f"--root={state}", "list", "--quiet"],
                    capture_output=True,
                    env=RUNSC_ENV,
                    timeout=RUNSC_SECONDS,
                    check=False,
                )
                for cid in listed.stdout.decode("utf-8", "replace").split():
                    subprocess.run(
                        [self._binary, f"--root={state}", "delete", "--force", cid],
                        capture_output=True,
                        env=RUNSC_ENV,
                        timeout=RUNSC_SECONDS,
                        check=False,
                    )
            shutil.rmtree(entry, ignore_errors=True)
            log.info("removed the gVisor state of a stopped worker: %s", entry.name)


def _stale_dirs(state_dir: Path) -> Iterator[Path]:
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


def make_gvisor_sandbox(settings: Settings, users: JobUserPool) -> GVisorSandbox:
    """The gVisor backend for ``settings``, or ``SandboxError`` (runsc missing, or failing its
    self-test: a runtime that cannot run jobs correctly is refused, never used)."""
    return GVisorSandbox(
        users,
        settings.data_dir / "ci" / "gvisor",
        runsc=settings.ci_gvisor_runsc,
        platform=settings.ci_gvisor_platform,
    )
