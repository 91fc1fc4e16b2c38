"""``$RUNNER_TOOL_CACHE`` laid out as GitHub's hosted images lay it out, with the host's tools.

``actions/setup-python`` and ``actions/setup-node`` look for a version in the tool cache
(``@actions/tool-cache``'s ``find``): ``<cache>/<Tool>/<semver>/<arch>/`` counts only when the
marker file ``<cache>/<Tool>/<semver>/<arch>.complete`` sits beside it. On GitHub's images the
cache holds full installs; here each job's cache is seeded with the host's own interpreter
(``/usr/bin/python3``) and Node (where the machine has one) under their real versions, as
links in ``bin/``, so ``setup-python`` with ``python-version: "3.11"`` on a 3.11 host finds it
offline and puts it first on ``PATH``; a version the host lacks is installed by the action into
the same cache when the job's plan grants network.

The cache lives in the job's ``home/`` and belongs to the job (an action writes its installs
there). It is seeded by root in ``make_layout`` while ``home/`` is still root's and new (the
job's uid is leased exclusively and no process of the job exists yet), entry by entry relative
to descriptors of directories root has just made, each handed to the job's uid once made.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass

from activities.ci.sandbox import JobOwner

log = logging.getLogger(__name__)

CACHE_DIR = "tool-cache"
_VERSION = re.compile(r"^v?(\d+\.\d+\.\d+)$")
# Tool-cache architecture names (Node's ``os.arch()`` spelling, as @actions/tool-cache uses).
_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
VERSION_PROBE_SECONDS = 10.0


@dataclass(frozen=True)
class Tool:
    """One seeded entry: ``<cache>/<name>/<version>/<arch>/bin/<link> -> <target>``."""

    name: str
    version: str
    links: tuple[tuple[str, str], ...]


def arch() -> str:
    machine = platform.machine().lower()
    return _ARCH.get(machine, machine)


def _version_of(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=VERSION_PROBE_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _VERSION.match(out.stdout.strip())
    return match.group(1) if match else None


@functools.cache
def host_tools() -> tuple[Tool, ...]:
    """The host's tools the cache is seeded with (probed once per worker process)."""
    tools: list[Tool] = []
    python = "/usr/bin/python3"
    if os.path.exists(python):
        version = _version_of([python, "-I", "-S", "-c", "import platform; print(platform.python_version())"])
        if version:
            links = [("python", python), ("python3", python)]
            links += [(name, "/usr/bin/pip3") for name in ("pip", "pip3") if os.path.exists("/usr/bin/pip3")]
            tools.append(Tool("Python", version, tuple(links)))
    node = shutil.which("node", path="/usr/local/bin:/usr/bin:/bin")
    if node is not None:
        version = _version_of([node, "--version"])
        if version:
            links = [("node", node)]
            links += [(n, p) for n in ("npm", "npx") if (p := shutil.which(n, path=os.path.dirname(node)))]
            tools.append(Tool("node", version, tuple(links)))
    return tuple(tools)


def make_dir_at(dir_fd: int, name: str, owner: JobOwner | None, mode: int = 0o755) -> int:
    """A new directory ``name`` in ``dir_fd`` with ``mode`` (explicit: the worker's umask may be
    077), handed to ``owner``; its descriptor (the caller closes it)."""
    os.mkdir(name, mode, dir_fd=dir_fd)
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)
        _give(fd, owner)
    except OSError:
        os.close(fd)
        raise
    return fd


def _give(fd: int, owner: JobOwner | None) -> None:
    if owner is not None and owner.uid is not None:
        os.fchown(fd, owner.uid, owner.gid if owner.gid is not None else owner.uid)


def seed(home_fd: int, owner: JobOwner | None, tools: tuple[Tool, ...] | None = None) -> None:
    """Make ``tool-cache/`` in a ``home/`` root has just created, with ``tools`` in it."""
    cache_fd = make_dir_at(home_fd, CACHE_DIR, owner)
    try:
        for tool in host_tools() if tools is None else tools:
            _seed_tool(cache_fd, tool, owner)
    finally:
        os.close(cache_fd)


def _seed_tool(cache_fd: int, tool: Tool, owner: JobOwner | None) -> None:
    tool_fd = make_dir_at(cache_fd, tool.name, owner)
    try:
        version_fd = make_dir_at(tool_fd, tool.version, owner)
    finally:
        os.close(tool_fd)
    try:
        arch_fd = make_dir_at(version_fd, arch(), owner)
        try:
            bin_fd = make_dir_at(arch_fd, "bin", owner)
            try:
                for name, target in tool.links:
                    os.symlink(target, name, dir_fd=bin_fd)
                    if owner is not None and owner.uid is not None:
                        gid = owner.gid if owner.gid is not None else owner.uid
                        os.chown(name, owner.uid, gid, dir_fd=bin_fd, follow_symlinks=False)
            finally:
                os.close(bin_fd)
        finally:
            os.close(arch_fd)
        marker = os.open(
            f"{arch()}.complete", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=version_fd
        )
        try:
            _give(marker, owner)
        finally:
            os.close(marker)
    finally:
        os.close(version_fd)
