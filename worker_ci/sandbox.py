"""Sandbox backends for CI jobs: bubblewrap (default), Docker, and an explicitly unsafe plain process.

bubblewrap, as the worker runs it (as root, so that it can give each job a user of its own):

- **Who the job is.** Every job attempt leases a host uid of its own from a pool
  (``LEASEHOLD_CI_SANDBOX_UID_BASE``..+``_COUNT``, held by a lock file, so two workers on one
  host never share one) and runs as that unprivileged uid: no capabilities (bounding set
  empty), ``no_new_privs``, so nothing it writes or runs acts as root, and rlimits such as the
  process count bind. bubblewrap itself runs as root without a user namespace (it builds the
  mount, pid, network, ipc and uts namespaces), and ``setpriv`` drops to the job's uid as the
  last step before the job's command.
- **What the worker touches.** The job root (``prepare``) is a root-owned directory the job
  cannot add to, rename in or delete from; ``work/``, ``tmp/`` and ``home/`` inside it belong to
  the job's uid, ``runner/`` (scripts, the event JSON) and ``io/`` (one step's ``$GITHUB_OUTPUT``,
  ``$GITHUB_ENV``, ``$GITHUB_PATH``, ``$GITHUB_STATE`` and ``$GITHUB_STEP_SUMMARY``, made anew
  each step) to root. So every path bubblewrap resolves on the host
  is one the job cannot replace with a symlink, and the worker reads job-written files only
  with ``O_NOFOLLOW`` inside root-owned directories.
- **Limits that hold for the whole step.** A cgroup per step (``worker_ci.cgroups``) with a
  pids limit and a memory limit that counts every tmpfs page; ``/dev/shm`` is a sized tmpfs;
  ``/dev`` and ``/`` are not writable; the workspace (``tmp/`` included) has a disk quota that
  the activity enforces. Per-process rlimits (address space, processes, file size, CPU, no
  core files) are set by the worker (``prlimit(2)``) on the step's first process, which has
  joined the step's cgroups and waits at a gate (``GATE_SCRIPT``): only then does it become
  bubblewrap, so every process of the sandbox starts inside both.
- **What the job can see.** A minimal read-only root: ``/usr`` and the merged-``/usr``
  links, a few harmless files of ``/etc`` and stub ``passwd``/``group``; no ``/opt``,
  ``/home``, ``/root``, ``/var`` or ``/run``; ``/proc`` shows only the job's own processes.
  The job's environment travels in a memfd (``--args``), not on a command line that ``ps``
  shows.
- **Kernel surface.** A seccomp filter (``worker_ci.seccomp_filter``) refuses new
  namespaces, mounts, ptrace, keyrings, BPF, perf, userfaultfd and io_uring.
- **Network.** None: a network namespace of its own with only ``lo``. A job of a tenant whose
  plan allows network gets user-mode egress (``worker_ci.network``) that cannot reach the
  host's loopback, link-local, private or metadata addresses.

bubblewrap shares the host kernel: a kernel bug reachable through the allowed syscalls is an
escape. Where that risk is not acceptable, run jobs in a microVM backend (Firecracker, Kata,
gVisor) instead; see the README's Security section.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from activities.ci.jobroot import make_layout, owner_of_dir, refresh_runner, write_new
from activities.ci.sandbox import JobOwner, Sandbox, SandboxError, SandboxLimits, SandboxRequest
from leasehold.settings import Settings
from worker_ci.cgroups import CgroupLimiter, CgroupUnavailable, StepCgroup
from worker_ci.network import SLIRP_DNS, NetworkUnavailable, UserModeNetwork
from worker_ci.seccomp_filter import SeccompUnavailable, job_filter_bpf

log = logging.getLogger(__name__)

MOUNT_POINT = "/ci"
# The job's uid and gid as its own tools see them in passwd (its host uid is leased).
SANDBOX_NAME = "runner"
# Read-only system paths (missing ones are skipped; merged-/usr symlinks are recreated).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Only harmless parts of /etc: no shadow, no host credentials or configuration.
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/ssl/certs",
    # OpenSSL's public configuration: node refuses to start when it exists but is unreadable.
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/protocols",
    "/etc/services",
    "/etc/mime.types",
    "/etc/bash.bashrc",
    "/etc/profile",
)
NETWORK_ETC_FILES = ("/etc/hosts", "/etc/gai.conf")
# Variables that change how the dynamic loader or libc behave: set for the job only after it
# has dropped to its own uid, never for the root-run steps before (LD_PRELOAD of a file in
# the workspace would otherwise run as root).
LOADER_PREFIXES = ("LD_", "MALLOC_")
LOADER_NAMES = frozenset({"GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH", "NLSPATH", "HOSTALIASES", "RES_OPTIONS", "TZDIR"})


# The first process of a sandboxed step: a shell that joins the step's cgroups (its arguments up
# to ``--``, ``StepCgroup.self_join_files``), then waits on its stdin until the worker has set its
# rlimits, then becomes bubblewrap (the job gets /dev/null as its stdin). A failed join, or
# anything but "go" on stdin (a failed setup, a worker that died meanwhile), ends it before
# bubblewrap runs. No helper process: a ``prlimit`` exec per step is saved.
GATE_TEMPLATE = (
    'while [ "$1" != -- ]; do echo 0 > "$1" || exit 125; shift; done; shift; '
    'IFS= read -r go && [ "$go" = go ] || exit 125; exec "$@" {stdin}'
)


def _gate_script(stdin_fd: int | None) -> str:
    """The gate, giving the sandbox ``stdin_fd`` (a descriptor the worker opened) or /dev/null."""
    return GATE_TEMPLATE.format(stdin="</dev/null" if stdin_fd is None else f"<&{int(stdin_fd)} {int(stdin_fd)}<&-")


GATE_SCRIPT = _gate_script(None)


def _data_fd_wrapper(data_fd: int | None) -> list[str]:
    """Inside the sandbox, after the uid drop: the worker's ``data_fd`` becomes descriptor 3
    (bubblewrap's own descriptors may hold that number outside; inside, they are the job's
    copies, so replacing one there changes nothing of bubblewrap's)."""
    if data_fd is None:
        return []
    fd = int(data_fd)
    moves = "" if fd == 3 else f"exec 3>&{fd} {fd}>&-; "
    # bash: dash takes only one-digit descriptors in a redirection.
    return ["/bin/bash", "-c", moves + 'exec "$@"', "bash"]


GATE_OPEN = b"go\n"


def _rlimits(limits: SandboxLimits) -> list[tuple[int, int]]:
    """(resource, soft and hard limit) for each process of a step, as ``_prlimit_argv``'s."""
    return [
        (resource.RLIMIT_AS, limits.memory_bytes),
        (resource.RLIMIT_NPROC, limits.max_processes),
        (resource.RLIMIT_FSIZE, limits.max_file_bytes),
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_CORE, 0),
    ]


