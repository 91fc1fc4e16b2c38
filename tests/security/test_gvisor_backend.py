"""The gVisor backend (``worker_ci.gvisor``) and the plan that sends a tenant to it.

Against the real ``runsc`` of this host (Debian's 2022 build): its self-test refuses it, naming
the check and why, and leaves nothing behind; with only the checks this build passes, the
backend's own machinery (bundle, one sandbox per job, one exec per step, leftovers killed, the
read-only ``actions/``) runs real steps. The OCI bundle is checked field by field, and a tenant's
isolation goes from its plan to the queue its jobs are sent to.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.ci.sandbox import JobOwner, SandboxError, SandboxLimits, SandboxRequest
from clients.ci.push_input import push_input
from leasehold.database import init_database
from leasehold.records.base import utcnow
from leasehold.records.ci.plans import ISOLATION_BACKENDS, get_plan, isolation_backend, set_isolation, set_plan
from leasehold.records.ci.repos import RepoRecord
from leasehold.settings import Settings
from tests.conftest import in_ci, sqlite_url
from tests.lifecycle.test_plans_retention_cli import leasehold
from worker_ci.gvisor import GVisorSandbox
from worker_ci.gvisor_bundle import HostLayout, oci_config, process_spec
from worker_ci.gvisor_selftest import SELF_TEST_CHECKS
from worker_ci.host_view import MOUNT_POINT
from worker_ci.job_users import JobUserPool
from worker_ci.sandbox import make_sandbox
from workflows.queues import ci_queue

UID_BASE = 1_810_000
LIMITS = SandboxLimits(
    memory_bytes=256 << 20, max_processes=64, max_file_bytes=64 << 20, cpu_seconds=60, shm_bytes=16 << 20
)


def runsc_or_skip() -> str:
    found = shutil.which("runsc")
    if found is None or os.geteuid() != 0:
        why = "runsc is not installed" if found is None else "runsc needs root"
        if in_ci():
            pytest.fail(f"{why}; CI installs runsc (apt) and runs as root")
        pytest.skip(why)
    return found


def runsc_processes() -> list[str]:
    listed = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in listed.splitlines() if "runsc" in line and "--root=" in line]


@pytest.fixture
def users(tmp_path: Path) -> JobUserPool:
    return JobUserPool(tmp_path / "uids", UID_BASE, 8)


def test_the_self_test_refuses_debians_runsc_naming_the_check(tmp_path: Path, users: JobUserPool) -> None:
    runsc_or_skip()
    state = tmp_path / "gvisor"
    with pytest.raises(SandboxError) as refused:
        GVisorSandbox(users, state)
    message = str(refused.value)
    # The first check this build fails, what it printed, the cause, the build and what to do.
    assert "gVisor self-test failed: `ls /`" in message, message
    assert "Invalid argument" in message and "refuses statx with AT_NO_AUTOMOUNT" in message, message
    assert "0.0~20221219" in message and "gvisor.dev" in message, message
    # Nothing of the attempt is left: no worker directory, no sandbox, no leased uid.
    assert list(state.iterdir()) == []
    assert runsc_processes() == []
    assert users.acquire_uid(UID_BASE) and users.acquire_uid(UID_BASE + 1)


def test_a_worker_set_to_gvisor_refuses_to_start_on_this_host(tmp_path: Path) -> None:
    runsc_or_skip()
    settings = Settings(data_dir=tmp_path / "data", ci_sandbox="gvisor", ci_sandbox_uid_base=UID_BASE)
    with pytest.raises(SandboxError, match="gVisor self-test failed"):
        make_sandbox(settings)


@pytest.fixture
def machinery(tmp_path: Path, users: JobUserPool) -> Iterator[GVisorSandbox]:
    """The backend over this host's runsc with only the checks this build passes (forks and the
    memory bound): what it does for a job is then exercised for real."""
    runsc_or_skip()
    passing = tuple(c for c in SELF_TEST_CHECKS if c.name == "50 forks" or c.name.startswith("memory bound"))
    assert len(passing) == 2
    sandbox = GVisorSandbox(users, tmp_path / "gvisor", checks=passing)
    try:
        yield sandbox
    finally:
        sandbox.close()


def run_step(sandbox: GVisorSandbox, root: Path, script: str, **extra: object) -> tuple[int, str]:
    request = SandboxRequest(
        argv=["/bin/sh", "-c", script],
        env={"PATH": "/usr/bin:/bin", "A_SECRET": "s3cr3t-value"},
        root=root,
        cwd=MOUNT_POINT,
        limits=LIMITS,
        **extra,  # type: ignore[arg-type]
    )
    proc = sandbox.start(request)
    out = proc.stdout.read()
    code = proc.wait(60)
    proc.finish()
    return code, out.decode("utf-8", "replace")


def test_steps_run_as_the_job_in_one_sandbox_and_leave_nothing_running(
    machinery: GVisorSandbox, tmp_path: Path
) -> None:
    root = tmp_path / "workspaces" / "job"
    root.parent.mkdir()
    owner = machinery.prepare(root)
    assert owner.uid is not None and UID_BASE <= owner.uid < UID_BASE + 8
    try:
        code, out = run_step(
            machinery,
            root,
            "id -u; id -G; echo made > /ci/work/made; touch /ci/actions/x 2>&1 || true;"
            " touch /ci/runner/x 2>&1 || true; sleep 300 >/dev/null 2>&1 & echo started-background",
        )
        assert code == 0, out
        assert f"{owner.uid}\n{owner.gid}\n" in out, out
        assert "started-background" in out
        # actions/ and runner/ are read-only to a step; the job's own files are its uid's.
        assert "'/ci/actions/x': Read-only file system" in out, out
        assert "cannot touch '/ci/runner/x'" in out, out
        assert os.stat(root / "work" / "made").st_uid == owner.uid

        # The next step: the same sandbox (init is pid 1), the background process is gone, the
        # secret is in the environment only, and /proc shows the sandbox's processes alone.
        code, out = run_step(machinery, root, 'ps -eo pid,args; echo "secret=$A_SECRET"')
        assert code == 0, out
        assert "sleep 300" not in out, out
        assert "while read -r _" in out, out
        assert "secret=s3cr3t-value" in out
        assert "pytest" not in out and "leasehold" not in out, out
        assert "s3cr3t" not in (machinery._dir / "state").as_posix()
        for spec in machinery._dir.rglob("exec-*.json"):
            raise AssertionError(f"a step's process file (its secrets) outlived it: {spec}")

        # The helper that fills actions/ gets a sandbox where it is writable; a step after it
        # gets one where it is not.
        code, out = run_step(machinery, root, "touch /ci/actions/from-helper && echo filled", writable_actions=True)
        assert code == 0 and "filled" in out, out
        code, out = run_step(machinery, root, "ls /ci/actions >/dev/null; touch /ci/actions/y 2>&1 || true")
        assert "Read-only file system" in out, out
    finally:
        machinery.release(root)
    deadline = time.monotonic() + 10
    while runsc_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert runsc_processes() == []


def bundle(writable_actions: bool = False) -> dict:
    layout = HostLayout(links=(("/bin", "usr/bin"),), dirs=("/usr",), etc=(("/etc/hosts", False),))
    return oci_config(
        Path("/data/ci/workspaces/r"),
        JobOwner(1_810_003, 1_810_003),
        LIMITS,
        layout,
        "leasehold-x",
        writable_actions=writable_actions,
    )


def test_the_bundle_gives_the_job_its_uid_no_privilege_and_only_its_own_tree() -> None:
    config = bundle()
    process = config["process"]
    assert process["user"] == {"uid": 1_810_003, "gid": 1_810_003}
    assert all(v == [] for v in process["capabilities"].values())
    assert process["noNewPrivileges"] is True
    limits = {r["type"]: r["hard"] for r in process["rlimits"]}
    assert limits == {
        "RLIMIT_AS": LIMITS.memory_bytes,
        "RLIMIT_NPROC": LIMITS.max_processes,
        "RLIMIT_FSIZE": LIMITS.max_file_bytes,
        "RLIMIT_CPU": LIMITS.cpu_seconds,
        "RLIMIT_CORE": 0,
    }
    assert config["root"] == {"path": "rootfs", "readonly": True}
    assert config["linux"]["resources"] == {"memory": {"limit": LIMITS.memory_bytes}}
    # Never a pids cgroup limit: it counts the sentry's own threads and crashes the sandbox.
    assert "pids" not in config["linux"]["resources"]
    assert {n["type"] for n in config["linux"]["namespaces"]} >= {"pid", "network", "ipc", "mount"}
    mounts = {m["destination"]: m for m in config["mounts"]}
    writable = {d for d, m in mounts.items() if "rw" in m.get("options", [])}
    assert writable == {MOUNT_POINT, "/tmp"}
    assert mounts[MOUNT_POINT]["source"] == "/data/ci/workspaces/r"
    assert mounts["/tmp"]["source"] == "/data/ci/workspaces/r/tmp"
    assert "ro" in mounts[f"{MOUNT_POINT}/runner"]["options"]
    assert "ro" in mounts[f"{MOUNT_POINT}/actions"]["options"]
    assert mounts["/etc/passwd"]["source"].endswith("/runner/passwd")
    for destination, mount in mounts.items():
        if mount["type"] == "bind":
            assert "nosuid" in mount["options"] and "nodev" in mount["options"], destination
    assert not {"/home", "/root", "/var", "/opt", "/run", "/data"} & set(mounts)
    # The helper's sandbox: actions/ is part of the writable job root, nothing else changes.
    helper = {m["destination"] for m in bundle(writable_actions=True)["mounts"]}
    assert helper == set(mounts) - {f"{MOUNT_POINT}/actions"}


def test_a_steps_secrets_go_into_its_process_file_never_its_command_line() -> None:
    request = SandboxRequest(
        argv=["bash", "-e", "/ci/runner/step-1.sh"],
        env={"TOKEN": "t0k3n", "BAD\x00": "x\x00y", "A=B": "not a variable"},
        root=Path("/r"),
        cwd="/ci/work",
    )
    spec = process_spec(request, JobOwner(1_810_004, 1_810_004))
    assert spec["env"] == ["TOKEN=t0k3n", "BAD=xy"]
    assert all("t0k3n" not in arg for arg in spec["args"])
    assert spec["user"] == {"uid": 1_810_004, "gid": 1_810_004}
    assert spec["noNewPrivileges"] is True
    with pytest.raises(SandboxError, match="absolute"):
        process_spec(dataclasses.replace(request, cwd="work"), JobOwner(1, 1))


def test_a_tenants_plan_sends_its_jobs_to_the_gvisor_queue(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, database_url=sqlite_url(tmp_path))
    db = init_database(settings.resolved_database_url)
    repo = RepoRecord("repo-g", "tenant-g", "g/app", "https://git.example/g/app.git", "main", None, utcnow())
    assert get_plan(db, settings, "tenant-g").isolation == "bubblewrap"
    plain = push_input(settings, repo, "a" * 40, "refs/heads/main", None, plan=get_plan(db, settings, "tenant-g"))
    assert ci_queue(["linux"], "", plain.push.isolation) == "ci.linux"

    set_isolation(db, "tenant-g", "gvisor")
    assert isolation_backend(db, "tenant-g") == "gvisor"
    assert isolation_backend(db, "tenant-other") == "bubblewrap"
    plan = get_plan(db, settings, "tenant-g")
    assert plan.isolation == "gvisor"
    # A plan change keeps the isolation (it is not a column of the plan).
    assert set_plan(db, "tenant-g", 2.0, 4).isolation == "gvisor"
    inp = push_input(settings, repo, "a" * 40, "refs/heads/main", None, plan=plan)
    assert inp.push.isolation == "gvisor"
    assert ci_queue(["linux", "x64"], "p.", inp.push.isolation) == "p.ci.linux+x64@gvisor"

    with pytest.raises(ValueError, match="bubblewrap, gvisor"):
        set_isolation(db, "tenant-g", "none")
    assert isolation_backend(db, "tenant-g") == "gvisor"


def test_the_cli_sets_and_shows_a_tenants_isolation(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    shown = leasehold("plans", "show", "--tenant", "acme", "--data-dir", data, "--init")  # a fresh data dir
    assert json.loads(shown.stdout)["isolation"] == "bubblewrap"
    done = leasehold("plans", "isolation", "--tenant", "acme", "gvisor", "--data-dir", data)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"tenant_id": "acme", "isolation": "gvisor"}
    assert (
        json.loads(leasehold("plans", "show", "--tenant", "acme", "--data-dir", data).stdout)["isolation"] == "gvisor"
    )
    # The parser offers exactly the backends the records accept.
    refused = leasehold("plans", "isolation", "--tenant", "acme", "docker", "--data-dir", data)
    assert refused.returncode != 0
    offered = refused.stderr.split("choose from", 1)[1]
    assert [b.strip(" '\n)") for b in offered.split(",")] == list(ISOLATION_BACKENDS), refused.stderr
    bad_tenant = leasehold("plans", "isolation", "--tenant", "../x", "gvisor", "--data-dir", data)
    assert bad_tenant.returncode != 0 and "Traceback" not in bad_tenant.stderr
