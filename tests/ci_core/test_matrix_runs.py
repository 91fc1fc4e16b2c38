"""Matrix jobs end to end: a real commit, the real workers and sandbox, the real dev server.

One commit holds two files. ``matrix.yml``: include/exclude by GitHub's rules, ``max-parallel:
1``, ``${{ matrix.x }}`` in env, steps, step ``if`` and the name; each combination echoes its
values and a dependent job sees the aggregated result and the outputs. ``failfast.yml``: a
matrix from ``fromJSON`` over a job's output, one combination fails and fail-fast cancels the
others (one running, one held back by ``max-parallel``); an ``always()`` job sees ``failure``;
retrying the matrix job runs its failed and cancelled combinations again, then the dependent.
``exprs.yml``: ``runs-on``, ``timeout-minutes`` and ``continue-on-error`` from the matrix.
``replan.yml``: retrying the job a matrix job needs expands that matrix job again.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from temporalio.testing import WorkflowEnvironment

from clients.ci import start as ci_start
from tests.ci_core.conftest import CIStack, engine_stack
from workflows.ci.types.run import CIRunState, JobState, JobStatus, RunStatus

MATRIX = """
on: push
jobs:
  build:
    runs-on: linux
    strategy:
      max-parallel: 1
      matrix:
        os: [ubuntu, debian]
        node: [18, 20]
        exclude:
          - os: debian
            node: 18
        include:
          - os: ubuntu
            extra: yes
          - os: alpine
            node: 22
    outputs:
      last: ${{ steps.o.outputs.v }}
    env:
      NODE: ${{ matrix.node }}
    steps:
      - id: o
        run: |
          echo "combo os=${{ matrix.os }} node=$NODE extra=${{ matrix.extra }}"
          echo "index=${{ strategy.job-index }}/${{ strategy.job-total }} job=$GITHUB_JOB/${{ github.job }}/$CI_JOB"
          echo "v=${{ matrix.os }}-${{ matrix.node }}" >> "$GITHUB_OUTPUT"
      - if: ${{ matrix.os == 'alpine' }}
        run: echo only-alpine
  after:
    needs: build
    runs-on: linux
    steps:
      - run: echo "after result=${{ needs.build.result }} last=${{ needs.build.outputs.last }}"
"""

FAILFAST = """
on: push
jobs:
  plan:
    runs-on: linux
    outputs:
      m: ${{ steps.p.outputs.m }}
    steps:
      - id: p
        run: echo 'm={"v":["bad","slow","held"]}' >> "$GITHUB_OUTPUT"
  t:
    needs: plan
    name: t-${{ matrix.v }}
    runs-on: linux
    strategy:
      max-parallel: 2
      matrix: ${{ fromJSON(needs.plan.outputs.m) }}
    steps:
      - run: |
          echo "t ${{ matrix.v }} attempt $GITHUB_RUN_ATTEMPT"
          if [ "$GITHUB_RUN_ATTEMPT" = 1 ]; then
            if [ "${{ matrix.v }}" = bad ]; then sleep 1; exit 3; fi
            if [ "${{ matrix.v }}" = slow ]; then sleep 60; fi
          fi
  report:
    needs: t
    if: always()
    runs-on: linux
    steps:
      - run: echo "report t=${{ needs.t.result }}"
"""


@pytest.fixture(scope="module")
def wide_stack(temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CIStack]:
    """Room for every combination at once: what runs together is decided by the matrix
    (``max-parallel``), not by the worker's slots (their order is the server's)."""
    with engine_stack(temporal_env, tmp_path_factory.mktemp("ci"), ci_max_concurrent_jobs=6) as stack:
        yield stack


EXPRESSIONS = """
on: push
jobs:
  e:
    name: e ${{ matrix.os }}/${{ matrix.t }}
    runs-on: ${{ matrix.os }}
    timeout-minutes: ${{ matrix.t }}
    continue-on-error: ${{ matrix.experimental }}
    strategy:
      matrix:
        os: [linux]
        t: [1]
        experimental: [false]
        include:
          - os: linux
            t: 2
            experimental: true
    steps:
      - run: |
          echo "e t=${{ matrix.t }}"
          if [ "${{ matrix.experimental }}" = true ]; then exit 1; fi
