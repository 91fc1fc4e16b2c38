"""Re-run of a whole run through the API, as GitHub's "Re-run all jobs": a real push, a real CI
worker, every job (successful ones, a matrix and its dependent included) running again as the
run's next attempt; refused while the run is going, and another tenant's re-run is a 404."""

from __future__ import annotations

import pytest

from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import get_run, job, log_text, push_workflow, wait_for, wait_run

pytestmark = pytest.mark.slow

MATRIX_CHAIN = """
name: rerun
on: push
jobs:
  slow:
    runs-on: linux
    steps:
      - run: sleep 5; echo "slow attempt ${{ github.run_attempt }}"
  build:
    runs-on: linux
    strategy:
      matrix:
        py: ["3.11", "3.12"]
    steps:
      - run: echo "build ${{ matrix.py }}"
  report:
    needs: [slow, build]
    runs-on: linux
    steps:
      - run: echo "report after ${{ needs.build.result }}"
"""


def test_rerun_of_a_successful_run_runs_every_job_again(ci_engine: CIStack) -> None:
    pushed = push_workflow(ci_engine, MATRIX_CHAIN)
    client, rid = pushed.client, pushed.run_id

    # While the run is going (``slow`` sleeps), a whole re-run is refused, naming why.
    early = client.post(f"/v1/runs/{rid}/rerun")
    assert early.status_code == 409, early.text
    assert early.json()["error"]["code"] == "run_in_progress"

    run = wait_run(client, rid, timeout=120)
    assert run["status"] == "success", run
    first = {j["id"]: [a["attempt"] for a in j["attempts"]] for j in run["jobs"] if j["attempts"]}
    assert set(first) >= {"slow", "report"} and all(len(a) == 1 for a in first.values()), first

    # Another tenant cannot re-run it (the run does not exist for them).
    other = ci_engine.new_tenant()
    assert other.post(f"/v1/runs/{rid}/rerun").status_code == 404

    answer = client.post(f"/v1/runs/{rid}/rerun")
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["object"] == "ci.rerun" and body["run_id"] == rid and body["run_attempt"] == 2
    assert {"slow", "build", "report"} <= set(body["reset_jobs"]), body
    assert len([j for j in body["reset_jobs"] if j.startswith("build")]) == 3, "the matrix and both combinations"

    run = wait_for(
        "the re-run to succeed",
        lambda: (r := get_run(client, rid))["status"] == "success" and len(job(r, "report")["attempts"]) == 2 and r,
        timeout=120,
    )
    for job_id, attempts in first.items():
        again = job(run, job_id)["attempts"]
        assert [a["status"] for a in again] == ["success", "success"], (job_id, again)
        assert again[1]["attempt"] > attempts[0], (job_id, again)
    # The second attempt has its own log, and the first one's is kept.
    slow = job(run, "slow")["attempts"]
    assert "slow attempt" in log_text(client, rid, "slow", slow[0]["attempt"])
    assert "slow attempt" in log_text(client, rid, "slow", slow[1]["attempt"])
    assert get_run(client, rid)["jobs"], "the run is still readable"
