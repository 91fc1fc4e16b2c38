"""The step runner of a CI job attempt: each ``run:`` script or action process in a fresh
sandbox over the job's workspace, with its own step files, supervised until it ends (output
pumped into the log, heartbeats, and the process tree stopped on cancel, timeout, worker
shutdown or the disk quota: SIGTERM, then SIGKILL after the grace period).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import select
import threading
import time
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Protocol

from temporalio import activity

from actions_language.commands import WorkflowCommands
from actions_language.environment_files import MAX_PATH_ENTRIES, read_output_file, read_path_file
from actions_language.shells import shell_argv
from activities.ci.action_steps import SandboxRun
from activities.ci.artifact_runtime import RuntimeBinding
from activities.ci.job_context import JobContext
from activities.ci.jobroot import JobRoot, JobTreeError, StepFiles
from activities.ci.logs import LogShipper
from activities.ci.sandbox import (
    JobOwner,
    Sandbox,
    SandboxError,
    SandboxLimits,
    SandboxProcess,
    SandboxRequest,
)
from workflows.ci.types.job import AttemptStatus, StepStatus

log = logging.getLogger(__name__)

# How long the cancel watcher blocks on the activity's cancel event before it checks whether
# its step is over (it wakes the supervisor at once on a cancel or a worker shutdown).
CANCEL_WATCH_SECONDS = 0.5
DISK_CHECK_SECONDS = 2.0
DISK_MISSES_ALLOWED = 3
MAX_OUTPUT_FILE_BYTES = 1 << 20
# $GITHUB_STEP_SUMMARY: GitHub's cap per step (a larger one is dropped, with a warning), and
# what one attempt may keep in memory and store.
MAX_STEP_SUMMARY_BYTES = 1 << 20
MAX_ATTEMPT_SUMMARY_BYTES = 4 << 20


class RunnerHost(Protocol):
    """What the step runner reads of its attempt: the job's owner (known once prepared), the
    current step, the heartbeat and its timer, and whether a cancel or shutdown was seen."""

    owner: JobOwner | None
    step_index: int
    cancelled: bool
    shutdown: bool
    last_heartbeat: float
    heartbeat_seconds: float

    def heartbeat(self, force: bool = False) -> None: ...


class _Stop:
    """Why a step is being stopped, set by the watcher loop."""

    def __init__(self) -> None:
        self.reason: AttemptStatus | None = None
        self.message: str | None = None


def _step_file_text(files: StepFiles, name: str) -> str:
    return files.read(name, MAX_OUTPUT_FILE_BYTES).decode(errors="replace")


def _open_pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (``None`` where pidfds are missing)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _watch_cancel(over: threading.Event, wake: int) -> None:
    """Wake the supervisor (a byte on ``wake``) as soon as the activity is cancelled or the worker
    shuts down; ends once the step is ``over``. Runs in a copy of the activity's context."""
    try:
        while not over.is_set():
            activity.wait_for_cancelled_sync(CANCEL_WATCH_SECONDS)
            if activity.is_cancelled() or activity.is_worker_shutdown():
                with contextlib.suppress(OSError):
                    os.write(wake, b"!")
                return
    finally:
        os.close(wake)


