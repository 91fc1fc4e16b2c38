"""Attacks a hostile CI job makes on the host, the control plane and other tenants, each run
for real: a real Temporal dev server, the real orchestration and CI worker processes, real
bubblewrap with its cgroups, seccomp filter and user-mode network. Every test asserts that the
attack failed *and* that the stack is still healthy afterwards.

The worker here has small limits (64 processes, 192 MiB, 16 MiB of /dev/shm, 64 MiB of disk
per job) so that the bombs hit them in seconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from clients.ci import start as ci_start
from leasehold.database import init_database
from leasehold.records.ci.plans import set_isolation, set_network
from leasehold.settings import Settings
from testing.harness import REPO_ROOT, register_repo_row
from testing.stack import cmdline
from tests.ci_containers.conftest import oci_mirror, oci_settings
from tests.ci_core.conftest import CIStack, engine_stack
from workflows.ci.types.run import RunStatus

pytestmark = pytest.mark.slow
# The session's registry mirror, for the OCI backend's stack.
__all__ = ["oci_mirror"]

LIMIT_PROCESSES = 64
LIMIT_MEMORY = 192 << 20
LIMIT_SHM = 16 << 20
LIMIT_DISK = 64 << 20
HOST_CMDLINE = Path("/proc/cmdline").read_text().strip()


@pytest.fixture(scope="module", params=["bubblewrap", "oci"])
def hostile(
    request: pytest.FixtureRequest, temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CIStack]:
    # The same attacks on each backend that runs jobs as a leased uid (oci: podman + runc, its
    # images from the tests' registry mirror, ``tests.ci_containers``).
    backend = oci_settings(request.getfixturevalue("oci_mirror")) if request.param == "oci" else {}
    limits = {
        "ci_job_max_processes": LIMIT_PROCESSES,
        "ci_job_memory_bytes": LIMIT_MEMORY,
        "ci_job_shm_bytes": LIMIT_SHM,
        "ci_job_disk_bytes": LIMIT_DISK,
        # A uid range of its own, so counting its processes counts no other test's jobs.
        "ci_sandbox_uid_base": 1_700_000,
        "ci_sandbox_uid_count": 64,
    }
    with engine_stack(
        temporal_env, tmp_path_factory.mktemp(f"hostile-{request.param}"), **{**backend, **limits}
    ) as stack:
        yield stack


def job_uids(settings: Settings) -> range:
    return range(settings.ci_sandbox_uid_base, settings.ci_sandbox_uid_base + settings.ci_sandbox_uid_count)


def processes_of(uids: range) -> list[int]:
    """Host pids whose real uid is one of the job uids."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) in uids:
                            found.append(int(entry))
                        break
        except OSError:
            continue
    return found


async def run_workflow(stack: CIStack, name: str, workflow: str, tenant: str = "tenant-a") -> tuple[RunStatus, str]:
    """Push a one-file repository for ``tenant``; returns the run's status and its job's log."""
    repo = stack.repo(name)
    if tenant != "tenant-a":
        register_repo_row(stack.settings, tenant, f"repo-{name}-{tenant}", f"{tenant}/{name}", str(repo.path))
        repo = dataclasses.replace(repo, repo_id=f"repo-{name}-{tenant}")
    sha = repo.commit({".github/workflows/ci.yml": workflow})
    push_input = stack.push_input(repo, sha).model_copy(update={"tenant_id": tenant})
    push_id = await ci_start.start_push(stack.client, push_input)
    deadline = time.monotonic() + 60
    while (push := await ci_start.push_state(stack.client, push_id)).status.value == "listing":
        assert time.monotonic() < deadline, "push not listed"
        await asyncio.sleep(0.2)
    assert len(push.runs) == 1, push
    state = await stack.wait_run(push.runs[0].run_id, within=120)
    attempt = state.jobs[0].current_attempt()
    log = stack.log_text(attempt.log_prefix) if attempt is not None else ""
    return state.status, log


# How long a finished job's processes may take to be gone: the OCI backend's step containers
# are reaped by podman's conmon after the step ends, which on two loaded cores took over 10 s once.
JOB_PROCESSES_GONE_WITHIN = 30.0
# How long the worker's reaper (``activities.ci.reaper``) may take to empty the roots of jobs
# that ended: its job-side helper is a container of the job's uid, and in a full CI run's
# podman traffic it started more than 30 s after the job's result once.
JOB_ROOTS_GONE_WITHIN = 120.0


