"""Sandbox backends for CI jobs: bubblewrap (the default, here), Docker (``worker_ci.docker_sandbox``),
gVisor (``worker_ci.gvisor``) and an explicitly unsafe plain process (``worker_ci.unsafe_sandbox``);
``make_sandbox`` builds the one the settings name.

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
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import threading
from dataclasses import fields
from pathlib import Path

from activities.ci.jobroot import owner_of_dir
from activities.ci.sandbox import JobOwner, Sandbox, SandboxError, SandboxLimits, SandboxRequest
from leasehold.settings import Settings
from worker_ci.cgroups import CgroupLimiter, CgroupUnavailable, StepCgroup
from worker_ci.docker_sandbox import DockerSandbox
from worker_ci.host_view import ETC_FILES, MOUNT_POINT, NETWORK_ETC_FILES, SYSTEM_DIRS, runner_files
from worker_ci.job_users import JobUserPool
from worker_ci.network import NetworkUnavailable, UserModeNetwork
from worker_ci.seccomp_filter import SeccompUnavailable, job_filter_bpf
from worker_ci.step_process import PopenProcess, data_fd_wrapper, popen_step
from worker_ci.unsafe_sandbox import UnsafeProcessSandbox

log = logging.getLogger(__name__)

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


GATE_OPEN = b"go\n"


def _rlimits(limits: SandboxLimits, cgroup_memory: bool = False) -> list[tuple[int, int]]:
    """(resource, soft and hard limit) for each process of a step, as ``prlimit_argv``'s.

    With the step's cgroup bounding its memory, the address space is not limited: runtimes
    reserve far more than they use (V8's WebAssembly, which Node's ``fetch`` needs, reserves
    about 10 GiB per instance), and GitHub's runners set no such limit."""
    memory = [] if cgroup_memory else [(resource.RLIMIT_AS, limits.memory_bytes)]
    return [
        *memory,
        (resource.RLIMIT_NPROC, limits.max_processes),
        (resource.RLIMIT_FSIZE, limits.max_file_bytes),
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_CORE, 0),
    ]


def _clean(text: str) -> str:
    # bubblewrap reads its arguments NUL-separated: a NUL in a job's value would start a new
    # option of the attacker's choosing.
    return text.replace("\x00", "")


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


class _BwrapProcess(PopenProcess):
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
        return self._users.lease_root(root, runner_files)

    def release(self, root: Path) -> None:
        self._users.release_root(root)

    def adopt(self, root: Path) -> bool:
        """Take over a leftover job root (a worker killed mid-job left it) to clean it up as
        the user that owns its files; ``False`` while an attempt holds that user."""
        owner = owner_of_dir(root, "work")
        return owner is not None and self._users.adopt_root(root, owner, runner_files)

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
        for host, inside in request.binds:
            # Parents bubblewrap makes for a bind are the sandbox user's to traverse only so.
            parent = inside.rsplit("/", 1)[0]
            args += ["--perms", "0755", "--dir", parent.rsplit("/", 1)[0] or "/", "--perms", "0755", "--dir", parent]
            args += ["--bind", host, inside]
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
        wrapper = data_fd_wrapper(request.data_fd)
        return args, [*drop, *wrapper, *env_prefix, *(_clean(a) for a in request.argv)]

    def start(self, request: SandboxRequest) -> _BwrapProcess:
        if request.network and self._network is None:
            raise SandboxError("this worker cannot give jobs a network")
        owner = self._users.owner_of(request.root)
        cgroup = self._step_cgroup(request, owner)
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
            proc = popen_step(command, gate_read, env={}, pass_fds=pass_fds)
            os.close(gate_read)
            gate_read = -1
            # The gate holds the process before bubblewrap: its rlimits are in place before
            # anything of the sandbox exists (it is our unreaped child: its pid is its own).
            if request.limits is not None:
                for which, value in _rlimits(request.limits, cgroup is not None):
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
            self._attach_network(process, block_write)
        return process

    def _step_cgroup(self, request: SandboxRequest, owner: JobOwner) -> StepCgroup | None:
        """The step's own cgroup, where the host has cgroups and the step has limits."""
        if self._cgroups is None or request.limits is None:
            return None
        try:
            return self._cgroups.create(f"{owner.uid}", request.limits.max_processes, request.limits.memory_bytes)
        except OSError as exc:
            raise SandboxError(f"cannot create the step's cgroup: {exc}") from exc

    def _attach_network(self, process: _BwrapProcess, block_write: int) -> None:
        """Give the started sandbox its user-mode network, then let the job (held on
        ``block_write``) start; closes ``block_write`` either way."""
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


def make_sandbox(settings: Settings) -> Sandbox:
    """The backend the settings name; refuses to start rather than silently degrade (a limit
    the host cannot enforce, or a network it cannot filter, is an error, not a warning)."""
    if settings.ci_sandbox == "unsafe-process":
        log.warning("CI jobs run WITHOUT a sandbox (ci_sandbox=unsafe-process): trusted code only")
        return UnsafeProcessSandbox()
    users = JobUserPool(settings.data_dir / "ci" / "uids", settings.ci_sandbox_uid_base, settings.ci_sandbox_uid_count)
    if settings.ci_sandbox == "docker":
        return DockerSandbox(settings.ci_docker_image, users)
    if settings.ci_sandbox == "oci":
        # Imported here: only a worker set to oci loads the podman backend.
        from worker_ci.oci_sandbox import make_oci_sandbox

        return make_oci_sandbox(settings, users)
    if settings.ci_sandbox == "gvisor":
        # Imported here: only a worker set to gvisor loads the gVisor backend.
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
    """The job limits of the worker's settings: each field ``f`` is the setting ``ci_job_<f>``."""
    return SandboxLimits(**{f.name: getattr(settings, f"ci_job_{f.name}") for f in fields(SandboxLimits)})