"""


# plan fails after writing a three-value matrix; t (always()) expands it. Retrying plan writes
# two values: t expands again, reusing t-1 and t-2, and t-3 is no longer a combination.
REPLAN = """
on: push
jobs:
  plan:
    runs-on: linux
    outputs:
      m: ${{ steps.p.outputs.m }}
    steps:
      - id: p
        run: |
          m='{"v":[1,2]}'
          if [ "$GITHUB_RUN_ATTEMPT" = 1 ]; then m='{"v":[1,2,3]}'; fi
          echo "m=$m" >> "$GITHUB_OUTPUT"
      - run: test "$GITHUB_RUN_ATTEMPT" != 1
  t:
    needs: plan
    if: always()
    runs-on: linux
    strategy:
      matrix: ${{ fromJSON(needs.plan.outputs.m) }}
    steps:
      - run: echo "v=${{ matrix.v }}"
"""


def combinations(state: CIRunState, job_id: str) -> list[JobState]:
    parent = state.job(job_id)
    assert parent is not None
    found = [state.job(c) for c in parent.combinations]
    assert all(c is not None for c in found)
    return [c for c in found if c is not None]


def log_of(stack: CIStack, job: JobState) -> str:
    attempt = job.current_attempt()
    assert attempt is not None, job
    return stack.log_text(attempt.log_prefix)


async def test_matrix_combinations_fail_fast_and_retry(wide_stack: CIStack) -> None:
    ci_stack = wide_stack
    repo = ci_stack.repo("matrix")
    sha = repo.commit(
        {
            ".github/workflows/matrix.yml": MATRIX,
            ".github/workflows/failfast.yml": FAILFAST,
            ".github/workflows/exprs.yml": EXPRESSIONS,
            ".github/workflows/replan.yml": REPLAN,
        }
    )
    push = await ci_stack.push(repo, sha)
    runs = {r.workflow_path.rsplit("/", 1)[-1]: r.run_id for r in push.runs}
    assert sorted(runs) == ["exprs.yml", "failfast.yml", "matrix.yml", "replan.yml"], push

    # runs-on, timeout-minutes and continue-on-error from the matrix: the experimental
    # combination fails, is allowed to, and neither fails the run nor cancels its sibling.
    state = await ci_stack.wait_run(runs["exprs.yml"], within=180)
    assert state.status == RunStatus.SUCCESS, state
    kids = combinations(state, "e")
    assert [(c.name, c.runs_on, c.status, c.allowed_failure) for c in kids] == [
        ("e linux/1", ["linux"], JobStatus.SUCCESS, False),
        ("e linux/2", ["linux"], JobStatus.FAILURE, True),
    ]
    assert "e t=2" in log_of(ci_stack, kids[1])
    e = state.job("e")
    assert e is not None and e.status == JobStatus.SUCCESS

    state = await ci_stack.wait_run(runs["matrix.yml"], within=180)
    assert state.status == RunStatus.SUCCESS, state
    build = state.job("build")
    assert build is not None and build.status == JobStatus.SUCCESS
    kids = combinations(state, "build")
    # Excluded debian/18; include extended the ubuntu ones and added alpine/22.
    assert [(c.job_id, c.name, c.matrix) for c in kids] == [
        ("build-1", "build (ubuntu, 18, yes)", {"os": "ubuntu", "node": 18, "extra": "yes"}),
        ("build-2", "build (ubuntu, 20, yes)", {"os": "ubuntu", "node": 20, "extra": "yes"}),
        ("build-3", "build (debian, 20)", {"os": "debian", "node": 20}),
        ("build-4", "build (alpine, 22)", {"os": "alpine", "node": 22}),
    ]
    assert [c.status for c in kids] == [JobStatus.SUCCESS] * 4
    for i, c in enumerate(kids):
        text = log_of(ci_stack, c)
        m = c.matrix
        assert f"combo os={m['os']} node={m['node']} extra={m.get('extra', '')}\nindex={i}/4" in text, text
        assert f"job=build/build/build-{i + 1}" in text, text
        assert ("only-alpine" in text) == (m["os"] == "alpine"), text
    # max-parallel: 1 -> no two combinations ran at the same time.
    spans = sorted((c.started_at, c.finished_at) for c in kids)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end is not None and start is not None and start >= end, spans
    after = state.job("after")
    assert after is not None and after.status == JobStatus.SUCCESS
    # Outputs: the last combination to finish wins (max-parallel 1: the alpine one).
    assert "after result=success last=alpine-22" in log_of(ci_stack, after)

    run = runs["failfast.yml"]
    state = await ci_stack.wait_run(run, within=180)
    assert state.status == RunStatus.FAILURE, state
    kids = combinations(state, "t")
    # t-held never started: max-parallel held it back, fail-fast cancelled it.
    assert [c.name for c in kids] == ["t-bad", "t-slow", "t-held"]
    assert [c.status for c in kids] == [JobStatus.FAILURE, JobStatus.CANCELLED, JobStatus.CANCELLED], kids
    for c in kids[1:]:
        assert c.error == "cancelled: t-bad failed (fail-fast)", c.error
    t = state.job("t")
    assert t is not None and t.status == JobStatus.FAILURE and t.error == "1 of 3 combinations failed"
    report = state.job("report")
    assert report is not None and report.status == JobStatus.SUCCESS
    assert "report t=failure" in log_of(ci_stack, report)

    assert not kids[2].attempts, kids[2]

    # Retry of the failed combination alone: it passes now, its siblings stay cancelled, so the
    # matrix job is cancelled; its dependent runs again and sees that.
    response = await ci_start.retry_job(ci_stack.client, run, "t-1")
    assert sorted(response.reset_jobs) == ["report", "t", "t-1"], response
    state = await ci_stack.wait_run(run, within=120, until=lambda s: s.status != RunStatus.IN_PROGRESS)
    assert [c.status for c in combinations(state, "t")] == [JobStatus.SUCCESS, JobStatus.CANCELLED, JobStatus.CANCELLED]
    report = state.job("report")
    assert report is not None and "report t=cancelled" in log_of(ci_stack, report)

    # Retry of the matrix job: its failed and cancelled combinations run again, then its dependents.
    response = await ci_start.retry_job(ci_stack.client, run, "t")
    assert sorted(response.reset_jobs) == ["report", "t", "t-2", "t-3"], response
    state = await ci_stack.wait_run(run, within=180, until=lambda s: s.status == RunStatus.SUCCESS)
    assert [c.status for c in combinations(state, "t")] == [JobStatus.SUCCESS] * 3
    report = state.job("report")
    assert report is not None and "report t=success" in log_of(ci_stack, report)

    # A dependent matrix job expands again when the job it needs is retried.
    run = runs["replan.yml"]
    state = await ci_stack.wait_run(run, within=120)
    assert state.status == RunStatus.FAILURE, state
    assert [c.matrix for c in combinations(state, "t")] == [{"v": 1}, {"v": 2}, {"v": 3}]
    response = await ci_start.retry_job(ci_stack.client, run, "plan")
    assert sorted(response.reset_jobs) == ["plan", "t", "t-1", "t-2", "t-3"], response
    state = await ci_stack.wait_run(run, within=120, until=lambda s: s.status == RunStatus.SUCCESS)
    kids = combinations(state, "t")
    assert [(c.job_id, c.matrix, c.status) for c in kids] == [
        ("t-1", {"v": 1}, JobStatus.SUCCESS),
        ("t-2", {"v": 2}, JobStatus.SUCCESS),
        ("t-3", {"v": 3}, JobStatus.SKIPPED),
    ]
    assert kids[2].error == "no longer a combination of the matrix"
    assert [c.job_total for c in kids[:2]] == [2, 2]
    t = state.job("t")
    assert t is not None and t.status == JobStatus.SUCCESS
