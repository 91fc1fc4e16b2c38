"""Job roots a killed CI worker leaves behind are removed by the next one, as the job.

A real worker-like process (the real bubblewrap sandbox, a real job step) is killed with
SIGKILL in the middle of a job whose tree holds a symlink to a host file and a directory the
job made unreadable; the next worker's start-up sweep (``sweep_leftover_roots``) removes the
root without following the link, and leaves alone a root whose user a live attempt holds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from activities.ci.jobroot import sweep_leftover_roots
from leasehold.settings import Settings
from testing.harness import REPO_ROOT
from worker_ci.sandbox import limits_from, make_sandbox

UID_BASE = 1_720_000


class Audit:
    """Paths under ``watched`` that this process opened, listed or removed (PEP 578 hooks)."""

    EVENTS = frozenset({"open", "os.listdir", "os.scandir", "os.remove", "os.rmdir", "shutil.rmtree", "os.chmod"})

    def __init__(self) -> None:
        self.watched: str | None = None
        self.seen: list[tuple[str, str]] = []

    def hook(self, event: str, args: tuple[object, ...]) -> None:
        if self.watched is None or event not in self.EVENTS or not args:
            return
        arg = args[0]
        if isinstance(arg, str | bytes | os.PathLike):
            path = os.fsdecode(os.fspath(arg))
            if path.startswith(self.watched):
                self.seen.append((event, path))


AUDIT = Audit()
sys.addaudithook(AUDIT.hook)

# A "worker" that leases a job root, runs one step as the job and then hangs mid-job.
WORKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from activities.ci.sandbox import SandboxRequest
    from leasehold.settings import Settings
    from worker_ci.sandbox import limits_from, make_sandbox

    settings = Settings(data_dir=Path(sys.argv[1]), ci_sandbox="bubblewrap", ci_sandbox_uid_base={base})
    sandbox = make_sandbox(settings)
    root = settings.data_dir / "ci" / "workspaces" / sys.argv[2]
    root.parent.mkdir(parents=True, exist_ok=True)
    owner = sandbox.prepare(root)
    script = (
        "set -e; echo data > /ci/work/file; mkdir -p /ci/work/deep/er; echo x > /ci/work/deep/er/f;"
        "ln -s {victim} /ci/work/victim-link; ln -s / /ci/home/host-root;"
        "mkdir /ci/tmp/locked; echo y > /ci/tmp/locked/z; chmod 000 /ci/tmp/locked; echo step-done"
    )
    proc = sandbox.start(SandboxRequest(argv=["/bin/sh", "-c", script], env={{"PATH": "/usr/bin:/bin"}},
                                        root=root, cwd="/ci/work", limits=limits_from(settings)))
    out = proc.stdout.read()
    assert proc.wait(30) == 0, out
    proc.finish()
    print("ready", owner.uid, flush=True)
    time.sleep(600)
    """
)


def start_worker(data: Path, name: str, victim: Path) -> tuple[subprocess.Popen[str], int]:
    code = WORKER.format(base=UID_BASE, victim=victim)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(data), name],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("ready"):
        proc.kill()
        raise AssertionError(f"worker did not get ready: {line!r} {proc.communicate(timeout=10)}")
    return proc, int(line.split()[1])


def test_a_killed_workers_job_root_is_removed_as_the_job_and_a_live_one_is_kept(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the bubblewrap sandbox needs a root CI worker")
    data = tmp_path / "data"
    victim = tmp_path / "host-file"
    victim.write_text("host data\n")
    workspaces = data / "ci" / "workspaces"

    dead, dead_uid = start_worker(data, "dead-root", victim)
    live, live_uid = start_worker(data, "live-root", victim)
    try:
        assert dead_uid != live_uid
        dead.send_signal(signal.SIGKILL)
        dead.wait(10)
        assert (workspaces / "dead-root" / "work" / "victim-link").is_symlink()

        settings = Settings(data_dir=data, ci_sandbox="bubblewrap", ci_sandbox_uid_base=UID_BASE)
        sandbox = make_sandbox(settings)
        started = time.monotonic()
        AUDIT.watched = str(workspaces / "dead-root")
        depth = AUDIT.watched.count("/")
        try:
            removed = sweep_leftover_roots(workspaces, sandbox, limits_from(settings))
        finally:
            AUDIT.watched = None
        elapsed = time.monotonic() - started
        # Root opened, listed or deleted nothing below the job's own directories: only its own
        # runner/ (the helper put back in it), which the hook did see.
        inside = [
            (e, p)
            for e, p in AUDIT.seen
            if e == "shutil.rmtree" or (p.count("/") > depth + 1 and not p.endswith("/runner"))
        ]
        assert inside == [], inside
        assert any(p.endswith("/dead-root/runner") for _, p in AUDIT.seen), AUDIT.seen

        assert removed == 1, (removed, elapsed)
        assert not os.path.lexists(workspaces / "dead-root")
        # The live attempt's root is untouched: its files are all there.
        assert (workspaces / "live-root" / "work" / "file").read_text() == "data\n"
        assert (workspaces / "live-root" / "work" / "victim-link").is_symlink()
        # Nothing outside the tree was followed or changed.
        assert victim.read_text() == "host data\n"
        assert Path("/etc/hostname").exists()
        # The sweep released what it leased: the dead root's uid can be leased again, the live
        # one's cannot while its worker runs.
        assert sandbox._users.acquire_uid(dead_uid)  # type: ignore[attr-defined]
        assert not sandbox._users.acquire_uid(live_uid)  # type: ignore[attr-defined]
    finally:
        for proc in (dead, live):
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
