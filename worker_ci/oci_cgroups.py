"""A step's cgroup for the OCI backend: the bubblewrap backend's ``StepCgroup`` as the container's
``--cgroup-parent``, so the same pids and memory limits hold for the whole step and the worker,
not podman, reads whether the step ran out of memory.

podman (cgroupfs manager) makes the container's own group below it (``libpod-<id>``, removed
with the container) and conmon's beside it (``conmon``), in every hierarchy; this module
removes what podman leaves of them. On cgroup
v1 the kernel counts an OOM kill only in the victim's own group, which is gone by the time the
step has ended; the step's group records instead that its usage reached the limit
(``memory.max_usage_in_bytes``), which is what the log then says.
"""

from __future__ import annotations

import time
from pathlib import Path

from activities.ci.sandbox import SandboxError, SandboxLimits
from worker_ci.cgroups import CgroupLimiter, _mounts

CONMON_REMOVE_SECONDS = 2.0


def _relative(path: Path, points: list[str]) -> str:
    mounts = [p for p in points if str(path).startswith(p.rstrip("/") + "/")]
    if not mounts:
        raise SandboxError(f"cgroup {path} is under no cgroup mount")
    return "/" + str(path)[len(max(mounts, key=len).rstrip("/")) + 1 :]


class OciStepCgroup:
    """One step's group (see the module docstring)."""

    def __init__(self, limiter: CgroupLimiter, name: str, limits: SandboxLimits) -> None:
        try:
            self.group = limiter.create(name, limits.max_processes, limits.memory_bytes)
        except OSError as exc:
            raise SandboxError(f"cannot create the step's cgroup: {exc}") from exc
        # podman makes this same path in every hierarchy: the memory group's holds the limit
        # (the worker's memory cgroup may differ from its pids one, so the pids limit is
        # podman's own ``--pids-limit`` on the container).
        self._points = [point for point, _, _ in _mounts()]
        try:
            self.parent = _relative(self.group.memory_dir, self._points)
        except SandboxError:
            self.group.remove()
            raise

    def out_of_memory(self) -> bool:
        group = self.group
        if group.version == 2:
            return group.oom_kills() > 0
        try:
            peak = int((group.memory_dir / "memory.max_usage_in_bytes").read_text())
        except (OSError, ValueError):
            return False
        return peak >= group.memory_bytes

    def notes(self) -> list[str]:
        if not self.out_of_memory():
            return []
        return [
            f"out of memory: the step's processes reached their limit of {self.group.memory_bytes} bytes "
            "(/dev/shm and /tmp files count); processes of it may have been killed"
        ]

    def remove(self) -> None:
        deadline = time.monotonic() + CONMON_REMOVE_SECONDS
        own = set(self.group.dirs)
        made = [Path(p.rstrip("/") + self.parent) for p in self._points]
        for d in made:
            for leftover in [d / "conmon"] + ([] if d in own else [d]):
                _rmdir(leftover, deadline)
        self.group.remove()


def _rmdir(path: Path, deadline: float) -> None:
    """Remove an empty cgroup, retrying while its last process is leaving it."""
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