@dataclass(eq=False)
class StepRunner:
    """Runs an attempt's sandboxed processes, one at a time (one thread)."""

    host: RunnerHost
    context: JobContext
    sandbox: Sandbox
    # Everything done inside the job's tree goes through here, as the job (the root rule).
    tree: JobRoot
    log: LogShipper
    commands: WorkflowCommands
    _: KW_ONLY
    root: Path
    # Each sandbox's name: the run's and job's ids, then the process's number.
    name_prefix: str
    network: bool
    limits: SandboxLimits
    disk_bytes: int
    grace_seconds: float
    mount: str = field(init=False)
    # Consecutive disk measurements that could not be made.
    disk_misses: int = field(default=0, init=False)
    # Numbers each sandboxed process of the attempt (its script's name, its sandbox's).
    process_seq: int = field(default=0, init=False)
    # Directories steps added through $GITHUB_PATH, oldest first (the newest comes first
    # in later steps' PATH, as on GitHub).
    path_entries: list[str] = field(default_factory=list, init=False)
    # Each step's $GITHUB_STEP_SUMMARY (raw; masked when stored), and their total size.
    summaries: list[bytes] = field(default_factory=list, init=False)
    summary_bytes: int = field(default=0, init=False)
    # Whether the last byte of output ended a line (a command must start one).
    output_ended_line: bool = field(default=True, init=False)
    # The attempt's artifact service, when it has one (``activities.ci.artifact_runtime``).
    runtime: RuntimeBinding | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.mount = self.context.mount

    def _keep_summary(self, label: str, files: StepFiles) -> None:
        """Keep what a step wrote to $GITHUB_STEP_SUMMARY (GitHub's per-step cap)."""
        data = files.read("summary", MAX_STEP_SUMMARY_BYTES + 1)
        if not data.strip():
            return
        if len(data) > MAX_STEP_SUMMARY_BYTES:
            self.log.line(
                f"[leasehold] warning: {label}: $GITHUB_STEP_SUMMARY is over "
                f"{MAX_STEP_SUMMARY_BYTES} bytes; it was not kept"
            )
            return
        if self.summary_bytes + len(data) > MAX_ATTEMPT_SUMMARY_BYTES:
            self.log.line(f"[leasehold] warning: step summaries over {MAX_ATTEMPT_SUMMARY_BYTES} bytes are not kept")
            return
        if not data.endswith(b"\n"):
            data += b"\n"
        self.summaries.append(data)
        self.summary_bytes += len(data)

    def run_script(
        self, label: str, script: str, shell: str, workdir: str | None, step_env: dict[str, str], deadline: float
    ) -> SandboxRun:
        """A ``run:`` script (of a job's step or of a composite action's) in the sandbox."""
        self.process_seq += 1
        name = f"step-{self.process_seq}.sh"
        self.tree.write_runner(name, script.encode())
        script_path = f"{self.mount}/runner/{name}"
        argv = shell_argv(shell, script_path)
        cwd = f"{self.mount}/work"
        if workdir:
            cwd = workdir if workdir.startswith("/") else f"{cwd}/{workdir}"
        return self.run_in_sandbox(label, argv, step_env, cwd, deadline)

    def run_in_sandbox(
        self,
        label: str,
        argv: list[str],
        step_env: dict[str, str],
        cwd: str,
        deadline: float,
        state: dict[str, str] | None = None,
    ) -> SandboxRun:
        """One process in a fresh sandbox over the workspace, with this step's own
        ``$GITHUB_OUTPUT``/``$GITHUB_ENV``/``$GITHUB_PATH``/``$GITHUB_STATE`` files; ``state`` is
        an action's saved state (``STATE_<name>``). Directories it adds to PATH take effect for
        the processes after it."""
        with contextlib.closing(self.tree.step_files(self.host.owner or JobOwner())) as files:
            proc = self._start(argv, self._process_env(step_env, state), cwd)
            self.output_ended_line = True
            stop = self._supervise(proc, deadline)
            return self._finish(label, proc, stop, files)

    def _process_env(self, step_env: dict[str, str], state: dict[str, str] | None) -> dict[str, str]:
        """A process's environment: the step's, the job's base, its saved state, its step files."""
        base = self.context.base_env()
        env = dict(step_env)
        env.update(base)
        for key, value in (state or {}).items():
            env[f"STATE_{key}"] = value
        env["GITHUB_OUTPUT"] = f"{self.mount}/io/output"
        env["GITHUB_ENV"] = f"{self.mount}/io/env"
        env["GITHUB_PATH"] = f"{self.mount}/io/path"
        env["GITHUB_STEP_SUMMARY"] = f"{self.mount}/io/summary"
        env["GITHUB_STATE"] = f"{self.mount}/io/state"
        if self.path_entries:
            env["PATH"] = ":".join([*reversed(self.path_entries), base["PATH"]])
        env["GITHUB_STEP"] = str(self.host.step_index)
        return env

    def _start(self, argv: list[str], env: dict[str, str], cwd: str) -> SandboxProcess:
        binds: tuple[tuple[str, str], ...] = ()
        if self.runtime is not None:
            # The attempt's artifact service: a forwarder in the sandbox carries its port there.
            argv, binds = self.runtime.wrap(argv), self.runtime.binds()
            env = {**env, **self.runtime.env}
        return self.sandbox.start(
            SandboxRequest(
                argv=argv,
                env=env,
                root=self.root,
                cwd=cwd,
                network=self.network,
                limits=self.limits,
                name=f"{self.name_prefix}-{self.process_seq}",
                binds=binds,
            )
        )

    def _finish(self, label: str, proc: SandboxProcess, stop: _Stop, files: StepFiles) -> SandboxRun:
        """What the ended process left: its output files, its summary, and its outcome."""
        code = proc.poll()
        if not self.output_ended_line:
            # The step's last line is complete now: its commands belong to this step.
            self.log.write(b"\n")
        for note in proc.finish():
            self.log.line(f"[leasehold] {label}: {note}")
        self._keep_summary(label, files)
        state = read_output_file(_step_file_text(files, "state"))
        # ``::save-state`` lines printed during this process join its $GITHUB_STATE file.
        state.update(self.commands.state.pop(self.commands.step, {}))
        run = SandboxRun(
            outcome=StepStatus.SUCCESS,
            exit_code=code,
            outputs=read_output_file(_step_file_text(files, "output")),
            env=read_output_file(_step_file_text(files, "env")),
            state=state,
        )
        added = read_path_file(_step_file_text(files, "path"))
        self.path_entries = [*self.path_entries, *added][-MAX_PATH_ENTRIES:]
        if stop.reason == AttemptStatus.CANCELLED:
            self.log.line("[leasehold] step cancelled")
            run.outcome = StepStatus.CANCELLED
        elif stop.reason == AttemptStatus.TIMED_OUT:
            self.log.line(f"[leasehold] step timed out: {stop.message}")
            run.outcome = StepStatus.TIMED_OUT
        elif stop.reason == AttemptStatus.FAILURE:
            self.log.line(f"[leasehold] step stopped: {stop.message}")
            run.outcome = StepStatus.FAILURE
        elif code != 0:
            self.log.line(f"[leasehold] {label} failed with exit code {code}")
            run.outcome = StepStatus.FAILURE
        else:
            run.exit_code = 0
        return run

    def _supervise(self, proc: SandboxProcess, deadline: float) -> _Stop:
        """Pump output, heartbeat, and stop the tree on cancel, timeout, shutdown or disk quota.

        Blocks on the process (a pidfd), a wake pipe (the cancel watcher) and the next timer
        (heartbeat, deadline, disk check, kill after the grace period): the step's end is seen
        the moment it happens, and an idle step costs no wake-ups between timers."""
        stop = _Stop()
        reader = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        reader.start()
        grace = self.grace_seconds
        next_disk_check = time.monotonic() + DISK_CHECK_SECONDS
        terminated_at: float | None = None
        exit_fd = _open_pidfd(proc.pid)
        wake_read, wake_write = os.pipe()
        over = threading.Event()
        # The activity's cancel and shutdown events live in its context: the watcher runs in a copy.
        watcher = threading.Thread(
            target=contextvars.copy_context().run, args=(_watch_cancel, over, wake_write), daemon=True
        )
        watcher.start()
        watching = True
        try:
            while proc.poll() is None:
                now = time.monotonic()
                timers = [self.host.last_heartbeat + self.host.heartbeat_seconds]
                if stop.reason is None:
                    timers += [deadline, next_disk_check]
                elif terminated_at is not None:
                    timers.append(terminated_at + grace)
                waiting = ([wake_read] if watching else []) + ([exit_fd] if exit_fd is not None else [])
                # Without a pidfd (an old kernel) the exit is still seen within a short tick.
                cap = None if exit_fd is not None else 0.05
                timeout = max(0.0, min(timers) - now)
                ready, _, _ = select.select(waiting, [], [], timeout if cap is None else min(timeout, cap))
                if wake_read in ready and not os.read(wake_read, 64):
                    # The watcher has said its piece and closed its end.
                    watching = False
                if proc.poll() is not None:
                    break
                self.host.heartbeat()
                now = time.monotonic()
                if stop.reason is None:
                    if self.host.cancelled or self.host.shutdown:
                        stop.reason, stop.message = AttemptStatus.CANCELLED, "cancelled"
                    elif now >= deadline:
                        stop.reason, stop.message = AttemptStatus.TIMED_OUT, "timeout-minutes exceeded"
                    elif now >= next_disk_check:
                        next_disk_check = now + DISK_CHECK_SECONDS
                        message = self._disk_check()
                        if message is not None:
                            stop.reason, stop.message = AttemptStatus.FAILURE, message
                    if stop.reason is not None:
                        proc.terminate_tree()
                        terminated_at = now
                elif terminated_at is not None and now - terminated_at >= grace:
                    proc.kill_tree()
                    terminated_at = None
        finally:
            over.set()
            if exit_fd is not None:
                os.close(exit_fd)
            os.close(wake_read)
            # The watcher owns the write end: it closes it when it sees ``over``.
        # The step's shell is gone: nothing of its tree may outlive it (background jobs).
        proc.kill_tree()
        reader.join(timeout=10)
        return stop

    def _disk_check(self) -> str | None:
        """Why the step must stop for its disk use (``None``: it may go on). Measured as the job
        by the helper; a job that keeps it from measuring (its process limit reached, say) for
        ``DISK_MISSES_ALLOWED`` checks in a row is stopped too, or the quota would not bind."""
        try:
            used = self.tree.disk_usage()
        except (JobTreeError, SandboxError) as exc:
            self.disk_misses += 1
            log.info("disk check of %s failed (%d in a row): %s", self.root, self.disk_misses, exc)
            if self.disk_misses >= DISK_MISSES_ALLOWED:
                return "the workspace's disk use could not be measured"
            return None
        self.disk_misses = 0
        if used > self.disk_bytes:
            return f"workspace exceeded {self.disk_bytes} bytes"
        return None

    def _pump(self, proc: SandboxProcess) -> None:
        fd = proc.stdout.fileno()
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return
            if not data:
                return
            self.output_ended_line = data.endswith(b"\n")
            self.log.write(data)
