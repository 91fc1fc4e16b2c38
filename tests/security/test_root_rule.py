"""The root rule, checked on the running code: while the CI worker (root) runs real jobs, no
module of the worker but ``activities.ci.jobroot`` opens, lists, walks, changes, hashes,
extracts or deletes a path under a job's root.

Python's audit hooks (PEP 578) report every ``open``, ``os.listdir``/``os.scandir`` (and so
``os.walk`` and ``glob``), ``os.chmod``/``os.chown``, ``os.remove``/``os.rmdir``/``os.rename``,
``os.mkdir``, ``shutil.rmtree`` and ``glob.glob`` with its path; each one that names a job root is
put down to the innermost frame of the project's own code. Jobs run here are real attempts of
``CIJobActivities.run_job`` in an ``ActivityEnvironment`` (no Temporal server: the attempt
grant is answered in-process) with the real bubblewrap sandbox, a real git mirror, a cache
saved by one job and restored by the next, ``hashFiles``, outputs and a step summary.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.ci.git import GitMirror
from activities.ci.job import CIJobActivities, JobConfig
from activities.ci.run_records import TrustedRun
from leasehold.clone_urls import ClonePolicy
from leasehold.settings import Settings
from leasehold.storage import LocalObjectStore
from worker_ci.sandbox import limits_from, make_sandbox
from workflows.ci.types.job import AttemptGrant, AttemptStatus, JobActivityInput
from workflows.ci.types.push import PushContext
from workflows.ci.types.spec import JobSpec, StepSpec

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ALLOWED = "activities.ci.jobroot"
EVENTS = frozenset(
    {
        "open",
        "os.listdir",
        "os.scandir",
        "os.chmod",
        "os.chown",
        "os.remove",
        "os.rmdir",
        "os.rename",
        "os.mkdir",
        "os.symlink",
        "os.link",
        "os.truncate",
        "os.utime",
        "shutil.rmtree",
        "shutil.copytree",
        "shutil.copyfile",
        "glob.glob",
    }
)


class Recorder:
    """What the audit hook saw under ``watched`` while ``on``: (event, path, module)."""

    def __init__(self) -> None:
        self.watched: str | None = None
        self.on = False
        self.seen: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()

    def responsible(self, frame: FrameType | None) -> str | None:
        """The innermost module of this project's own code on the stack."""
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename.startswith(str(REPO)) and "/.venv/" not in filename and frame.f_code.co_name != "hook":
                return str(frame.f_globals.get("__name__", "?"))
            frame = frame.f_back
        return None

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.on or event not in EVENTS or self.watched is None:
            return
        for arg in args[:2]:
            if isinstance(arg, int | bool) or arg is None:
                continue
            try:
                path = os.fsdecode(os.fspath(arg))
            except TypeError:
                continue
            if path.startswith(self.watched):
                module = self.responsible(sys._getframe(1))
                with self._lock:
                    self.seen.append((event, path, module or "?"))

    def violations(self) -> list[tuple[str, str, str]]:
        return [s for s in self.seen if s[2] != ALLOWED and not s[2].startswith("tests.")]


RECORDER = Recorder()
sys.addaudithook(RECORDER.hook)


class Records:
    def verify(self, inp: JobActivityInput, workflow_id: str) -> TrustedRun:
        return TrustedRun(inp.push.tenant_id, inp.push.repo_id, inp.push.clone_url, network_allowed=False)


def _git(cwd: Path, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CIJobActivities, Path, str, str]]:
    work = tmp_path_factory.mktemp("rootrule-audit")
    repo = work / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "pkg").mkdir()
    (repo / "pkg" / "deps.lock").write_text("dep 1\n")
    os.symlink("/etc/hostname", repo / "host-link")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "one")
    sha = _git(repo, "rev-parse", "HEAD")
    settings = Settings(data_dir=work / "data", ci_sandbox_uid_base=1_780_000, ci_sandbox_uid_count=16)
    loop = asyncio.new_event_loop()
    activities = CIJobActivities(
        JobConfig(workspaces=work / "workspaces", limits=limits_from(settings), disk_bytes=1 << 30),
        LocalObjectStore(work / "store", b"audit-signing-key", "http://127.0.0.1/"),
        make_sandbox(settings),
        GitMirror(work / "mirrors", ClonePolicy(local_root=work)),
        None,  # type: ignore[arg-type]  # no server: the grant is answered below
        loop,
        Records(),
    )
    activities._request_attempt = lambda inp: AttemptGrant(proceed=True, attempt=1)  # type: ignore[method-assign]
    yield activities, work, str(repo), sha
    loop.close()