def job_roots(settings: Settings) -> list[str]:
    """The job roots in the worker's workspaces (root's own directory, listed by name only)."""
    try:
        return os.listdir(settings.data_dir / "ci" / "workspaces")
    except FileNotFoundError:
        return []


async def no_job_processes_left(stack: CIStack) -> None:
    # The reaper first: until a root is emptied its helper may still start, as the job's uid.
    deadline = time.monotonic() + JOB_ROOTS_GONE_WITHIN
    while job_roots(stack.settings) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.2)
    assert job_roots(stack.settings) == [], "the worker did not empty the roots of finished jobs"
    deadline = time.monotonic() + JOB_PROCESSES_GONE_WITHIN
    while processes_of(job_uids(stack.settings)) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.2)
    left = processes_of(job_uids(stack.settings))
    described = {pid: cmdline(pid)[:200] for pid in left}
    assert left == [], f"job processes outlived their job: {described}"


async def assert_healthy(stack: CIStack) -> None:
    """No process of any job outlived it, and the worker still runs jobs."""
    await no_job_processes_left(stack)
    status, log = await run_workflow(stack, f"healthy-{time.monotonic_ns()}", HEALTHY)
    assert status == RunStatus.SUCCESS, log
    assert "still-healthy" in log
    await no_job_processes_left(stack)


HEALTHY = """
on: push
jobs:
  ok:
    runs-on: linux
    steps:
      - run: echo still-healthy
"""

SYMLINKS = """
on: push
jobs:
  escape:
    runs-on: linux
    steps:
      - run: |
          set +e
          rm -rf /ci/tmp 2>/dev/null; mv /ci/tmp /ci/old-tmp 2>/dev/null || echo TMP_MOVE_REFUSED
          ln -sfT {hostdir} /ci/tmp 2>/dev/null || echo TMP_SWAP_REFUSED
          ln -sf {victim} /ci/runner/step-1.sh 2>/dev/null || echo RUNNER_SWAP_REFUSED
          ln -sf {victim} /ci/runner/passwd 2>/dev/null || echo PASSWD_SWAP_REFUSED
          ln -sf {victim} "$GITHUB_OUTPUT" 2>/dev/null || echo OUTPUT_SWAP_REFUSED
          ln -sf {victim} "$GITHUB_ENV" 2>/dev/null || echo ENV_SWAP_REFUSED
          rm -rf /ci/io 2>/dev/null; mkdir /ci/evil 2>/dev/null || echo ROOT_CLOSED
          ln -s {hostdir} /ci/work/hostlink
          ln -s {victim} /ci/home/victim
          ln -s {hostdir} /tmp/hostlink
          echo "id=$(id -u)" >> "$GITHUB_OUTPUT"
      - run: |
          set +e
          ls -la /tmp
          cat /tmp/marker.txt 2>/dev/null && echo SAW_HOST_DIR || true
          cat /ci/work/hostlink/marker.txt 2>/dev/null && echo FOLLOWED_LINK || true
          echo "second step ran"
"""


async def test_symlinked_tmp_and_runner_files_reach_nothing_of_the_host(hostile: CIStack, tmp_path: Path) -> None:
    hostdir = tmp_path / "hostdir"
    hostdir.mkdir()
    marker = hostdir / "marker.txt"
    marker.write_text("HOST-MARKER-7781\n")
    os.chmod(tmp_path, 0o755)
    os.chmod(hostdir, 0o755)
    victim = tmp_path / "victim.txt"
    victim.write_text("ORIGINAL\n")
    status, log = await run_workflow(hostile, "symlinks", SYMLINKS.format(hostdir=hostdir, victim=victim))
    for refused in (
        "TMP_MOVE_REFUSED",
        "TMP_SWAP_REFUSED",
        "RUNNER_SWAP_REFUSED",
        "PASSWD_SWAP_REFUSED",
        "OUTPUT_SWAP_REFUSED",
        "ENV_SWAP_REFUSED",
        "ROOT_CLOSED",
    ):
        assert refused in log, (refused, log)
    assert "second step ran" in log, log
    assert "HOST-MARKER-7781" not in log and "SAW_HOST_DIR" not in log and "FOLLOWED_LINK" not in log
    # The worker wrote nothing through the links, and removing the workspace followed none.
    assert victim.read_text() == "ORIGINAL\n"
    assert marker.read_text() == "HOST-MARKER-7781\n"
    assert status == RunStatus.SUCCESS, log
    await assert_healthy(hostile)


