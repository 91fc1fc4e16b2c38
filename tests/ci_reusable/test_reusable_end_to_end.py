"""A reusable workflow end to end: a real git push delivers its webhook, the listing reads the
called file from git at the commit, and the run's jobs (the caller's own and the called ones)
run in the sandbox. A called job's output reaches a job after the caller through
``on.workflow_call.outputs``; the input comes from a job before the caller; the secret the
caller passes is masked; the caller's env does not reach the called jobs. A called path that
is a symbolic link out of .github/workflows is read as git stores it (the link's text), never
followed: the run fails naming the file. Another repository's workflow comes from the stack's
actions source (a directory of mirrors), pinned to the commit its tag named at the push; a link
or a missing file there fails the run naming the called workflow."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.ci_actions.conftest import make_action_repo
from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import WORKFLOW_PATH, done_push, job, log_text, push_workflow, wait_for, wait_run
from tests.ci_core.conftest import git

CALLER = """
on: push
env:
  ROOT_ENV: from-root
jobs:
  setup:
    runs-on: linux
    outputs:
      v: ${{ steps.a.outputs.v }}
    steps:
      - id: a
        run: echo "v=42" >> "$GITHUB_OUTPUT"
  call:
    needs: setup
    uses: ./.github/workflows/lib.yml
    with:
      greeting: hi-${{ needs.setup.outputs.v }}
      loud: true
    secrets:
      token: ${{ secrets.DEPLOY }}
  report:
    needs: call
    runs-on: linux
    steps:
      - run: echo "said=${{ needs.call.outputs.said }} result=${{ needs.call.result }}"
"""

LIB = """
on:
  workflow_call:
    inputs:
      greeting: {type: string, required: true}
      loud: {type: boolean, default: false}
      times: {type: number, default: 2}
    secrets:
      token: {required: true}
    outputs:
      said:
        value: ${{ jobs.say.outputs.word }}
env:
  LIB_ENV: lib-${{ inputs.greeting }}
jobs:
  say:
    runs-on: linux
    outputs:
      word: ${{ steps.s.outputs.word }}
    steps:
      - id: s
        run: echo "word=${{ inputs.greeting }}x${{ inputs.times }}" >> "$GITHUB_OUTPUT"
      - run: echo "root=[$ROOT_ENV] lib=[$LIB_ENV] loud=${{ inputs.loud }} token=${{ secrets.token }}"
"""

SECRET = "reusable-s3cret-value"


def test_a_called_jobs_output_reaches_the_job_after_its_caller(ci_engine: CIStack) -> None:
    client = ci_engine.new_tenant()

    def store_secret(client_, repo_id: str) -> None:  # type: ignore[no-untyped-def]
        assert client_.put("/v1/secrets/DEPLOY", json={"value": SECRET}).status_code == 201

    pushed = push_workflow(
        ci_engine, CALLER, client=client, before_push=store_secret, files={".github/workflows/lib.yml": LIB}
    )
    run = wait_run(client, pushed.run_id, timeout=180)
    assert run["status"] == "success", run
    assert [j["id"] for j in run["jobs"]] == ["setup", "call__say", "report"], run
    assert job(run, "call__say")["name"] == "call / say"

    called = log_text(client, pushed.run_id, "call__say")
    # The called file's env, not the caller's; the input from the job before the caller; the
    # secret the caller passed, masked.
    assert "root=[] lib=[lib-hi-42] loud=true token=***" in called, called
    assert SECRET not in called

    report = log_text(client, pushed.run_id, "report")
    assert "said=hi-42x2 result=success" in report, report


def test_a_called_workflow_that_is_a_link_is_never_followed(ci_engine: CIStack) -> None:
    client = ci_engine.new_tenant()
    remote = ci_engine.git_remote()
    ci_engine.register(client, remote)
    # A valid reusable workflow outside .github/workflows, and a link to it inside.
    remote.write("outside/lib.yml", LIB)
    remote.write(WORKFLOW_PATH, CALLER.replace("lib.yml", "link.yml"))
    os.symlink("../../outside/lib.yml", remote.work / ".github/workflows/link.yml")
    remote.commit("link")
    remote.push()
    (delivery,) = remote.deliveries()
    assert delivery.status == 202, delivery.answer
    pid = json.loads(delivery.answer)["pushes"][0]["id"]
    push = wait_for("the push to list its runs", lambda: done_push(client, pid))
    runs = {r["workflow_path"]: r["run_id"] for r in push["runs"]}
    run = wait_run(client, runs[WORKFLOW_PATH])
    assert run["status"] == "failure", run
    # The link's own text is the file: not a workflow, so the caller's call fails with its name.
    assert "link.yml" in (run.get("error") or ""), run
    assert all(not j["id"].startswith("call__") for j in run["jobs"]), run


MATRIX_CALLER = """
on: push
jobs:
  call:
    strategy:
      matrix:
        who: [ann, bob]
    uses: ./.github/workflows/lib.yml
    with:
      greeting: ${{ matrix.who }}
    secrets: inherit
  report:
    needs: call
    runs-on: linux
    steps:
      - run: echo "said=${{ needs.call.outputs.said }} result=${{ needs.call.result }}"
