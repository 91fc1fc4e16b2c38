"""What a CI job's sandbox shows of the host and of its job root, in every backend that runs the
job as a leased uid: the mount point, the system directories and ``/etc`` files shown read-only,
and the stub ``passwd``/``group`` in ``runner/``."""

from __future__ import annotations

from pathlib import Path

from activities.ci.jobroot import write_new
from worker_ci.network import SLIRP_DNS

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


def runner_files(root: Path, uid: int) -> None:
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