LIMITS = """
on: push
jobs:
  bombs:
    runs-on: linux
    steps:
      - name: fork bomb
        continue-on-error: true
        run: |
          python3 - <<'PY'
          import os, time
          made, err = 0, None
          for _ in range(1000):
              try:
                  pid = os.fork()
              except OSError as exc:
                  err = exc
                  break
              if pid == 0:
                  time.sleep(60)
                  os._exit(0)
              made += 1
          print(f"FORKED {made} then {err}")
          PY
      - name: memory bomb (four processes of 100 MiB)
        continue-on-error: true
        run: |
          python3 - <<'PY'
          import os, time
          kids = []
          for _ in range(4):
              pid = os.fork()
              if pid == 0:
                  block = bytearray(100 << 20)
                  time.sleep(3)
                  os._exit(0)
              kids.append(pid)
          codes = [os.waitpid(k, 0)[1] for k in kids]
          print("MEMORY", sum(1 for c in codes if os.WIFSIGNALED(c)), "killed")
          PY
      - name: shm bomb
        continue-on-error: true
        run: |
          head -c 64M /dev/zero > /dev/shm/fill 2>&1 || echo SHM_FULL
          echo "SHM_BYTES $(stat -c %s /dev/shm/fill)"
          touch /dev/new 2>/dev/null || echo DEV_READ_ONLY
          touch /new 2>/dev/null || echo ROOT_READ_ONLY
      - name: disk bomb
        continue-on-error: true
        run: |
          head -c 100M /dev/zero > /tmp/fill
          sleep 10
          echo DISK_NOT_STOPPED
      - name: kernel surface
        env:
          PROBE_VALUE: env-value-not-on-any-command-line
        run: |
          tr '\\0' ' ' < /proc/1/cmdline | grep -q env-value-not-on && echo ENV_ON_CMDLINE || echo ENV_HIDDEN
          unshare -Ur true 2>/dev/null && echo USERNS_ALLOWED || echo USERNS_REFUSED
          unshare -n true 2>/dev/null && echo NETNS_ALLOWED || echo NETNS_REFUSED
          python3 -c "import ctypes; l=ctypes.CDLL(None); print('MOUNT', l.mount(b'none', b'/tmp', b'tmpfs', 0, None))"
          for d in /opt /root /home /var /run /etc/shadow; do [ -e $d ] && echo "PRESENT $d"; done
          cat /etc/shadow > /dev/null 2>&1 && echo SHADOW_READ
          cat /proc/cmdline
          echo "PROCS $(ls /proc | grep -c '^[0-9]')"
          echo "UID $(id -u)"
"""


