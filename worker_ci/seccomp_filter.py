"""The seccomp filter every sandboxed CI job runs under.

bubblewrap already gives a job no capabilities; the filter closes what an unprivileged process
can still reach of the kernel's larger attack surface: new namespaces (an unprivileged user
namespace hands out capabilities over new mount and network namespaces), mounts, tracing other
processes, the kernel keyring, BPF, perf, userfaultfd and io_uring. Refused calls fail with
EPERM, as they would for an unprivileged user, so tools fall back instead of crashing;
``clone3`` fails with ENOSYS because its flags sit behind a pointer a filter cannot read, and
glibc then falls back to ``clone``, whose flags the filter does check.

What this costs a job: ``strace``/``gdb`` (ptrace), rootless container tools and ``unshare``
do not work inside CI jobs. bash, coreutils, python (threads, ssl) and git are unaffected.
"""

from __future__ import annotations

import errno
import functools
import tempfile

# Syscalls refused outright.
DENIED = (
    "unshare",
    "setns",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "name_to_handle_at",
    "open_by_handle_at",
    "quotactl",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "syslog",
)

# clone(2) flags that create namespaces (CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
# NEWUSER, NEWPID, NEWNET).
CLONE_NAMESPACE_FLAGS = (0x80, 0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)


class SeccompUnavailable(RuntimeError):
    """The host cannot build the filter (no libseccomp or no pyseccomp)."""


@functools.cache
def job_filter_bpf() -> bytes:
    """The compiled BPF program (built once per process; bwrap loads it with ``--seccomp``)."""
    try:
        import pyseccomp as seccomp
    except (ImportError, OSError) as exc:  # OSError: libseccomp.so.2 missing
        raise SeccompUnavailable(
            f"cannot build the CI job seccomp filter: {exc} (apt-get install libseccomp2)"
        ) from exc
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in DENIED:
        try:
            f.add_rule(seccomp.ERRNO(errno.EPERM), name)
        except (RuntimeError, ValueError, OSError):
            # A syscall this architecture does not have (e.g. ``umount`` on some).
            continue
    for flag in CLONE_NAMESPACE_FLAGS:
        f.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    # export_bpf writes to a real file descriptor.
    with tempfile.TemporaryFile() as tmp:
        f.export_bpf(tmp)
        tmp.seek(0)
        return tmp.read()
