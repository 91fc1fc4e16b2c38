"""Per-step control groups: a pids limit and a memory limit that hold for a whole CI job step.

rlimits bind per process (or per uid); a job of many processes, or one that fills ``/dev/shm``
(tmpfs pages are charged to the writer's memory cgroup), needs a limit on the group. One
cgroup is made for each sandboxed step, below the worker's own cgroup (the worker may itself
be inside a memory-limited container), joined by the step's first process before it becomes
bubblewrap, and removed when the step ends.

cgroup v1 (``pids`` and ``memory`` hierarchies) and v2 (one unified hierarchy with both
controllers) are supported. Where neither is available the worker refuses to start unless the
operator explicitly accepts unenforced limits (``LEASEHOLD_CI_REQUIRE_CGROUPS=false``).

On v1 the kernel's OOM killer kills one process of the group, not the whole group; the step's
tree is then torn down by the worker anyway, and the log says the step ran out of memory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# How long teardown waits for a step's processes to leave its group (kill) and for the group
# to become removable (rmdir). The waits back off from 1 ms: bubblewrap reports the command's
# exit before its pid-namespace init has left the group, which takes a few milliseconds, so a
# fixed 50 ms sleep at the first sign of it cost every step 50 ms.
KILL_WAIT_SECONDS = 1.0
REMOVE_WAIT_SECONDS = 2.5
FIRST_WAIT_SECONDS = 0.001
LONGEST_WAIT_SECONDS = 0.05


class CgroupUnavailable(RuntimeError):
    """This host cannot enforce per-job pids and memory limits."""


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) of every cgroup mount."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            fstype, options = fields[sep + 1], fields[sep + 3]
            if fstype in ("cgroup", "cgroup2"):
                found.append((fields[4], fstype, set(options.split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """Controller (``""`` for v2) -> this process's cgroup path."""
    paths: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _id, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                paths[c] = path
    return paths


def _waits(total: float) -> Iterator[None]:
    """Yield, then sleep a growing interval (1 ms doubling to 50 ms), until ``total`` seconds
    have passed; the first try costs no sleep."""
    deadline = time.monotonic() + total
    delay = FIRST_WAIT_SECONDS
    while True:
        yield
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(delay, left))
        delay = min(delay * 2, LONGEST_WAIT_SECONDS)


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