"""


def test_a_matrix_caller_runs_the_called_workflow_per_combination(ci_engine: CIStack) -> None:
    client = ci_engine.new_tenant()
    pushed = push_workflow(ci_engine, MATRIX_CALLER, client=client, files={".github/workflows/lib.yml": LIB})
    run = wait_run(client, pushed.run_id, timeout=180)
    assert run["status"] == "success", run
    assert [(j["id"], j["name"]) for j in run["jobs"]] == [
        ("call-1__say", "call (ann) / say"),
        ("call-2__say", "call (bob) / say"),
        ("report", "report"),
    ], run
    assert "word=bobx2" in log_text(client, pushed.run_id, "call-2__say")
    report = log_text(client, pushed.run_id, "report")
    # GitHub gives the outputs of a matrix caller from one of its calls (the last to set them).
    assert "said=bobx2 result=success" in report or "said=annx2 result=success" in report, report


# Another repository's workflow, from the actions source ------------------------------------------

SHARED_BUILD = """
on:
  workflow_call:
    inputs:
      target: {type: string, required: true}
      shards: {type: number, default: 3}
    secrets:
      token: {required: true}
    outputs:
      artifact:
        value: ${{ jobs.build.outputs.name }}
jobs:
  build:
    runs-on: linux
    outputs:
      name: ${{ steps.b.outputs.name }}
    steps:
      - id: b
        run: echo "name=${{ inputs.target }}-from-RELEASE.tar" >> "$GITHUB_OUTPUT"
      - run: echo "shards=${{ inputs.shards }} token=${{ secrets.token }} sha=${{ github.sha }}"
"""

REMOTE_CALLER = """
on: push
jobs:
  setup:
    runs-on: linux
    outputs:
      target: ${{ steps.t.outputs.target }}
    steps:
      - id: t
        run: echo "target=app" >> "$GITHUB_OUTPUT"
  call:
    needs: setup
    uses: other-owner/shared/.github/workflows/build.yml@v1
    with:
      target: ${{ needs.setup.outputs.target }}
    secrets:
      token: ${{ secrets.DEPLOY }}
  report:
    needs: call
    runs-on: linux
    steps:
      - run: echo "artifact=${{ needs.call.outputs.artifact }} result=${{ needs.call.result }}"
"""


def test_another_repositorys_workflow_runs_from_the_actions_source(ci_engine: CIStack, action_mirrors: Path) -> None:
    make_action_repo(action_mirrors, "other-owner/shared", {".github/workflows/build.yml": SHARED_BUILD})
    shared = action_mirrors / "other-owner/shared"
    (shared / ".github/workflows/build.yml").write_text(SHARED_BUILD.replace("RELEASE", "v1"))
    git(shared, "commit", "-qam", "release")
    git(shared, "tag", "-f", "v1")
    client = ci_engine.new_tenant()

    def store_secret(client_, repo_id: str) -> None:  # type: ignore[no-untyped-def]
        assert client_.put("/v1/secrets/DEPLOY", json={"value": SECRET}).status_code == 201

    pushed = push_workflow(ci_engine, REMOTE_CALLER, client=client, before_push=store_secret)
    run = wait_run(client, pushed.run_id, timeout=180)
    assert run["status"] == "success", run
    assert [(j["id"], j["name"]) for j in run["jobs"]] == [
        ("setup", "setup"),
        ("call__build", "call / build"),
        ("report", "report"),
    ], run

    called = log_text(client, pushed.run_id, "call__build")
    # The default input, the secret passed by name (masked), and the caller's commit in github.
    assert f"shards=3 token=*** sha={pushed.sha}" in called, called
    assert SECRET not in called
    # The file read at the commit v1 named when the push was listed (not the first tag).
    report = log_text(client, pushed.run_id, "report")
    assert "artifact=app-from-v1.tar result=success" in report, report


def test_another_repositorys_missing_or_linked_workflow_fails_the_run_naming_it(
    ci_engine: CIStack, action_mirrors: Path
) -> None:
    make_action_repo(action_mirrors, "other-owner/links", {"outside/build.yml": SHARED_BUILD})
    links = action_mirrors / "other-owner/links"
    (links / ".github/workflows").mkdir(parents=True)
    (links / ".github/workflows/build.yml").symlink_to("../../outside/build.yml")
    git(links, "add", "-A")
    git(links, "commit", "-qm", "link")
    git(links, "tag", "-f", "v1")
    client = ci_engine.new_tenant()
    for uses in ("other-owner/links/.github/workflows/build.yml@v1", "other-owner/links/.github/workflows/gone.yml@v1"):
        caller = REMOTE_CALLER.replace("other-owner/shared/.github/workflows/build.yml@v1", uses)
        pushed = push_workflow(ci_engine, caller, client=client)
        run = wait_run(client, pushed.run_id)
        assert run["status"] == "failure", run
        error = run.get("error") or ""
        assert f"{WORKFLOW_PATH}:13: jobs.call.uses: called workflow {uses}: " in error, run
        assert "a regular file" in error and "a symbolic link is refused" in error, run
        assert all(not j["id"].startswith("call__") for j in run["jobs"]), run
