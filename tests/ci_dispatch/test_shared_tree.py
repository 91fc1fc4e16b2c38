"""Checkouts of one commit: a job that vandalises its checkout (overwrites, appends, deletes,
renames, chmods, plants links) changes nothing another job of the same commit sees, and its mount
table names no mirror or shared tree of the host (each checkout is the commit's git archive,
unpacked by the job-side helper as the job). Real bubblewrap sandboxes on a real CI worker."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from tests.ci_core.conftest import CIStack
from workflows.ci.types.run import JobStatus, RunStatus

pytestmark = pytest.mark.slow

WORKFLOW_PATH = ".github/workflows/ci.yml"
FILES = {
    "README.md": "the original readme\n",
    "src/lib.txt": "library v1\n",
    "delete-me.txt": "still here\n",
    "keep.txt": "not moved\n",
}

# Every job prints the digest of the files as it found them, so the witness can be compared.
DIGEST = "sha256sum README.md src/lib.txt delete-me.txt keep.txt; ls -la; stat -c '%a %U' src"

WORKFLOW = f"""
on: push
jobs:
  vandal:
    runs-on: linux
    steps:
      - run: |
          {DIGEST}
          echo pwned > README.md
          echo more >> src/lib.txt
          rm -f delete-me.txt
          mv keep.txt moved.txt
          chmod 000 src
          touch planted
          ln -s /etc/passwd src-link || true
          # No host path of a mirror or a shared tree is in the job's mount table.
          grep -E 'mirrors|trees|lowerdir|upperdir' /proc/self/mountinfo && echo "MOUNTS NAME THE HOST"
          echo vandal done
  witness:
    needs: vandal
    runs-on: linux
    steps:
      - run: |
          {DIGEST}
          test ! -e planted && test ! -e moved.txt && test ! -e src-link
          echo witness done
"""


def digest_lines(files: dict[str, str]) -> list[str]:
    return [f"{hashlib.sha256(text.encode()).hexdigest()}  {name}" for name, text in files.items()]


async def test_a_job_cannot_change_the_tree_other_jobs_of_its_commit_see(dispatch_stack: CIStack) -> None:
    stack = dispatch_stack
    repo = stack.repo(f"shared-{time.monotonic_ns()}")
    sha = repo.commit({**FILES, WORKFLOW_PATH: WORKFLOW})
    pushed = await stack.push(repo, sha)
    (ref,) = pushed.runs
    state = await stack.wait_run(ref.run_id, within=120)
    assert state.status == RunStatus.SUCCESS, state
    vandal, witness = state.job("vandal"), state.job("witness")
    assert vandal is not None and witness is not None and witness.status == JobStatus.SUCCESS

    vandal_log = stack.log_text(vandal.attempts[-1].log_prefix)
    witness_log = stack.log_text(witness.attempts[-1].log_prefix)
    assert "vandal done" in vandal_log and "witness done" in witness_log
    assert "MOUNTS NAME THE HOST" not in vandal_log, vandal_log
    for line in digest_lines(FILES):
        # The vandal found the commit's files, and the witness after it found them unchanged.
        assert line in vandal_log and line in witness_log, (line, witness_log)

    # No tree of the commit was unpacked on the host by the worker.
    assert not (Path(stack.settings.data_dir) / "ci" / "mirrors" / "trees").exists()
