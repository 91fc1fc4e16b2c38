"""A reusable workflow end to end: a real git push delivers its webhook, the listing reads the
called file from git at the commit, and the run's jobs (the caller's own and the called ones)
run in the sandbox. A called job's output reaches a job after the caller through
``on.workflow_call.outputs``; the input comes from a job before the caller; the secret the
caller passes is masked; the caller's env does not reach the called jobs. A called path that
is a symbolic link out of .github/workflows is read as git stores it (the link's text), never
followed: the run fails naming the file."""

from __future__ import annotations

import json
import os

from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import WORKFLOW_PATH, done_push, job, log_text, push_workflow, wait_for, wait_run

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