@dataclass
class StepCgroup:
    """The cgroups of one running step."""

    dirs: list[Path]
    procs_files: list[Path]
    memory_dir: Path
    pids_dir: Path
    version: int
    memory_bytes: int

    def self_join_files(self) -> list[Path]:
        """Files a single-threaded process writes ``0`` into to join these groups itself
        (``worker_ci.sandbox.GATE_SCRIPT``), before it runs anything of the step.

        On v1 that is ``tasks``: moving the writing thread itself is the one migration the
        kernel does without its global threadgroup lock, whose write side waits for an RCU
        grace period (about 10 ms per step on a busy 2-CPU host, for ``cgroup.procs``). The
        process is a shell with one thread, so moving it moves the process. v2 moves a
        process only through ``cgroup.procs``."""
        if self.version == 1:
            return [Path(p).parent / "tasks" for p in self.procs_files]
        return list(self.procs_files)

    def oom_kills(self) -> int:
        """How many processes of the step the kernel killed for memory."""
        try:
            if self.version == 1:
                text = (self.memory_dir / "memory.oom_control").read_text()
            else:
                text = (self.memory_dir / "memory.events").read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def pids(self) -> list[int]:
        try:
            text = (self.pids_dir / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(x) for x in text.split()]

    def kill_all(self) -> None:
        """SIGKILL whatever is left in the group (a process that escaped the pid namespace's
        teardown cannot escape its cgroup)."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                _write(self.pids_dir / "cgroup.kill", "1")
            return
        for _ in _waits(KILL_WAIT_SECONDS):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs:
            # The group may briefly hold the sandbox's zombie after it exits.
            for _ in _waits(REMOVE_WAIT_SECONDS):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    continue
            else:
                log.warning("could not remove cgroup %s", d)


class CgroupLimiter:
    """Makes a cgroup per step with ``pids.max`` and a memory limit (swap included)."""

    def __init__(self, version: int, pids_parent: Path, memory_parent: Path) -> None:
        self.version = version
        self._pids_parent = pids_parent
        self._memory_parent = memory_parent

    @classmethod
    def detect(cls) -> CgroupLimiter:
        """The limiter this host supports; ``CgroupUnavailable`` (with why) otherwise."""
        if os.geteuid() != 0:
            raise CgroupUnavailable("per-job cgroups need the CI worker to run as root")
        mounts = _mounts()
        own = _own_paths()
        v1 = {opt: point for point, fstype, opts in mounts if fstype == "cgroup" for opt in opts}
        if "pids" in v1 and "memory" in v1:
            pids = Path(v1["pids"] + own.get("pids", "/")) / "leasehold-ci"
            memory = Path(v1["memory"] + own.get("memory", "/")) / "leasehold-ci"
            limiter = cls(1, pids, memory)
        else:
            unified = [point for point, fstype, _ in mounts if fstype == "cgroup2"]
            usable = [p for p in unified if {"pids", "memory"} <= set(_read_words(Path(p) / "cgroup.controllers"))]
            if not usable:
                raise CgroupUnavailable(
                    "no cgroup hierarchy with the pids and memory controllers is mounted "
                    "(need cgroup v1 pids+memory or cgroup v2 with both enabled)"
                )
            limiter = cls._v2(Path(usable[0]), own.get("", "/"))
        limiter._probe()
        return limiter

    @classmethod
    def _v2(cls, mount: Path, own: str) -> CgroupLimiter:
        # v2's rule "no processes in inner groups": move the worker into a leaf of its own,
        # then let its former group hand pids and memory down to the job groups beside it.
        base = mount / own.lstrip("/")
        leaf = base / "leasehold-worker"
        try:
            leaf.mkdir(exist_ok=True)
            for pid in _read_words(base / "cgroup.procs"):
                with contextlib.suppress(OSError):
                    _write(leaf / "cgroup.procs", pid)
            _write(base / "cgroup.subtree_control", "+pids +memory")
        except OSError as exc:
            raise CgroupUnavailable(f"cannot delegate pids and memory below {base}: {exc}") from exc
        return cls(2, base / "leasehold-ci", base / "leasehold-ci")

    def _probe(self) -> None:
        """Create and remove one group, so a host that cannot is found at start-up."""
        try:
            group = self.create("probe", 16, 64 << 20)
        except OSError as exc:
            raise CgroupUnavailable(f"cannot create CI job cgroups: {exc}") from exc
        group.remove()

    def _ensure_parent(self) -> None:
        for parent in {self._pids_parent, self._memory_parent}:
            if not parent.is_dir():
                parent.mkdir(exist_ok=True)
                if self.version == 2:
                    _write(parent / "cgroup.subtree_control", "+pids +memory")

    def create(self, name: str, max_pids: int, memory_bytes: int) -> StepCgroup:
        """A new group for one step (raises ``OSError`` when the kernel refuses)."""
        self._ensure_parent()
        leaf = f"{name[:60]}-{uuid.uuid4().hex[:8]}"
        if self.version == 2:
            d = self._pids_parent / leaf
            d.mkdir()
            group = StepCgroup([d], [d / "cgroup.procs"], d, d, 2, memory_bytes)
            try:
                _write(d / "pids.max", str(max_pids))
                _write(d / "memory.max", str(memory_bytes))
                with contextlib.suppress(OSError):
                    _write(d / "memory.swap.max", "0")
                # One OOM kills the whole step, not one random process of it.
                _write(d / "memory.oom.group", "1")
            except OSError:
                group.remove()
                raise
            return group
        pids_dir = self._pids_parent / leaf
        memory_dir = self._memory_parent / leaf
        pids_dir.mkdir()
        try:
            memory_dir.mkdir()
        except OSError:
            pids_dir.rmdir()
            raise
        group = StepCgroup(
            [pids_dir, memory_dir],
            [pids_dir / "cgroup.procs", memory_dir / "cgroup.procs"],
            memory_dir,
            pids_dir,
            1,
            memory_bytes,
        )
        try:
            _write(pids_dir / "pids.max", str(max_pids))
            _write(memory_dir / "memory.limit_in_bytes", str(memory_bytes))
            # Without swap accounting this file is absent; the limit above still holds RAM.
            with contextlib.suppress(FileNotFoundError):
                _write(memory_dir / "memory.memsw.limit_in_bytes", str(memory_bytes))
        except OSError:
            group.remove()
            raise
        return group


def _read_words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []
