"""``leasehold ci push``: a run for a local repository without a webhook. The real CLI against
the session's stack: through the ``post-receive`` hook docs/ci-push.md gives (installed as
written, fired by a real ``git push``), and by hand, naming the repository by directory,
working copy, full name or id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from testing.harness import REPO_ROOT
from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import WORKFLOW_PATH, log_text, wait_run
from tests.cli_people.conftest import Person, assert_one_line_error, person, run_all
from tests.gitrepo import git
from workflows.ci.ids import push_id, run_id

pytestmark = pytest.mark.slow

WORKFLOW = """
name: pushed
on: push
jobs:
  hello:
    runs-on: linux
    steps:
      - run: echo "hello from $GITHUB_REF at $GITHUB_SHA"
"""


def _hook_from_the_docs() -> str:
    text = (REPO_ROOT / "docs" / "ci-push.md").read_text()
    return text.split("```sh\n", 1)[1].split("```", 1)[0]


def _me(stack: CIStack) -> tuple[Person, httpx.Client]:
    client = stack.new_tenant()
    key = client.headers["authorization"].removeprefix("Bearer ")
    return Person(client.tenant_id, key, stack.base_url), client  # type: ignore[attr-defined]


def test_a_post_receive_hook_starts_the_run(people_stack: CIStack) -> None:
    me, client = _me(people_stack)
    remote = people_stack.git_remote()
    repo_id, _name, _secret = people_stack.register(client, remote, hook=False)
    hook = remote.bare / "hooks" / "post-receive"
    hook.write_text(_hook_from_the_docs())
    hook.chmod(0o755)
    remote.write(WORKFLOW_PATH, WORKFLOW)
    sha = remote.commit("ci")

    # A real push, as a person at their working copy makes it: the hook gets the pusher's
    # environment (the key, and `leasehold` on PATH).
    env = me.env(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
    )
    pushed = subprocess.run(
        ["git", "push", "origin", "HEAD:refs/heads/main"],
        cwd=remote.work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert pushed.returncode == 0, pushed.stderr
    rid = run_id(repo_id, sha, WORKFLOW_PATH)
    # The pusher sees the run's id.
    assert f"remote: run {rid}  {WORKFLOW_PATH}" in pushed.stderr, pushed.stderr
    run = wait_run(client, rid)
    assert run["status"] == "success", run
    assert f"hello from refs/heads/main at {sha}" in log_text(client, rid, "hello")


def test_ci_push_by_directory_working_copy_name_and_id(people_stack: CIStack, tmp_path: Path) -> None:
    me, client = _me(people_stack)
    remote = people_stack.git_remote()
    repo_id, name, _secret = people_stack.register(client, remote, hook=False)
    remote.write(WORKFLOW_PATH, WORKFLOW)
    sha = remote.commit("ci")
    remote.push()
    rid = run_id(repo_id, sha, WORKFLOW_PATH)
    pid = push_id(repo_id, sha, "refs/heads/main")

    # The working copy (its origin is the registered repository): its branch, at what the
    # registered repository holds.
    from_work = me.run("ci", "push", str(remote.work))
    assert from_work.returncode == 0, from_work.stderr
    assert from_work.stdout.splitlines() == [
        f"push {pid}: {name} refs/heads/main at {sha[:12]}",
        f"run {rid}  {WORKFLOW_PATH}",
    ], from_work.stdout

    other = person(people_stack)
    bare, by_name, by_id, stranger, unregistered = run_all(
        # The registered repository itself, as a hook's $PWD names it: the same push again.
        (me, ("ci", "push", str(remote.bare), "--json")),
        (me, ("ci", "push", name, "--ref", "main", "--no-wait", "--json")),
        (me, ("ci", "push", repo_id, "--sha", sha, "--ref", "refs/heads/main", "--json")),
        # Another tenant cannot name it; a directory nobody registered is not a repository.
        (other, ("ci", "push", repo_id, "--ref", "main")),
        (me, ("ci", "push", str(tmp_path))),
    )
    assert bare.returncode == 0, bare.stderr
    assert json.loads(bare.stdout)["id"] == pid
    assert [r["run_id"] for r in json.loads(bare.stdout)["runs"]] == [rid]
    assert by_name.returncode == 0, by_name.stderr
    assert (json.loads(by_name.stdout)["id"], json.loads(by_name.stdout)["commit_sha"]) == (pid, sha)
    assert by_id.returncode == 0, by_id.stderr
    assert json.loads(by_id.stdout)["id"] == pid
    assert stranger.returncode == 3
    assert_one_line_error(stranger, repo_id)
    assert unregistered.returncode == 3
    assert_one_line_error(unregistered, str(tmp_path.resolve()), "leasehold repos add")

    # A branch not pushed to the registered repository is refused, not started and failed.
    git(remote.work, "checkout", "-q", "-b", "unpushed")
    remote.commit("local only")
    unpushed = me.run("ci", "push", str(remote.work))
    assert unpushed.returncode == 3
    assert_one_line_error(unpushed, "refs/heads/unpushed", "push it there first")

    run = wait_run(client, rid)
    assert run["status"] == "success", run
