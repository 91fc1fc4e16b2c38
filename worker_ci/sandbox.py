"""Sandbox backends for CI jobs: bubblewrap (default), Docker, and an explicitly unsafe plain process.

bubblewrap: new user/pid/net/ipc/uts/cgroup/mount namespaces (``--unshare-all``; the host
network only when the job asks), read-only system directories, a cleared environment, no
capabilities, ``--new-session`` (no terminal injection), ``--die-with-parent``, and only the
job's workspace writable. rlimits (address space, processes, file size, CPU) come from
``prlimit`` around bwrap, so they bind every process inside. Killing the sandbox's pid-1 tears
down the whole pid namespace: no process of a job outlives it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import IO

from activities.ci_sandbox import Sandbox, SandboxError, SandboxLimits, SandboxRequest
from leasehold.settings import Settings

log = logging.getLogger(__name__)

MOUNT_POINT = "/ci"
SANDBOX_UID = 1001
# Read-only system paths (missing ones are skipped; merged-/usr symlinks are recreated).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
# Only harmless parts of /etc: no shadow, no host credentials or configuration.
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/protocols",
    "/etc/services",
    "/etc/mime.types",
    "/etc/bash.bashrc",
    "/etc/profile",
)
NETWORK_ETC_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/gai.conf")


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


class _PopenProcess:
    """Shared Popen plumbing; subclasses say how to find and signal the tree."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    @property
    def stdout(self) -> IO[bytes]:
        assert self._proc.stdout is not None
        return self._proc.stdout

    def poll(self) -> int | None:
        return self._proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._proc.wait(timeout)

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


class _BwrapProcess(_PopenProcess):
    def __init__(self, proc: subprocess.Popen[bytes], info_read: int) -> None:
        super().__init__(proc)
        self._info_fd = info_read
        self._init_pid: int | None = None
        self._ns: str | None = None
        self._lock = threading.Lock()

    def _load_info(self) -> None:
        # bwrap writes {"child-pid": N, ...} to the info fd once the namespaces exist.
        with self._lock:
            if self._init_pid is not None or self._info_fd < 0:
                return
            data = b""
            try:
                while chunk := os.read(self._info_fd, 4096):
                    data += chunk
            except OSError:
                pass
            os.close(self._info_fd)
            self._info_fd = -1
            try:
                self._init_pid = int(json.loads(data)["child-pid"])
                self._ns = _pid_namespace(self._init_pid)
            except (ValueError, KeyError, TypeError):
                self._init_pid = None

    def host_pids(self) -> list[int]:
        self._load_info()
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
        self._load_info()
        if self._init_pid is not None and _pid_namespace(self._init_pid) == self._ns:
            try:
                os.kill(self._init_pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._signal_group(signal.SIGKILL)


class BubblewrapSandbox:
    """The default backend (see the module docstring)."""

    name = "bubblewrap"

    def __init__(self, bwrap: str | None = None) -> None:
        found = bwrap or shutil.which("bwrap")
        if found is None:
            raise SandboxError("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
        self._bwrap = found

    def mount_point(self, root: Path) -> str:
        return MOUNT_POINT

    def argv(self, request: SandboxRequest, info_fd: int) -> list[str]:
        args = [
            self._bwrap,
            "--unshare-all",
            *(["--share-net"] if request.network else []),
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
            "--hostname",
            "ci",
            "--clearenv",
            "--info-fd",
            str(info_fd),
        ]
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        args += ["--proc", "/proc", "--dev", "/dev", "--dir", "/etc"]
        for path in ETC_FILES + (NETWORK_ETC_FILES if request.network else ()):
            args += ["--ro-bind-try", path, path]
        runner = request.root / "runner"
        args += ["--ro-bind-try", str(runner / "passwd"), "/etc/passwd"]
        args += ["--ro-bind-try", str(runner / "group"), "/etc/group"]
        args += ["--bind", str(request.root), MOUNT_POINT, "--bind", str(request.root / "tmp"), "/tmp"]
        args += ["--chdir", request.cwd]
        for key, value in request.env.items():
            args += ["--setenv", key, value]
        return [*args, "--", *request.argv]

    def start(self, request: SandboxRequest) -> _BwrapProcess:
        runner = request.root / "runner"
        runner.mkdir(parents=True, exist_ok=True)
        (runner / "passwd").write_text(f"runner:x:{SANDBOX_UID}:{SANDBOX_UID}:runner:{MOUNT_POINT}/home:/bin/bash\n")
        (runner / "group").write_text(f"runner:x:{SANDBOX_UID}:\n")
        info_read, info_write = os.pipe()
        try:
            proc = subprocess.Popen(
                [*_prlimit_argv(request.limits), *self.argv(request, info_write)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={},
                pass_fds=(info_write,),
                start_new_session=True,
            )
        except OSError as exc:
            os.close(info_read)
            raise SandboxError(f"cannot start bubblewrap: {exc}") from exc
        finally:
            os.close(info_write)
        return _BwrapProcess(proc, info_read)


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

    def mount_point(self, root: Path) -> str:
        return str(root)

    def start(self, request: SandboxRequest) -> _GroupProcess:
        try:
            proc = subprocess.Popen(
                [*_prlimit_argv(request.limits), *request.argv],
                cwd=request.cwd,
                env=dict(request.env),
                stdin=subprocess.DEVNULL,
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
    """Each command in a fresh container (``--rm``, no capabilities, no network unless asked)."""

    name = "docker"

    def __init__(self, image: str, docker: str | None = None) -> None:
        found = docker or shutil.which("docker")
        if found is None:
            raise SandboxError("docker CLI not found")
        probe = subprocess.run([found, "info", "--format", "{{.ServerVersion}}"], capture_output=True, check=False)
        if probe.returncode != 0:
            raise SandboxError("no Docker daemon is reachable")
        self._docker = found
        self._image = image

    def mount_point(self, root: Path) -> str:
        return MOUNT_POINT

    def start(self, request: SandboxRequest) -> _DockerProcess:
        name = f"leasehold-ci-{os.urandom(6).hex()}"
        limits = request.limits
        args = [
            self._docker,
            "run",
            "--rm",
            "--name",
            name,
            "--network",
            "bridge" if request.network else "none",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--user",
            f"{os.getuid()}:{os.getgid()}",
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
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return _DockerProcess(proc, self._docker, name)


def make_sandbox(settings: Settings) -> Sandbox:
    """The backend the settings name; refuses to start rather than silently degrade."""
    if settings.ci_sandbox == "docker":
        return DockerSandbox(settings.ci_docker_image)
    if settings.ci_sandbox == "unsafe-process":
        log.warning("CI jobs run WITHOUT a sandbox (ci_sandbox=unsafe-process): trusted code only")
        return UnsafeProcessSandbox()
    return BubblewrapSandbox()


def limits_from(settings: Settings) -> SandboxLimits:
    return SandboxLimits(
        memory_bytes=settings.ci_job_memory_bytes,
        max_processes=settings.ci_job_max_processes,
        max_file_bytes=settings.ci_job_max_file_bytes,
        cpu_seconds=settings.ci_job_cpu_seconds,
    )
