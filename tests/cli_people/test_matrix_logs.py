"""``leasehold runs logs RUN JOB`` on a matrix job: the matrix job has no log of its own, so the
command prints each combination's log in order, under its name; ``--follow`` names the
combinations to follow instead of waiting on a log that never comes. The API lists a matrix
job's combinations and each combination's values."""

from __future__ import annotations

import pytest

from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import push_workflow, wait_run
from tests.cli_people.conftest import Person, assert_one_line_error

pytestmark = pytest.mark.slow

WORKFLOW = """
name: matrix-logs
on: push
jobs:
  test:
    runs-on: linux
    strategy:
      matrix:
        os: [alpha, beta]
    steps:
      - run: echo "hello from ${{ matrix.os }}"
"""


def test_runs_logs_of_a_matrix_job_prints_each_combination(people_stack: CIStack) -> None:
    client = people_stack.new_tenant()
    key = client.headers["authorization"].removeprefix("Bearer ")
    me = Person(client.tenant_id, key, people_stack.base_url)  # type: ignore[attr-defined]
    pushed = push_workflow(people_stack, WORKFLOW, client=client)
    run = wait_run(client, pushed.run_id)
    assert run["status"] == "success", run
    jobs = {j["id"]: j for j in run["jobs"]}
    kids = jobs["test"]["combinations"]
    assert len(kids) == 2 and [jobs[k]["matrix"] for k in kids] == [{"os": "alpha"}, {"os": "beta"}], jobs
    assert all(jobs[k]["matrix_of"] == "test" for k in kids)

    printed = me.run("runs", "logs", pushed.run_id, "test")
    assert printed.returncode == 0, printed.stderr
    out = printed.stdout
    assert "hello from alpha" in out and "hello from beta" in out, out
    assert out.index("hello from alpha") < out.index("hello from beta"), out
    # Each combination's log is exactly what its own command prints, under its name.
    for kid in kids:
        alone = me.run("runs", "logs", pushed.run_id, kid)
        assert alone.returncode == 0 and alone.stdout and alone.stdout in out, (kid, alone.stdout)
        assert f"({kid})" in printed.stderr and jobs[kid]["name"] in printed.stderr, printed.stderr

    follow = me.run("runs", "logs", pushed.run_id, "test", "--follow")
    assert follow.returncode == 2, follow.stderr
    assert_one_line_error(follow, "matrix job", kids[0], kids[1])