def job_input(url: str, sha: str, steps: list[StepSpec]) -> JobActivityInput:
    push = PushContext(
        tenant_id="t",
        repo_id="repo-t",
        repo_full_name="t/audit",
        clone_url=url,
        commit_sha=sha,
        ref="refs/heads/main",
        heartbeat_timeout_seconds=30.0,
        cancel_grace_seconds=1.0,
    )
    return JobActivityInput(
        push=push,
        run_id=f"run_{uuid.uuid4().hex[:24]}",
        run_workflow_id="ci-run:audit",
        workflow_name="audit",
        workflow_path=".github/workflows/audit.yml",
        job=JobSpec(id="j", name="j", runs_on=["audit"], steps=steps),
    )


CACHE = StepSpec(
    index=0, name="cache", uses="actions/cache@v4", with_inputs={"path": "node_modules\n~/.cache/x", "key": "k-1"}
)
MESS = """
mkdir -p node_modules/a ~/.cache/x && echo mod > node_modules/a/index.js && echo c > ~/.cache/x/f
ln -s /etc/passwd node_modules/passwd-link
mkfifo node_modules/fifo
mkdir -p locked && echo x > locked/f && chmod 000 locked
echo "## summary" >> "$GITHUB_STEP_SUMMARY"
echo "hash=${{ hashFiles('pkg/*.lock', '**/*.js') }}" >> "$GITHUB_OUTPUT"
echo "A=1" >> "$GITHUB_ENV"
"""


def run_audited(env: ActivityEnvironment, activities: CIJobActivities, inp: JobActivityInput) -> Any:
    RECORDER.seen.clear()
    RECORDER.on = True
    try:
        result = env.run(activities.run_job, inp)
        # The root is emptied after the result (activities.ci.reaper): audited too.
        assert activities.reaper.drain(60), "the job root was not emptied"
        return result
    finally:
        RECORDER.on = False


def test_no_module_but_jobroot_touches_a_job_root(jobs: tuple[CIJobActivities, Path, str, str]) -> None:
    activities, work, url, sha = jobs
    RECORDER.watched = str(work / "workspaces") + "/"
    env = ActivityEnvironment()
    steps = [CACHE, StepSpec(index=1, name="mess", run=MESS), StepSpec(index=2, name="env", run='test "$A" = 1')]
    first = run_audited(env, activities, job_input(url, sha, steps))
    assert first.status == AttemptStatus.SUCCESS, first
    assert first.outputs["hash"] != "", first.outputs
    # The hook did see the job root being handled (by the root module): it is watching.
    assert any(module == ALLOWED for _, _, module in RECORDER.seen), RECORDER.seen[:20]
    assert RECORDER.violations() == []
    # The next job restores the cache the first one saved (an extraction into the job's tree).
    restore = [CACHE, StepSpec(index=1, name="t", run="test -f node_modules/a/index.js")]
    second = run_audited(env, activities, job_input(url, sha, restore))
    assert RECORDER.violations() == []
    assert second.status == AttemptStatus.SUCCESS, second
    assert list((work / "workspaces").iterdir()) == []


def test_the_check_catches_a_module_that_breaks_the_rule(tmp_path: Path) -> None:
    """The same hook, on a listing made from another worker module's code, reports it: the
    test above could fail."""
    root = tmp_path / "workspaces" / "job"
    root.mkdir(parents=True)
    (root / "planted").write_text("x")
    RECORDER.watched = str(tmp_path / "workspaces") + "/"
    scope: dict[str, Any] = {"__name__": "activities.ci.cache"}
    exec(
        compile("import os\ndef walk(p):\n    return os.listdir(p)\n", str(REPO / "activities/ci/cache.py"), "exec"),
        scope,
    )
    RECORDER.seen.clear()
    RECORDER.on = True
    try:
        scope["walk"](str(root))
    finally:
        RECORDER.on = False
    assert RECORDER.violations() == [("os.listdir", str(root), "activities.ci.cache")]
