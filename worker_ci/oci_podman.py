"""The podman command line as the OCI backend uses it: always the ``runc`` runtime (crun refuses
this host's hybrid cgroups), a minimal environment, and images only from the deployment's
registry mirror."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from activities.ci.sandbox import SandboxError
from worker_ci.seccomp_filter import CLONE_NAMESPACE_FLAGS, DENIED

PODMAN_SECONDS = 60.0
PULL_SECONDS = 600.0
EPERM, ENOSYS = 1, 38
# podman's own environment: nothing of the worker's (a job's value never reaches podman's).
PODMAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def seccomp_profile() -> str:
    """The bubblewrap backend's filter (``worker_ci.seccomp_filter``) as an OCI seccomp profile:
    the same calls refused with EPERM, ``clone`` with a namespace flag too, ``clone3`` ENOSYS."""
    rules: list[dict[str, object]] = [{"names": list(DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM}]
    for flag in CLONE_NAMESPACE_FLAGS:
        rules.append(
            {
                "names": ["clone"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": EPERM,
                "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}],
            }
        )
    rules.append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS})
    return json.dumps({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": rules})


@dataclass(frozen=True)
class Registry:
    """The deployment's registry mirror: every image a job names is looked up here."""

    host: str
    tls_verify: bool = True

    def reference(self, image: str, digest: str | None = None) -> str:
        """``image`` (a path with an optional tag, as the parser accepted it) in the mirror,
        by ``digest`` when one was pinned."""
        path, _, _ = image.partition("@")
        name = path.rsplit(":", 1)[0] if ":" in path.rsplit("/", 1)[-1] else path
        if digest is not None:
            return f"{self.host}/{name}@{digest}"
        tag = path.rsplit(":", 1)[1] if ":" in path.rsplit("/", 1)[-1] else "latest"
        pinned = image.partition("@")[2]
        return f"{self.host}/{name}@{pinned}" if pinned else f"{self.host}/{name}:{tag}"


class Podman:
    """One podman binary, run as root with the runc runtime."""

    def __init__(self, podman: str | None = None, runtime: str = "runc", storage: Path | None = None) -> None:
        found = podman or shutil.which("podman")
        if found is None:
            raise SandboxError("podman is not installed: apt-get install podman runc")
        runc = shutil.which(runtime)
        if runc is None:
            raise SandboxError(f"the {runtime} runtime is not installed: apt-get install {runtime}")
        if os.geteuid() != 0:
            raise SandboxError("the OCI backend needs the CI worker to run as root (to run jobs as their own uid)")
        self.binary = found
        self.base = [found, "--runtime", runc, "--log-level", "error", "--cgroup-manager", "cgroupfs"]
        if storage is not None:
            # A store of this worker's own (``ci_oci_storage``): its image cache is its alone.
            storage.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.base += ["--root", str(storage / "root"), "--runroot", str(storage / "run")]
        # podman's working directory, and so conmon's, which writes a file ``oom`` there when a
        # container runs out of memory: the worker's own state directory (``OciSandbox``).
        self.cwd: Path | None = None

    def run(self, *args: str, seconds: float = PODMAN_SECONDS, check: bool = True) -> str:
        """One podman command's stdout; ``SandboxError`` with its message when it fails."""
        try:
            done = subprocess.run(
                [*self.base, *args],
                capture_output=True,
                text=True,
                env=PODMAN_ENV,
                timeout=seconds,
                stdin=subprocess.DEVNULL,
                check=False,
                cwd=self.cwd,
            )
        except subprocess.TimeoutExpired as exc:
            raise SandboxError(f"podman {args[0]} took longer than {seconds:.0f} s") from exc
        if check and done.returncode != 0:
            raise SandboxError(f"podman {args[0]} failed: {_last_line(done.stderr)}")
        return done.stdout

    def pull(self, registry: Registry, reference: str) -> bool:
        """Make ``reference`` (by digest: immutable) present locally; the local store is this
        worker's image cache, so an image is fetched once. Returns whether it was fetched now."""
        if self.exists(reference):
            return False
        verify = "true" if registry.tls_verify else "false"
        self.run("pull", "--quiet", f"--tls-verify={verify}", reference, seconds=PULL_SECONDS)
        return True

    def exists(self, reference: str) -> bool:
        done = subprocess.run(
            [*self.base, "image", "exists", reference], env=PODMAN_ENV, check=False, capture_output=True, cwd=self.cwd
        )
        return done.returncode == 0

    def remove_container(self, name: str) -> None:
        self.run("rm", "--force", "--time", "0", "--ignore", name, check=False)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if "syslog" not in line]
    return lines[-1][:500] if lines else "(no message)"