def settled_processes_of(uids: range, within: float = 30.0) -> list[int]:
    """``processes_of(uids)`` once none is left, or what is left after ``within`` seconds: a job
    that just ended may still have its root emptied by the reaper, as its own uid, for a moment."""
    deadline = time.monotonic() + within
    while (found := processes_of(uids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


async def test_fork_memory_shm_and_disk_bombs_hit_the_jobs_limits(hostile: CIStack) -> None:
    before = settled_processes_of(job_uids(hostile.settings))
    status, log = await run_workflow(hostile, "bombs", LIMITS)
    forked = [line for line in log.splitlines() if line.startswith("FORKED ")]
    assert forked, log
    assert int(forked[0].split()[1]) < LIMIT_PROCESSES, forked
    assert "MEMORY" in log and "MEMORY 0 killed" not in log, log
    assert "out of memory" in log, log
    # podman's conmon notes an out-of-memory kill in a file ``oom`` in its working directory:
    # the worker's own state directory, never the directory the worker was started in.
    assert not (REPO_ROOT / "oom").exists(), "conmon wrote oom into the worker's start directory"
    assert "SHM_FULL" in log, log
    shm = [line for line in log.splitlines() if line.startswith("SHM_BYTES ")]
    assert shm and int(shm[0].split()[1]) <= LIMIT_SHM, shm
    assert "DEV_READ_ONLY" in log and "ROOT_READ_ONLY" in log
    assert f"workspace exceeded {LIMIT_DISK} bytes" in log, log
    assert "DISK_NOT_STOPPED" not in log
    assert "USERNS_REFUSED" in log and "NETNS_REFUSED" in log, log
    assert "MOUNT -1" in log, log
    assert "ENV_HIDDEN" in log and "ENV_ON_CMDLINE" not in log, log
    assert "SHADOW_READ" not in log, log
    # The host kernel's command line (its boot setup) stays hidden.
    assert HOST_CMDLINE not in log, log
    if hostile.settings.ci_sandbox == "bubblewrap":
        # The OCI backend's job sees its image's own /opt, /home, /var..., never the host's.
        assert "PRESENT" not in log, log
    procs = [line for line in log.splitlines() if line.startswith("PROCS ")]
    assert procs and int(procs[0].split()[1]) < 10, procs
    uid = [line for line in log.splitlines() if line.startswith("UID ")]
    assert uid and int(uid[0].split()[1]) in job_uids(hostile.settings)
    assert status == RunStatus.SUCCESS, log
    assert before == []
    await assert_healthy(hostile)


NETWORK = """
on: push
jobs:
  net:
    runs-on: linux
    network: true
    steps:
      - run: |
          for target in {targets}; do
            addr=${{target%:*}}; port=${{target#*:}}
            if timeout 5 bash -c "echo probe > /dev/tcp/$addr/$port" 2>/dev/null
            then echo "OPEN $target"
            else echo "CLOSED $target"
            fi
          done
          ip -brief addr
"""


class Listener:
    """A loopback port of the host that counts connections."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


async def test_network_needs_the_tenants_plan_and_never_reaches_host_loopback(hostile: CIStack) -> None:
    listener = Listener()
    # Our listener, the Temporal frontend, Postgres and Redis, each through the job's own
    # loopback and through slirp4netns's gateway (which would lead to the host's loopback).
    temporal_port = int(hostile.settings.temporal_address.rsplit(":", 1)[1])
    ports = [listener.port, temporal_port, 5432, 6379]
    targets = " ".join(f"{addr}:{port}" for addr in ("127.0.0.1", "10.0.2.2") for port in ports)
    workflow = NETWORK.format(targets=targets)
    try:
        status, log = await run_workflow(hostile, "net-denied", workflow, "tenant-nonet")
        assert status == RunStatus.FAILURE, log
        assert "network: true is not allowed for tenant tenant-nonet" in log, log
        assert "CLOSED" not in log and "OPEN" not in log

        set_network(init_database(hostile.settings.resolved_database_url), "tenant-net", True)
        status, log = await run_workflow(hostile, "net-granted", workflow, "tenant-net")
        if hostile.settings.ci_sandbox == "oci":
            # No egress on this backend: a job granted network is refused, never run unfiltered.
            assert status == RunStatus.FAILURE, log
            assert "cannot give jobs a filtered network" in log, log
            assert "CLOSED" not in log and "OPEN" not in log
        else:
            assert status == RunStatus.SUCCESS, log
            assert "tap0" in log, log
            for target in targets.split():
                assert f"CLOSED {target}" in log, (target, log)
            assert "OPEN" not in log
        assert listener.accepted == 0
    finally:
        listener.close()
    await assert_healthy(hostile)


SECRETS_PROBE = """
on: push
jobs:
  steal:
    runs-on: linux
    steps:
      - run: echo "RAN-AS-FORGED-TENANT ${{ secrets.A_TOKEN }}"
"""


async def test_a_forged_tenant_in_the_run_input_is_refused(hostile: CIStack, temporal_client: Client) -> None:
    # Someone able to start workflows names tenant-a's repository under another tenant (or
    # tenant-a under a repository it does not own): the worker checks the records and refuses.
    victim = hostile.repo("victim-repo")  # registered to tenant-a
    sha = victim.commit({".github/workflows/ci.yml": SECRETS_PROBE})
    forged = hostile.push_input(victim, sha).model_copy(update={"tenant_id": "tenant-evil"})
    push_id = await ci_start.start_push(temporal_client, forged)
    deadline = time.monotonic() + 60
    while (push := await ci_start.push_state(temporal_client, push_id)).status.value == "listing":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.2)
    state = await hostile.wait_run(push.runs[0].run_id, within=120)
    assert state.status != RunStatus.SUCCESS, state
    job = state.jobs[0]
    assert job.error is not None and "does not belong to tenant tenant-evil" in job.error, job
    attempt = job.current_attempt()
    text = hostile.log_text(attempt.log_prefix) if attempt is not None else ""
    assert "RAN-AS-FORGED-TENANT" not in text
    await assert_healthy(hostile)


GVISOR_PROBE = """
on: push
jobs:
  probe:
    runs-on: linux
    steps:
      - run: echo RAN-ON-BUBBLEWRAP
"""


async def test_a_gvisor_tenants_jobs_never_run_on_a_bubblewrap_worker(hostile: CIStack) -> None:
    db = init_database(hostile.settings.resolved_database_url)
    set_isolation(db, "tenant-gv", "gvisor")
    # An input that does not say gVisor (pushed before the plan changed, or forged) reaches
    # this bubblewrap worker: it reads the plan from the records and refuses to run the job.
    status, log = await run_workflow(hostile, "gv-stale", GVISOR_PROBE, "tenant-gv")
    assert status == RunStatus.FAILURE, log
    backend = hostile.settings.ci_sandbox
    assert f"tenant tenant-gv's plan runs CI jobs in gvisor; this worker runs {backend}" in log, log
    assert "RAN-ON-BUBBLEWRAP" not in log

    # The push as the API builds it (the plan's isolation in its input): the job waits on the
    # gVisor queue of its labels, which no worker of this stack polls, and never starts here.
    repo = hostile.repo("gv-routed")
    register_repo_row(hostile.settings, "tenant-gv", "repo-gv-routed", "tenant-gv/gv-routed", str(repo.path))
    repo = dataclasses.replace(repo, repo_id="repo-gv-routed")
    sha = repo.commit({".github/workflows/ci.yml": GVISOR_PROBE})
    routed = hostile.push_input(repo, sha).model_copy(update={"tenant_id": "tenant-gv", "isolation": "gvisor"})
    push_id = await ci_start.start_push(hostile.client, routed)
    deadline = time.monotonic() + 60
    while (push := await ci_start.push_state(hostile.client, push_id)).status.value == "listing":
        assert time.monotonic() < deadline, "push not listed"
        await asyncio.sleep(0.2)
    run = push.runs[0].run_id
    await asyncio.sleep(5)
    state = await ci_start.run_state(hostile.client, run)
    assert state.isolation == "gvisor"
    assert state.jobs[0].status.value == "queued", state.jobs[0]
    assert state.jobs[0].current_attempt() is None, state.jobs[0]
    await ci_start.cancel_run(hostile.client, run)
    state = await hostile.wait_run(run, within=60)
    assert state.status == RunStatus.CANCELLED, state
    await assert_healthy(hostile)


CONTAINER_JOB = """
on: push
jobs:
  boxed:
    runs-on: linux
    container: {image}
    steps:
      - run: echo "RAN-IN-$(. /etc/os-release; echo $ID)"
"""


async def test_container_jobs_run_only_on_the_oci_backend(hostile: CIStack) -> None:
    # A bubblewrap worker has no image to run: it refuses the job rather than run its steps
    # on the host's /usr as if there were no container.
    workflow = CONTAINER_JOB.format(image=hostile.settings.ci_oci_image)
    status, log = await run_workflow(hostile, f"boxed-{time.monotonic_ns()}", workflow, "tenant-boxed")
    if hostile.settings.ci_sandbox == "oci":
        assert status == RunStatus.SUCCESS, log
        assert "RAN-IN-debian" in log, log
    else:
        assert status == RunStatus.FAILURE, log
        assert "container: and services: need the OCI backend; this worker runs bubblewrap" in log, log
        assert "RAN-IN" not in log, log
    await assert_healthy(hostile)
