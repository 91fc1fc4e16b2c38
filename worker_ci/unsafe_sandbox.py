"""The unsafe-process backend for CI jobs: no isolation at all (see ``UnsafeProcessSandbox``)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from activities.ci.jobroot import make_layout
from activities.ci.sandbox import JobOwner, SandboxError, SandboxRequest
from worker_ci.step_process import PopenProcess, data_fd_wrapper, popen_step, prlimit_argv


class _GroupProcess(PopenProcess):
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
            proc = popen_step(
                [*prlimit_argv(request.limits), *data_fd_wrapper(request.data_fd), *request.argv],
                request.stdin_fd,
                cwd=request.cwd,
                env=dict(request.env),
                pass_fds=[request.data_fd] if request.data_fd is not None else [],
            )
        except OSError as exc:
            raise SandboxError(f"cannot start process: {exc}") from exc
        return _GroupProcess(proc)
