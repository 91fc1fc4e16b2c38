"""Runs end to end on real processes: git mirror, parsing at the commit, DAG, outputs, logs."""

from __future__ import annotations

import json

from tests.ci_core.conftest import CIStack
from workflows.ci.ids import log_end_key, run_id
from workflows.ci.types.job import AttemptStatus, LogEnd
from workflows.ci.types.run import JobStatus, RunStatus

CHAIN = """
name: chain
on:
  push:
    branches: [main]
env:
  GREETING: hello
jobs:
  build:
    runs-on: linux
    outputs:
      artifact: ${{ steps.make.outputs.artifact }}
    steps:
      - name: make
        id: make
        run: |
          echo "building $GITHUB_SHA on $GITHUB_REF for $GITHUB_REPOSITORY"
          test -f README.md
          echo "artifact=build-${{ github.sha }}" >> "$GITHUB_OUTPUT"
  test:
    needs: build
    runs-on: [linux]
    env:
      ART: ${{ needs.build.outputs.artifact }}
    steps:
      - run: |
          echo "$GREETING $ART"
          echo "key=$CI_IDEMPOTENCY_KEY attempt=$CI_ATTEMPT job=$CI_JOB run=$CI_RUN_ID ci=$CI"
          test "$ART" = "build-$GITHUB_SHA"
"""

FAILING = """
on: push
jobs:
  a:
    runs-on: linux
    steps:
      - run: echo about to fail; exit 3
      - run: echo never
  b:
    needs: a
    runs-on: linux
    steps:
      - run: echo must not run
  report:
    needs: [a]
    if: always()
    runs-on: linux
    steps:
      - run: echo "a was ${{ needs.a.result }}"
  on_failure:
    needs: a
    if: failure()
    runs-on: linux
    steps:
      - run: echo failure handler
"""

UNSUPPORTED = """
on: push
jobs:
  a:
    runs-on: linux
    steps:
      - uses: docker://alpine:3
"""

OTHER_BRANCH = """
on:
  push:
    branches: ['release/**']
jobs:
  a:
    runs-on: linux
    steps:
      - run: echo release
"""


async def test_push_creates_one_run_per_file_chain_failure_and_rejection(ci_stack: CIStack) -> None:
    repo = ci_stack.repo("multi")
    sha = repo.commit(
        {
            "README.md": "hi\n",
            ".github/workflows/chain.yml": CHAIN,
            ".github/workflows/failing.yaml": FAILING,
            ".github/workflows/unsupported.yml": UNSUPPORTED,
            ".github/workflows/release.yml": OTHER_BRANCH,
            ".github/workflows/notes.txt": "not a workflow",
        }
    )
    push = await ci_stack.push(repo, sha)
    paths = sorted(r.workflow_path for r in push.runs)
    assert paths == [
        ".github/workflows/chain.yml",
        ".github/workflows/failing.yaml",
        ".github/workflows/unsupported.yml",
    ]
    assert push.not_triggered == [".github/workflows/release.yml"]
    runs = {r.workflow_path.rsplit("/", 1)[-1]: r.run_id for r in push.runs}
    assert runs["chain.yml"] == run_id(repo.repo_id, sha, ".github/workflows/chain.yml")

    # The same push again, and the same commit on another ref: no second run.
    again = await ci_stack.push(repo, sha)
    other_ref = await ci_stack.push(repo, sha, ref="refs/heads/feature")
    # A redelivery maps onto the same push workflow: same answer, nothing new started.
    assert again == push
    assert {r.run_id for r in other_ref.runs} <= set(runs.values())
    assert all(not r.created for r in other_ref.runs)

    chain = await ci_stack.wait_run(runs["chain.yml"])
    assert chain.status == RunStatus.SUCCESS, chain
    build, test = chain.job("build"), chain.job("test")
    assert build is not None and test is not None
    assert build.outputs == {"artifact": f"build-{sha}"}
    assert test.status == JobStatus.SUCCESS and test.attempt == 1
    assert test.started_at is not None and build.finished_at is not None and test.started_at >= build.finished_at
    attempt = test.current_attempt()
    assert attempt is not None and attempt.status == AttemptStatus.SUCCESS and attempt.exit_code == 0
    text = ci_stack.log_text(attempt.log_prefix)
    assert f"hello build-{sha}" in text
    assert f"key={chain.run_id}/test attempt=1 job=test run={chain.run_id} ci=true" in text
    end = LogEnd.model_validate(json.loads(ci_stack.store.get(log_end_key(attempt.log_prefix))))
    assert end.gaps == [] and end.next_seq == attempt.log.next_seq if attempt.log else False

    failing = await ci_stack.wait_run(runs["failing.yaml"])
    assert failing.status == RunStatus.FAILURE
    statuses = {j.job_id: j.status for j in failing.jobs}
    assert statuses == {
        "a": JobStatus.FAILURE,
        "b": JobStatus.SKIPPED,
        "report": JobStatus.SUCCESS,
        "on_failure": JobStatus.SUCCESS,
    }
    a = failing.job("a")
    assert a is not None and a.exit_code == 3
    assert a.current_attempt().steps[1].status.value == "skipped"  # type: ignore[union-attr]
    report = failing.job("report")
    assert report is not None
    assert "a was failure" in ci_stack.log_text(report.current_attempt().log_prefix)  # type: ignore[union-attr]

    bad = await ci_stack.wait_run(runs["unsupported.yml"])
    assert bad.status == RunStatus.FAILURE
    assert bad.error is not None
    assert bad.error.startswith(".github/workflows/unsupported.yml:7: jobs.a.steps[0].uses:"), bad.error
