"""The OCI bundle of a gVisor sandbox (``worker_ci.gvisor``): its ``config.json``, a step's
process spec, and the empty rootfs of mount points the sandbox shows read-only."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from activities.ci.sandbox import JobOwner, SandboxError, SandboxLimits, SandboxRequest
from worker_ci.host_view import ETC_FILES, MOUNT_POINT, SYSTEM_DIRS

# The sandbox's idle init: no child of its own (so every other process is a step's), reaps the
# orphans re-parented to it (bash does; dash leaves them zombies), ignores SIGTERM (so
# ``runsc kill --all TERM`` reaches only the step), and ends at EOF: when the worker is gone.
INIT_ARGV = ("/bin/bash", "-c", 'trap "" TERM INT HUP; while read -r _; do :; done')
INIT_PID = 1
INIT_PATH = "/usr/local/bin:/usr/bin:/bin"
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


def swap_accounted() -> bool:
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
    """The ``config.json`` of a job's sandbox over the job root ``root`` (see
    ``worker_ci.gvisor``'s docstring); its process is the idle init, as the job's uid. ``actions/`` is read-only, as
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


def write_private(path: Path, data: bytes) -> None:
    """A new file of root's, 0600, never through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        os.fchmod(f.fileno(), 0o600)
