"""The gVisor backend for CI jobs: each job attempt in a ``runsc`` sandbox, a kernel in user space.

For tenants that must not share the host kernel (``leasehold plans isolation --tenant T gvisor``).
bubblewrap puts the job's processes on the host kernel behind a seccomp filter; here the job's
syscalls are served by gVisor's sentry, and the host kernel sees only the sentry's (and its file
helper's, the gofer's) own narrow, seccomp-filtered syscalls. The gofer runs as host root: it
opens the files the sandbox's mounts name, so the mounts are the whole of what the job reaches.

What the worker guarantees, as the bubblewrap backend does (``worker_ci.sandbox``):

- **Who the job is.** The job attempt's leased uid and gid (``JobUserPool``), in both the
  sandbox's idle init and every step (``process.user``); empty capability sets;
  ``noNewPrivileges``; every mount ``nosuid``.
- **What it sees.** An OCI bundle per container, written by root into a directory of the
  worker's own (``<data>/ci/gvisor/w-<pid>-<id>/<container>``, 0700, never inside the job root and
  never mounted): ``config.json`` (0600) and an empty, root-owned ``rootfs/`` the sandbox shows
  read-only, holding only mount points and the merged-``/usr`` links. Mounted: ``/usr`` (and the
  other system directories) read-only, the harmless ``/etc`` files bubblewrap binds, stub
  ``passwd``/``group`` from ``runner/``, the job root at ``/ci`` (``MOUNT_POINT``), ``runner/``
  read-only at ``/ci/runner``, the job's ``tmp/`` at ``/tmp``, a sized ``/dev/shm`` and gVisor's
  own ``/proc`` (the sandbox's processes only). No ``/home``, ``/root``, ``/var``, ``/opt``, ``/run``.
- **Limits.** ``process.rlimits`` (address space, processes, file size, CPU, no core files) hold
  for every process of the sandbox. Memory is ``linux.resources.memory.limit`` on the cgroup
  runsc makes for the sandbox (below the worker's own, ``linux.cgroupsPath`` is relative): it
  counts the sentry's memory, so ``/dev/shm`` and every guest page, and the host kills the whole
  sandbox when it is reached. It holds for the whole job (the sentry included), not per step.
  The process count is ``RLIMIT_NPROC`` inside, never a cgroup ``pids.max``: that counts
  gVisor's own threads (300 guest processes are ~850 host tasks) and reaching it crashes the
  sandbox. runsc is never given ``--ignore-cgroups``.
- **Secrets.** A step's environment goes into its process spec (``runsc exec --process FILE``,
  0600 in the bundle directory), never onto a command line; runsc itself gets a minimal
  environment, not the worker's.
- **Network.** ``--network=none``: the sandbox has loopback only (see ``supports_network``).

**One sandbox per job, one exec per step.** Starting a sandbox costs 130-460 ms, so the first
step of a job starts it (``runsc run``, attached: the worker keeps it as a child that dies with
the worker, ``setpriv --pdeathsig``) with an idle init, and every step, helper included, is a
``runsc exec``. The init is bash reading a pipe the worker never writes: it has no child of its
own, reaps what is orphaned to it, ignores SIGTERM, and ends when the worker goes. So in a
job's sandbox, every process but pid 1 is the running step's (steps run one at a time): the
step's tree is "all but init", signalled with ``runsc kill --all`` (SIGTERM, which init ignores)
or, for SIGKILL, stopped whole and killed one by one (``runsc kill --pid``); processes a step
leaves behind are killed when it finishes, as bubblewrap's pid namespace does. A job that
outgrows that (many processes) or a sandbox that stops (out of memory) is torn down, and the
next step starts a fresh one.

**The gate.** The constructor runs a self-test through this very path (``SELF_TEST_CHECKS``):
``ls /``, ``stat /``, stdin and fd 3, a file written through a passed descriptor, 50 forks and a
memory bound. The first that fails raises ``SandboxError`` naming it and what runsc printed.
Debian's 2022 build (``apt-get install runsc``) fails the first: it refuses ``statx`` with
``AT_NO_AUTOMOUNT``, writes passed regular files from offset 0 and has no ``exec --pass-fd``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

from activities.ci.sandbox import JobOwner, SandboxError, SandboxLimits, SandboxRequest
from leasehold.settings import Settings
from worker_ci.gvisor_bundle import (
    DATA_FD,
    INIT_PATH,
    INIT_PID,
    HostLayout,
    oci_config,
    process_spec,
    swap_accounted,
    write_private,
)
from worker_ci.gvisor_process import Container, GVisorProcess, GVisorSideProcess
from worker_ci.gvisor_selftest import (
    FILE_PREFIX,
    LAUNCH_CHECK,
    SELF_TEST_CHECKS,
    SELF_TEST_LIMITS,
    SELF_TEST_SECONDS,
    LaunchError,
    SelfTestCheck,
    explain_failure,
    read_data,
    shown_output,
)
from worker_ci.gvisor_state import RUNSC_ENV, RUNSC_SECONDS, sweep_stale
from worker_ci.host_view import MOUNT_POINT, runner_files
from worker_ci.job_users import JobUserPool
from worker_ci.step_process import popen_step

log = logging.getLogger(__name__)

# A step's leftover processes are killed one by one (``runsc kill --pid``) up to this many; past
# it the sandbox is torn down whole and the next step starts a fresh one.
KILL_ONE_BY_ONE = 32
START_SECONDS = 30.0
STOP_SECONDS = 10.0


class GVisorSandbox:
    """CI jobs in gVisor sandboxes (see the module docstring); constructed only once runsc has
    passed the self-test."""

    name = "gvisor"

    def __init__(
        self,
        users: JobUserPool,
        state_dir: Path,
        runsc: str | None = None,
        platform: str = "ptrace",
        checks: tuple[SelfTestCheck, ...] = SELF_TEST_CHECKS,
    ) -> None:
        found = runsc or shutil.which("runsc")
        if found is None:
            raise SandboxError("gVisor (runsc) is not installed: install a current release from https://gvisor.dev")
        if os.geteuid() != 0:
            raise SandboxError("the gVisor sandbox needs the CI worker to run as root (runsc's cgroups and gofer)")
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise SandboxError("setpriv (util-linux) is required to tie job sandboxes to the worker's life")
        self._binary = found
        self._setpriv = setpriv
        self._platform = platform
        self._users = users
        self._layout = HostLayout.detect()
        self._swap = swap_accounted()
        self._containers: dict[Path, Container] = {}
        self._lock = threading.Lock()
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(state_dir, 0o700)
        sweep_stale(self._binary, state_dir)
        # This worker's own directory, held by a lock for its life: a later worker that finds
        # the lock free cleans up after it.
        self._dir = state_dir / f"w-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._dir.mkdir(mode=0o700)
        self._lock_fd = os.open(self._dir / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._state = self._dir / "state"
        self._state.mkdir(mode=0o700)
        self._checks = checks
        self.version = self._version()
        try:
            self.self_test()
        except BaseException:
            self.close()
            raise

    # Sandbox protocol ---------------------------------------------------------------------

    @property
    def supports_network(self) -> bool:
        """No network for now. Debian's runsc cannot run ``--network=sandbox`` at all ("cannot run
        with network enabled in root network namespace"), and a current release's would put
        the job on the host's network through gVisor's own stack: a job would still need the
        user-mode egress bubblewrap's jobs get (``worker_ci.network``: no host loopback,
        link-local, private or metadata address), wired into the sandbox's namespace."""
        return False

    def mount_point(self, root: Path) -> str:
        return MOUNT_POINT

    def prepare(self, root: Path) -> JobOwner:
        return self._users.lease_root(root, runner_files)

    def release(self, root: Path) -> None:
        with self._lock:
            container = self._containers.pop(root, None)
        if container is not None:
            self._teardown(container)
        self._users.release_root(root)

    def start(self, request: SandboxRequest) -> GVisorProcess | GVisorSideProcess:
        if request.network:
            raise SandboxError("the gvisor backend gives jobs no network")
        stdin_fd, data_fd = request.stdin_fd, request.data_fd
        if data_fd is not None and data_fd <= 2:
            raise SandboxError(f"data_fd {data_fd} would be taken by the step's stdio")
        owner = self._users.owner_of(request.root)
        spec_data = json.dumps(process_spec(request, owner)).encode()
        container = self._container(request.root, owner, request.limits, request.writable_actions)
        with container.lock:
            if container.stepping():
                # A helper beside the running step (the disk check); it reads, never writes.
                return self._exec_beside(container, request, spec_data)
            if not container.clean:
                # The previous step was not finished: nothing of it may run into this one.
                self._kill_step(container)
            container.seq += 1
            spec = container.bundle / f"exec-{container.seq}.json"
            write_private(spec, spec_data)
            argv = [*self._global_args(), "exec", "--process", str(spec)]
            if data_fd is not None:
                argv += ["--pass-fd", f"{int(data_fd)}:{DATA_FD}"]
            argv.append(container.cid)
            try:
                proc = popen_step(argv, stdin_fd, env=RUNSC_ENV, pass_fds=[data_fd] if data_fd is not None else [])
            except OSError as exc:
                spec.unlink(missing_ok=True)
                raise SandboxError(f"cannot start runsc exec: {exc}") from exc
            container.clean = False
            container.step = GVisorProcess(proc, self, container, spec)
            return container.step

    def _exec_beside(self, container: Container, request: SandboxRequest, spec_data: bytes) -> GVisorSideProcess:
        if request.stdin_fd is not None or request.data_fd is not None or request.writable_actions:
            raise SandboxError("only a read-only helper runs beside a job's step")
        container.seq += 1
        spec = container.bundle / f"exec-{container.seq}.json"
        write_private(spec, spec_data)
        argv = [*self._global_args(), "exec", "--process", str(spec), container.cid]
        try:
            proc = popen_step(argv, None, env=RUNSC_ENV)
        except OSError as exc:
            spec.unlink(missing_ok=True)
            raise SandboxError(f"cannot start runsc exec: {exc}") from exc
        return GVisorSideProcess(proc, spec)

    def close(self) -> None:
        """Tear down every sandbox of this worker and its directory (at shutdown)."""
        with self._lock:
            containers = list(self._containers.values())
            self._containers.clear()
        for container in containers:
            self._teardown(container)
        shutil.rmtree(self._dir, ignore_errors=True)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # The self-test ------------------------------------------------------------------------

    def self_test(self) -> None:
        """Run the self-test's checks (``SELF_TEST_CHECKS`` unless a test names fewer) as a
        throwaway job; ``SandboxError`` names the first that fails."""
        base = self._dir / "self-test"
        base.mkdir(mode=0o700)
        root = base / "root"
        started = time.monotonic()
        self.prepare(root)
        try:
            for check in self._checks:
                self._check(root, check)
        finally:
            self.release(root)
            # Only the checks above ran in this tree (no job's code): root may remove it.
            shutil.rmtree(base, ignore_errors=True)
        log.info("gVisor self-test passed in %.1f s (%s, %s)", time.monotonic() - started, self.version, self._binary)

    def _fail(self, check: SelfTestCheck, printed: str) -> SandboxError:
        why = explain_failure(check, printed)
        detail = f"{printed}: {why}" if why else printed
        return SandboxError(
            f"gVisor self-test failed: `{check.name}` ({detail}; {self.version} at {self._binary}; "
            "install a current gVisor release from https://gvisor.dev)"
        )

    def _check(self, root: Path, check: SelfTestCheck) -> None:
        fds: list[int] = []
        data_read = data_file = -1
        stdin_fd = data_fd = None
        try:
            if check.stdin is not None:
                r, w = os.pipe()
                fds += [r, w]
                os.write(w, check.stdin)
                os.close(w)
                fds.remove(w)
                stdin_fd = r
            if check.data == "pipe":
                data_read, data_fd = os.pipe()
                fds += [data_read, data_fd]
            elif check.data == "file":
                data_file = os.open(root.parent / "fd3", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                fds.append(data_file)
                os.write(data_file, FILE_PREFIX)
                data_fd = data_file
            request = SandboxRequest(
                argv=list(check.argv),
                env={"PATH": INIT_PATH, "HOME": f"{MOUNT_POINT}/home", "LANG": "C"},
                root=root,
                cwd=MOUNT_POINT,
                limits=SELF_TEST_LIMITS,
                name="gvisor-self-test",
                stdin_fd=stdin_fd,
                data_fd=data_fd,
            )
            try:
                proc = self.start(request)
            except LaunchError as exc:
                raise self._fail(LAUNCH_CHECK, str(exc)) from exc
            except SandboxError as exc:
                raise self._fail(check, str(exc)) from exc
            if data_fd is not None and data_fd != data_file:
                os.close(data_fd)
                fds.remove(data_fd)
            try:
                output, _ = proc._proc.communicate(timeout=SELF_TEST_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill_tree()
                output, _ = proc._proc.communicate(timeout=STOP_SECONDS)
                output += b" (timed out)"
            code = proc.wait()
            notes = proc.finish()
            if check.refused is not None:
                if check.refused in output.decode("utf-8", "replace").split() or code == 0:
                    raise self._fail(check, f"the limit did not hold: {shown_output(output)}")
                return
            lines = output.decode("utf-8", "replace").splitlines()
            missing = [line for line in check.lines if line not in lines]
            if code != 0 or missing:
                shown = shown_output(output) or f"exit status {code}"
                raise self._fail(check, "; ".join([shown, *notes]))
            if check.data_out is not None:
                got = read_data(data_read, data_file)
                if got != check.data_out:
                    expected = FILE_PREFIX if check.data == "file" else b""
                    how = f"not starting with {expected!r}" if expected and not got.startswith(expected) else ""
                    raise self._fail(check, f"fd 3 got {got!r}, not {check.data_out!r} {how}".strip())
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                (root.parent / "fd3").unlink()

    # runsc --------------------------------------------------------------------------------

    def _global_args(self) -> list[str]:
        # --file-access-mounts=shared: the worker writes step scripts and io/ files between steps,
        # and reads what the job wrote; the sandbox must see the host's changes (the default
        # now, said outright). --overlay2=none: the root is read-only, with nothing to overlay.
        return [
            self._binary,
            f"--root={self._state}",
            "--network=none",
            f"--platform={self._platform}",
            "--file-access-mounts=shared",
            "--overlay2=none",
        ]

    def _runsc(self, *args: str, timeout: float = RUNSC_SECONDS) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(
                [*self._global_args(), *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=RUNSC_ENV,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return subprocess.CompletedProcess(list(args), 255, b"", str(exc).encode())

    def _version(self) -> str:
        try:
            out = subprocess.run(
                [self._binary, "--version"], capture_output=True, env=RUNSC_ENV, timeout=RUNSC_SECONDS, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxError(f"cannot run {self._binary}: {exc}") from exc
        first = out.stdout.decode("utf-8", "replace").strip().splitlines()
        return first[0] if first else "runsc (unknown version)"

    def _guest_pids(self, container: Container) -> list[int] | None:
        """The sandbox's processes but init; ``None`` when runsc cannot say (a stopped sandbox)."""
        if not container.alive():
            return None
        done = self._runsc("ps", container.cid)
        if done.returncode != 0:
            return None
        pids = []
        # A table: UID PID PPID C TTY STIME TIME CMD (the JSON form has only pids in some
        # releases and more in others; the table is the same in all).
        for line in done.stdout.decode("utf-8", "replace").splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit() and int(fields[1]) != INIT_PID:
                pids.append(int(fields[1]))
        return pids

    # Containers ---------------------------------------------------------------------------

    def _container(self, root: Path, owner: JobOwner, limits: SandboxLimits | None, writable: bool) -> Container:
        """The job's running sandbox, started (or started afresh) as needed: with ``actions/``
        writable for the helper that fills it, read-only for steps (and a helper beside one)."""
        with self._lock:
            container = self._containers.get(root)
        if container is not None and container.alive() and container.limits == limits:
            if container.writable_actions == writable or (not writable and container.stepping()):
                return container
            if container.stepping():
                raise SandboxError("actions/ cannot be made writable while a step runs")
        if container is not None:
            self._teardown(container)
        container = self._launch(root, owner, limits, writable)
        with self._lock:
            self._containers[root] = container
        return container

    def _launch(self, root: Path, owner: JobOwner, limits: SandboxLimits | None, writable: bool) -> Container:
        cid = f"leasehold-{uuid.uuid4().hex[:16]}"
        bundle = self._dir / cid
        bundle.mkdir(mode=0o700)
        init_read = init_write = -1
        run: subprocess.Popen[bytes] | None = None
        try:
            rootfs = bundle / "rootfs"
            rootfs.mkdir(mode=0o755)
            os.chmod(rootfs, 0o755)
            self._layout.populate(rootfs)
            # Relative: below the worker's own cgroup, as the bubblewrap backend's step cgroups.
            config = oci_config(root, owner, limits, self._layout, f"leasehold-{cid}", self._swap, writable)
            write_private(bundle / "config.json", json.dumps(config, indent=1).encode())
            init_read, init_write = os.pipe()
            os.set_inheritable(init_write, False)
            with open(bundle / "runsc.log", "wb") as runsc_log:
                run = subprocess.Popen(
                    [
                        self._setpriv,
                        "--pdeathsig",
                        "KILL",
                        "--",
                        *self._global_args(),
                        "run",
                        "--bundle",
                        str(bundle),
                        cid,
                    ],
                    stdin=init_read,
                    stdout=runsc_log,
                    stderr=subprocess.STDOUT,
                    env=RUNSC_ENV,
                    start_new_session=True,
                )
            os.close(init_read)
            init_read = -1
            container = Container(cid, bundle, limits, run, init_write, writable)
            self._wait_running(container)
            return container
        except (OSError, SandboxError) as exc:
            if init_read >= 0:
                os.close(init_read)
            printed = b""
            with contextlib.suppress(OSError):
                printed = (bundle / "runsc.log").read_bytes()
            if run is not None:
                self._teardown(Container(cid, bundle, limits, run, init_write))
            else:
                if init_write >= 0:
                    os.close(init_write)
                shutil.rmtree(bundle, ignore_errors=True)
            detail = shown_output(printed) or str(exc)
            raise LaunchError(f"cannot start the job's gVisor sandbox: {detail}") from exc

    def _wait_running(self, container: Container) -> None:
        deadline = time.monotonic() + START_SECONDS
        delay = 0.005
        while time.monotonic() < deadline:
            if not container.alive():
                raise SandboxError(f"runsc run exited with status {container.run.returncode}")
            done = self._runsc("state", container.cid)
            if done.returncode == 0:
                with contextlib.suppress(ValueError):
                    if json.loads(done.stdout).get("status") == "running":
                        return
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        raise SandboxError(f"the sandbox did not start within {START_SECONDS:.0f} s")

    def _signal_step(self, container: Container, sig: str) -> None:
        """``sig`` to every process of the sandbox; init ignores SIGTERM, SIGINT and SIGHUP."""
        with container.lock:
            if container.alive():
                self._runsc("kill", "--all", container.cid, sig)

    def _kill_step(self, container: Container) -> None:
        """SIGKILL every process of the sandbox but init; the whole sandbox where that cannot be
        done one by one."""
        with container.lock:
            pids = self._guest_pids(container)
            if pids is None:
                self._teardown(container)
                return
            if not pids:
                container.clean = container.step is None or container.step.poll() is not None
                return
            if len(pids) > KILL_ONE_BY_ONE:
                self._teardown(container)
                return
            # Stopped, nothing forks: the list taken now is the whole of them.
            self._runsc("kill", "--all", container.cid, "STOP")
            pids = self._guest_pids(container)
            if pids is None or len(pids) > KILL_ONE_BY_ONE:
                self._teardown(container)
                return
            for pid in pids:
                self._runsc("kill", "--pid", str(pid), container.cid, "KILL")
            self._runsc("kill", "--pid", str(INIT_PID), container.cid, "CONT")
            container.clean = container.step is None or container.step.poll() is not None

    def _finish_step(self, container: Container, step: GVisorProcess, spec: Path) -> list[str]:
        notes = []
        with container.lock:
            if not container.alive():
                limit = container.limits.memory_bytes if container.limits is not None else None
                bound = f" (out of memory? the job may use {limit} bytes in all, the sandbox's own included)"
                notes.append(f"the job's gVisor sandbox stopped during this step{bound if limit else ''}")
                self._teardown(container)
            elif not container.clean:
                # What the step left running dies with it, as in bubblewrap's pid namespace.
                self._kill_step(container)
            if container.step is step:
                container.step = None
            spec.unlink(missing_ok=True)
        return notes

    def _teardown(self, container: Container) -> None:
        """Kill and delete a sandbox and remove its bundle (its cgroup goes with ``delete``)."""
        with container.lock:
            if container.alive():
                self._runsc("kill", "--all", container.cid, "KILL")
                try:
                    container.run.wait(STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(OSError):
                        os.killpg(container.run.pid, signal.SIGKILL)
                    container.run.wait(STOP_SECONDS)
            else:
                container.run.wait()
            self._runsc("delete", "--force", container.cid)
            if container.init_stdin >= 0:
                os.close(container.init_stdin)
                container.init_stdin = -1
            container.clean = True
            shutil.rmtree(container.bundle, ignore_errors=True)


def make_gvisor_sandbox(settings: Settings, users: JobUserPool) -> GVisorSandbox:
    """The gVisor backend for ``settings``, or ``SandboxError`` (runsc missing, or failing its
    self-test: a runtime that cannot run jobs correctly is refused, never used)."""
    return GVisorSandbox(
        users,
        settings.data_dir / "ci" / "gvisor",
        runsc=settings.ci_gvisor_runsc,
        platform=settings.ci_gvisor_platform,
    )
