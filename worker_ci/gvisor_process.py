"""A gVisor sandbox as the worker holds it (``worker_ci.gvisor``): the job's running container,
and a step's or helper's ``runsc exec`` process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from activities.ci.sandbox import SandboxLimits
from worker_ci.step_process import PopenProcess

if TYPE_CHECKING:
    from worker_ci.gvisor import GVisorSandbox


@dataclass
class Container:
    """One job's running sandbox."""

    cid: str
    bundle: Path
    limits: SandboxLimits | None
    run: subprocess.Popen[bytes]
    init_stdin: int
    # ``actions/`` is writable in this sandbox (made for the helper; a step needs a fresh one).
    writable_actions: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)
    seq: int = 0
    step: GVisorProcess | None = None
    # Whether the last look found nothing but init, with the step's exec ended: until the next
    # step starts, nothing can start a process there.
    clean: bool = True

    def alive(self) -> bool:
        return self.run.poll() is None

    def stepping(self) -> bool:
        """A step's exec is running."""
        return self.step is not None and self.step.poll() is None


class _Exec(PopenProcess):
    """One ``runsc exec`` on the host: its output, exit and pid (the Popen plumbing is the
    other backends')."""

    def host_pids(self) -> list[int]:
        """The host pid of the ``runsc exec`` while it runs. The job's own processes have none:
        they are the sentry's tasks (``guest_pids`` lists a step's as the sandbox numbers them)."""
        return [self._proc.pid] if self._proc.poll() is None else []


class GVisorProcess(_Exec):
    """One step: the host's ``runsc exec`` process (whose exit ends the step) and, inside the
    sandbox, every process but init."""

    def __init__(self, proc: subprocess.Popen[bytes], sandbox: GVisorSandbox, container: Container, spec: Path):
        super().__init__(proc)
        self._sandbox = sandbox
        self._container = container
        self._spec = spec
        self._finished = False

    def terminate_tree(self) -> None:
        self._sandbox._signal_step(self._container, "TERM")

    def kill_tree(self) -> None:
        self._sandbox._kill_step(self._container)
        if not self._container.alive():
            # The sandbox is gone; its exec waits on nothing any more.
            with contextlib.suppress(OSError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    def guest_pids(self) -> list[int]:
        """The step's processes as the sandbox numbers them (every one but init)."""
        return self._sandbox._guest_pids(self._container) or []

    def finish(self) -> list[str]:
        if self._finished:
            return []
        self._finished = True
        return self._sandbox._finish_step(self._container, self, self._spec)


class GVisorSideProcess(_Exec):
    """A helper exec'd beside a running step (the disk check): one ``runsc exec``, which a kill
    ends; whatever of it survives in the sandbox dies with the step's leftovers."""

    def __init__(self, proc: subprocess.Popen[bytes], spec: Path):
        super().__init__(proc)
        self._spec = spec

    def terminate_tree(self) -> None:
        self._signal_group(signal.SIGTERM)

    def kill_tree(self) -> None:
        self._signal_group(signal.SIGKILL)

    def guest_pids(self) -> list[int]:
        return []

    def finish(self) -> list[str]:
        self._spec.unlink(missing_ok=True)
        return []