def _prlimit_argv(limits: SandboxLimits | None) -> list[str]:
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


def _clean(text: str) -> str:
    # bubblewrap reads its arguments NUL-separated: a NUL in a job's value would start a new
    # option of the attacker's choosing.
    return text.replace("\x00", "")


class JobUserPool:
    """Host uids for jobs, one per running attempt, leased with a lock file each (released by
    the kernel if the worker dies), so several workers on one host never share a uid."""

    def __init__(self, lock_dir: Path, base: int, count: int) -> None:
        if base < 1000 or count < 1 or base + count > 2**31 - 2:
            raise SandboxError(f"bad CI job uid range {base}+{count}")
        lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._dir = lock_dir
        self._base = base
        self._count = count
        self._held: dict[int, int] = {}
        self._roots: dict[Path, JobOwner] = {}
        self._lock = threading.Lock()
        self._next = 0

    def acquire(self) -> int:
        with self._lock:
            for i in range(self._count):
                uid = self._base + (self._next + i) % self._count
                if uid in self._held:
                    continue
                fd = os.open(self._dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    continue
                self._held[uid] = fd
                self._next = (self._next + i + 1) % self._count
                return uid
        raise SandboxError("no free CI job uid: raise LEASEHOLD_CI_SANDBOX_UID_COUNT")

    def release(self, uid: int) -> None:
        with self._lock:
            fd = self._held.pop(uid, None)
        if fd is not None:
            os.close(fd)

    def lease_root(self, root: Path, extra: Callable[[Path, int], None] | None = None) -> JobOwner:
        """Lease a uid for one job root and make the root's layout for it (``extra`` adds a
        backend's own files)."""
        uid = self.acquire()
        owner = JobOwner(uid, uid)
        try:
            make_layout(root, owner)
            if extra is not None:
                extra(root, uid)
        except OSError:
            self.release(uid)
            raise
        with self._lock:
            self._roots[root] = owner
        return owner

    def release_root(self, root: Path) -> None:
        with self._lock:
            owner = self._roots.pop(root, None)
        if owner is not None and owner.uid is not None:
            self.release(owner.uid)

    def acquire_uid(self, uid: int) -> bool:
        """Lease this very uid if no attempt holds it (a leftover root's owner, for cleaning it
        up as that user); ``False`` when it is out of range or held."""
        if not self._base <= uid < self._base + self._count:
            return False
        with self._lock:
            if uid in self._held:
                return False
            fd = os.open(self._dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            self._held[uid] = fd
            return True

    def adopt_root(self, root: Path, owner: JobOwner, extra: Callable[[Path, int], None] | None = None) -> bool:
        """Take over a leftover job root whose owner no attempt holds (see ``acquire_uid``),
        with root's own runner files made anew."""
        if owner.uid is None or not self.acquire_uid(owner.uid):
            return False
        try:
            refresh_runner(root, extra is not None)
            if extra is not None:
                extra(root, owner.uid)
        except OSError:
            self.release(owner.uid)
            return False
        with self._lock:
            self._roots[root] = owner
        return True

    def owner_of(self, root: Path) -> JobOwner:
        with self._lock:
            owner = self._roots.get(root)
        if owner is None or owner.uid is None:
            raise SandboxError(f"no job user for {root}: prepare() was not called")
        return owner


def _runner_files(root: Path, uid: int) -> None:
    """The job's passwd and group (its tools want a name for its uid) and, for jobs with
    network, a resolv.conf naming slirp4netns's resolver."""
    runner = root / "runner"
    for name, text in (
        ("passwd", f"{SANDBOX_NAME}:x:{uid}:{uid}:runner:{MOUNT_POINT}/home:/bin/bash\n"),
        ("group", f"{SANDBOX_NAME}:x:{uid}:\n"),
        ("resolv.conf", f"nameserver {SLIRP_DNS}\n"),
        # Shown as /proc/cmdline (the host kernel's own stays hidden).
        ("cmdline", "\n"),
    ):
        write_new(runner, name, text.encode())


class _PopenProcess:
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


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _read_info(fd: int) -> int | None:
    # bwrap writes {"child-pid": N, ...} to the info fd once the namespaces exist.
    data = b""
    try:
        while chunk := os.read(fd, 4096):
            data += chunk
            with contextlib.suppress(ValueError):
                return int(json.loads(data)["child-pid"])
    except (OSError, KeyError, TypeError):
        return None
    return None


class _BwrapProcess(_PopenProcess):
    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        info_read: int,
        cgroup: StepCgroup | None,
    ) -> None:
        super().__init__(proc)
        self._info_fd = info_read
        self._init_pid: int | None = None
        self._ns: str | None = None
        self._lock = threading.Lock()
        self._cgroup = cgroup
        self._slirp: subprocess.Popen[bytes] | None = None

    def init_pid(self) -> int | None:
        with self._lock:
            if self._init_pid is None and self._info_fd >= 0:
                self._init_pid = _read_info(self._info_fd)
                os.close(self._info_fd)
                self._info_fd = -1
                if self._init_pid is not None:
                    self._ns = _pid_namespace(self._init_pid)
            return self._init_pid

    def host_pids(self) -> list[int]:
        self.init_pid()
        if self._ns is None:
            return []
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _pid_namespace(int(entry)) == self._ns:
                pids.append(int(entry))
        return sorted(pids)

    def terminate_tree(self) -> None:
        # SIGTERM every process but the namespace's init (bwrap): killing init would skip
        # the grace period, as the kernel then SIGKILLs the namespace.
        for pid in self.host_pids():
            if pid != self._init_pid:
                try:
                    os.kill(pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass

    def kill_tree(self) -> None:
        init = self.init_pid()
        if init is not None and _pid_namespace(init) == self._ns:
            try:
                os.kill(init, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._signal_group(signal.SIGKILL)
        if self._cgroup is not None:
            self._cgroup.kill_all()

    def finish(self) -> list[str]:
        notes = []
        if self._slirp is not None:
            self._slirp.terminate()
            try:
                self._slirp.wait(5)
            except subprocess.TimeoutExpired:
                self._slirp.kill()
                self._slirp.wait(5)
            self._slirp = None
        if self._cgroup is not None:
            kills = self._cgroup.oom_kills()
            if kills:
                notes.append(
                    f"out of memory: the step's processes may use {self._cgroup.memory_bytes} bytes in all "
                    f"(/dev/shm and /tmp files count); {kills} process(es) were killed"
                )
            self._cgroup.remove()
            self._cgroup = None
        with self._lock:
            if self._info_fd >= 0:
                os.close(self._info_fd)
                self._info_fd = -1
        return notes


def _system_dir_args() -> list[str]:
    """bubblewrap options for ``SYSTEM_DIRS`` as this host lays them out (looked up once per
    worker: the host's /usr layout does not change under a running worker)."""
    args: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class BubblewrapSandbox:
    """The default backend (see the module docstring)."""

    name = "bubblewrap"

    def __init__(
        self,
        users: JobUserPool,
        cgroups: CgroupLimiter | None,
        network: UserModeNetwork | None,
        bwrap: str | None = None,
    ) -> None:
        found = bwrap or shutil.which("bwrap")
        if found is None:
            raise SandboxError("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
        if os.geteuid() != 0:
            raise SandboxError(
                "the bubblewrap sandbox needs the CI worker to run as root, to run each job as an "
                "unprivileged uid of its own (LEASEHOLD_CI_SANDBOX_UID_BASE); run the worker as root"
            )
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise SandboxError("setpriv (util-linux) is required to drop CI jobs to their own uid")
        try:
            self._seccomp = job_filter_bpf()
        except SeccompUnavailable as exc:
            raise SandboxError(str(exc)) from exc
        self._bwrap = found
        self._setpriv = setpriv
        self._system_args = _system_dir_args()
        self._users = users
        self._cgroups = cgroups
        self._network = network

    @property
    def supports_network(self) -> bool:
        return self._network is not None

    def mount_point(self, root: Path) -> str:
        return MOUNT_POINT

    def prepare(self, root: Path) -> JobOwner:
        return self._users.lease_root(root, _runner_files)

    def release(self, root: Path) -> None:
        self._users.release_root(root)

    def adopt(self, root: Path) -> bool:
        """Take over a leftover job root (a worker killed mid-job left it) to clean it up as
        the user that owns its files; ``False`` while an attempt holds that user."""
        owner = owner_of_dir(root, "work")
        return owner is not None and self._users.adopt_root(root, owner, _runner_files)

    def argv(
        self, request: SandboxRequest, owner: JobOwner, info_fd: int, block_fd: int | None
    ) -> tuple[list[str], list[str]]:
        """bubblewrap's options (passed through a memfd: they hold the job's environment,
        secrets included, which a command line would show to ``ps``) and the command."""
        args = [
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "ci",
            "--clearenv",
            "--info-fd",
            str(info_fd),
        ]
        if block_fd is not None:
            args += ["--block-fd", str(block_fd)]
        args += self._system_args
        shm = request.limits.shm_bytes if request.limits is not None else 64 << 20
        args += ["--proc", "/proc", "--dev", "/dev", "--size", str(shm), "--tmpfs", "/dev/shm"]
        # The host kernel's command line names its boot setup (here: the VM's agent and ports).
        args += ["--ro-bind", str(request.root / "runner" / "cmdline"), "/proc/cmdline"]
        args += ["--chmod", "1777", "/dev/shm", "--dir", "/etc"]
        etc = ETC_FILES + (NETWORK_ETC_FILES if request.network else ())
        # bubblewrap makes a bind's missing parents 0700: /etc/ssl must stay traversable for
        # the job's uid, or neither its CA certificates nor node's OpenSSL config can be read.
        for parent in sorted({os.path.dirname(p) for p in etc} - {"/etc"}):
            args += ["--perms", "0755", "--dir", parent]
        for path in etc:
            args += ["--ro-bind-try", path, path]
        runner = request.root / "runner"
        args += ["--ro-bind", str(runner / "passwd"), "/etc/passwd"]
        args += ["--ro-bind", str(runner / "group"), "/etc/group"]
        if request.network:
            args += ["--ro-bind", str(runner / "resolv.conf"), "/etc/resolv.conf"]
        args += ["--bind", str(request.root), MOUNT_POINT]
        args += ["--ro-bind", str(runner), f"{MOUNT_POINT}/runner"]
        if not request.writable_actions:
            args += ["--ro-bind", str(request.root / "actions"), f"{MOUNT_POINT}/actions"]
        args += ["--bind", str(request.root / "tmp"), "/tmp"]
        args += ["--remount-ro", "/", "--chdir", _clean(request.cwd)]
        loader: list[str] = []
        for key, value in request.env.items():
            key, value = _clean(key), _clean(value)
            if not key or "=" in key:
                continue
            if key.startswith(LOADER_PREFIXES) or key in LOADER_NAMES:
                loader.append(f"{key}={value}")
            else:
                args += ["--setenv", key, value]
        drop = [
            self._setpriv,
            f"--reuid={owner.uid}",
            f"--regid={owner.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]
        env_prefix = ["/usr/bin/env", *loader] if loader else []
        wrapper = _data_fd_wrapper(request.data_fd)
        return args, [*drop, *wrapper, *env_prefix, *(_clean(a) for a in request.argv)]

    def start(self, request: SandboxRequest) -> _BwrapProcess:
        if request.network and self._network is None:
            raise SandboxError("this worker cannot give jobs a network")
        owner = self._users.owner_of(request.root)
        cgroup: StepCgroup | None = None
        if self._cgroups is not None and request.limits is not None:
            try:
                cgroup = self._cgroups.create(f"{owner.uid}", request.limits.max_processes, request.limits.memory_bytes)
            except OSError as exc:
                raise SandboxError(f"cannot create the step's cgroup: {exc}") from exc
        info_read, info_write = os.pipe()
        block_read, block_write = os.pipe() if request.network else (-1, -1)
        gate_read, gate_write = os.pipe()
        fds: list[int] = []
        proc: subprocess.Popen[bytes] | None = None
        try:
            args, job_command = self.argv(request, owner, info_write, block_read if request.network else None)
            args_fd = _memfd("bwrap-args", b"\x00".join(a.encode() for a in args) + b"\x00")
            seccomp_fd = _memfd("bwrap-seccomp", self._seccomp)
            fds = [args_fd, seccomp_fd]
            join = [str(p) for p in cgroup.self_join_files()] if cgroup is not None else []
            command = [
                # bash where a descriptor is moved (dash takes only one-digit ones).
                "/bin/sh" if request.stdin_fd is None else "/bin/bash",
                "-c",
                _gate_script(request.stdin_fd),
                "sh",
                *join,
                "--",
                self._bwrap,
                "--args",
                str(args_fd),
                "--seccomp",
                str(seccomp_fd),
                "--",
                *job_command,
            ]
            pass_fds = [args_fd, seccomp_fd, info_write] + ([block_read] if request.network else [])
            pass_fds += [fd for fd in (request.stdin_fd, request.data_fd) if fd is not None]
            proc = subprocess.Popen(
                command,
                stdin=gate_read,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={},
                pass_fds=pass_fds,
                start_new_session=True,
            )
            os.close(gate_read)
            gate_read = -1
            # The gate holds the process before bubblewrap: its rlimits are in place before
            # anything of the sandbox exists (it is our unreaped child: its pid is its own).
            if request.limits is not None:
                for which, value in _rlimits(request.limits):
                    resource.prlimit(proc.pid, which, (value, value))
            os.write(gate_write, GATE_OPEN)
        except (OSError, ValueError) as exc:
            if proc is not None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.kill()
                proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
            os.close(info_read)
            if block_write >= 0:
                os.close(block_write)
            if cgroup is not None:
                cgroup.remove()
            raise SandboxError(f"cannot start bubblewrap: {exc}") from exc
        finally:
            for fd in [*fds, info_write, block_read, gate_read, gate_write]:
                if fd >= 0:
                    os.close(fd)
        process = _BwrapProcess(proc, info_read, cgroup)
        if request.network:
            assert self._network is not None
            try:
                pid = process.init_pid()
                if pid is None:
                    raise NetworkUnavailable("the sandbox did not start")
                process._slirp = self._network.attach(pid)
            except (NetworkUnavailable, OSError, subprocess.SubprocessError) as exc:
                process.kill_tree()
                os.close(block_write)
                process.wait(10)
                process.finish()
                raise SandboxError(f"cannot give the job its network: {exc}") from exc
            # The job starts only now, with its filter and its stack in place.
            os.write(block_write, b"1")
            os.close(block_write)
        return process


class _GroupProcess(_PopenProcess):
    def host_pids(self) -> list[int]:
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.getpgid(int(entry)) == self._proc.pid:
                        pids.append(int(entry))
                except OSError:
                    pass
        return sorted(pids)

    def terminate_tree(self) -> None:
        self._signal_group(signal.SIGTERM)

    def kill_tree(self) -> None:
        self._signal_group(signal.SIGKILL)


class UnsafeProcessSandbox:
    """No isolation at all: the job runs as the worker's user, sees the host and the network.

    Only for trusted code on a throwaway machine, and only when configured explicitly
    (``LEASEHOLD_CI_SANDBOX=unsafe-process``). A job that leaves its process group escapes
    cancellation.
    """

    name = "unsafe-process"
    supports_network = True

    def mount_point(self, root: Path) -> str:
        return str(root)

    def prepare(self, root: Path) -> JobOwner:
        make_layout(root, JobOwner())
        return JobOwner()

    def release(self, root: Path) -> None:
        return None

    def start(self, request: SandboxRequest) -> _GroupProcess:
        try:
            proc = subprocess.Popen(
                [*_prlimit_argv(request.limits), *_data_fd_wrapper(request.data_fd), *request.argv],
                cwd=request.cwd,
                env=dict(request.env),
                stdin=request.stdin_fd if request.stdin_fd is not None else subprocess.DEVNULL,
                pass_fds=[request.data_fd] if request.data_fd is not None else [],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise SandboxError(f"cannot start process: {exc}") from exc
        return _GroupProcess(proc)


class _DockerProcess(_PopenProcess):
    def __init__(self, proc: subprocess.Popen[bytes], docker: str, name: str) -> None:
        super().__init__(proc)
        self._docker = docker
        self._name = name

    def host_pids(self) -> list[int]:
        out = subprocess.run(
            [self._docker, "top", self._name, "-eo", "pid"], capture_output=True, text=True, check=False
        ).stdout
        return sorted(int(x) for x in out.split() if x.isdigit())

    def terminate_tree(self) -> None:
        subprocess.run([self._docker, "kill", "--signal", "TERM", self._name], capture_output=True, check=False)

    def kill_tree(self) -> None:
        subprocess.run([self._docker, "kill", self._name], capture_output=True, check=False)
        self._signal_group(signal.SIGKILL)


class DockerSandbox:
    """Each command in a fresh container (``--rm``, no capabilities, no network), as the job's
    own leased uid over the same root-owned layout as bubblewrap's. Docker's bridge network
    reaches the host and its neighbours, so this backend refuses jobs that ask for network."""

    name = "docker"
    supports_network = False

    def __init__(self, image: str, users: JobUserPool, docker: str | None = None) -> None:
        found = docker or shutil.which("docker")
        if found is None:
            raise SandboxError("docker CLI not found")
        probe = subprocess.run([found, "info", "--format", "{{.ServerVersion}}"], capture_output=True, check=False)
        if probe.returncode != 0:
            raise SandboxError("no Docker daemon is reachable")
        self._docker = found
        self._image = image
        self._users = users

    def mount_point(self, root: Path) -> str:
        return MOUNT_POINT

    def prepare(self, root: Path) -> JobOwner:
        return self._users.lease_root(root)

    def release(self, root: Path) -> None:
        self._users.release_root(root)

    def start(self, request: SandboxRequest) -> _DockerProcess:
        owner = self._users.owner_of(request.root)
        if request.network:
            raise SandboxError("the docker backend gives jobs no network")
        if request.data_fd is not None:
            raise SandboxError("the docker backend cannot pass a data descriptor into a container")
        name = f"leasehold-ci-{os.urandom(6).hex()}"
        limits = request.limits
        args = [
            self._docker,
            "run",
            "--rm",
            *(["--interactive"] if request.stdin_fd is not None else []),
            "--name",
            name,
            "--network",
            "none",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--user",
            f"{owner.uid}:{owner.gid}",
            "-v",
            f"{request.root}:{MOUNT_POINT}",
            "-v",
            f"{request.root / 'tmp'}:/tmp",
            "-w",
            request.cwd,
        ]
        if limits is not None:
            args += [
                "--memory",
                str(limits.memory_bytes),
                "--pids-limit",
                str(limits.max_processes),
                "--ulimit",
                f"fsize={limits.max_file_bytes}",
                "--ulimit",
                f"cpu={limits.cpu_seconds}",
            ]
        for key, value in request.env.items():
            args += ["-e", f"{key}={value}"]
        args += [self._image, *request.argv]
        proc = subprocess.Popen(
            args,
            stdin=request.stdin_fd if request.stdin_fd is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return _DockerProcess(proc, self._docker, name)


def make_sandbox(settings: Settings) -> Sandbox:
    """The backend the settings name; refuses to start rather than silently degrade (a limit
    the host cannot enforce, or a network it cannot filter, is an error, not a warning)."""
    if settings.ci_sandbox == "unsafe-process":
        log.warning("CI jobs run WITHOUT a sandbox (ci_sandbox=unsafe-process): trusted code only")
        return UnsafeProcessSandbox()
    users = JobUserPool(settings.data_dir / "ci" / "uids", settings.ci_sandbox_uid_base, settings.ci_sandbox_uid_count)
    if settings.ci_sandbox == "docker":
        return DockerSandbox(settings.ci_docker_image, users)
    if settings.ci_sandbox == "gvisor":
        # Imported here: the module builds on this one's host layout and uid pool.
        from worker_ci.gvisor import make_gvisor_sandbox

        return make_gvisor_sandbox(settings, users)
    cgroups: CgroupLimiter | None = None
    try:
        cgroups = CgroupLimiter.detect()
    except CgroupUnavailable as exc:
        if settings.ci_require_cgroups:
            raise SandboxError(
                f"{exc}: CI jobs' pids and memory limits cannot be enforced on this host; "
                "set LEASEHOLD_CI_REQUIRE_CGROUPS=false to run with per-process limits only"
            ) from exc
        log.warning("CI jobs run without per-job pids and memory limits: %s", exc)
    network: UserModeNetwork | None = None
    try:
        network = UserModeNetwork.detect(settings.ci_network_allowed_cidrs)
    except NetworkUnavailable as exc:
        # Not fatal: jobs without network (the default) run; jobs that ask for it fail with why.
        log.warning("CI jobs cannot be given network on this worker: %s", exc)
    return BubblewrapSandbox(users, cgroups, network)


def limits_from(settings: Settings) -> SandboxLimits:
    return SandboxLimits(
        memory_bytes=settings.ci_job_memory_bytes,
        max_processes=settings.ci_job_max_processes,
        max_file_bytes=settings.ci_job_max_file_bytes,
        cpu_seconds=settings.ci_job_cpu_seconds,
        shm_bytes=settings.ci_job_shm_bytes,
    )
