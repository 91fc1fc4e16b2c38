"""Workflow files as people write them for GitHub, end to end on real processes.

One commit holds a good file that leans on GitHub's job environment ($GITHUB_PATH, $GITHUB_ENV,
github.workspace, env names with '-', numbers printed as GitHub prints them, if: with text
around ${{ }}, format/join/fromJSON, a huge timeout-minutes), a bad file (a YAML tag its value
does not fit), and a file GitHub's parser cases accept. The bad file fails its own run with
its precise error; the others are not held back by it.
"""

from __future__ import annotations

from tests.ci_core.conftest import CIStack
from workflows.ci.types.run import JobStatus, RunStatus

GOOD = """
name: compat
on: push
env:
  root-env: from-root
  ONE: 1.0
jobs:
  Build:
    runs-on: linux
    timeout-minutes: +99999999999999999999999999999999999999999999999999999999999999999999999999999999
    steps:
      - name: add a tool to PATH
        run: |
          mkdir -p "$HOME/bin"
          printf '#!/bin/sh\\necho tool-ran\\n' > "$HOME/bin/mytool"
          chmod +x "$HOME/bin/mytool"
          echo "$HOME/bin" >> "$GITHUB_PATH"
          echo "FROM_ENV=carried" >> "$GITHUB_ENV"
      - name: use them
        if: ${{ github.ref == 'refs/heads/main' }} && this text makes it a template
        run: |
          mytool
          echo "env=$FROM_ENV one=$ONE"
          env | grep -q '^root-env=from-root$' && echo dash-env-ok
          test "${{ github.workspace }}" = "$GITHUB_WORKSPACE" && test "$PWD" = "${{ github.workspace }}" && echo ws-ok
          echo "${{ format('{0}-{1}', join(fromJSON('[1,2]'), '+'), '}}') }}"
  test:
    needs: build
    if: ''
    runs-on: linux
    steps:
      - run: echo "needs-ok ${{ needs.BUILD.result }}"
"""

BAD = """
on: push
jobs:
  a:
    runs-on: !!bool test
    steps:
      - run: echo never
"""


async def test_a_bad_file_fails_alone_and_github_job_environment_works(ci_stack: CIStack) -> None:
    repo = ci_stack.repo("compat")
    sha = repo.commit({"README.md": "hi\n", ".github/workflows/good.yml": GOOD, ".github/workflows/bad.yml": BAD})
    push = await ci_stack.push(repo, sha)
    runs = {r.workflow_path.rsplit("/", 1)[-1]: r.run_id for r in push.runs}
    assert sorted(runs) == ["bad.yml", "good.yml"], push

    bad = await ci_stack.wait_run(runs["bad.yml"])
    assert bad.status == RunStatus.FAILURE
    assert bad.error == ".github/workflows/bad.yml:5: invalid YAML: cannot read bool value 'test'", bad.error

    good = await ci_stack.wait_run(runs["good.yml"])
    assert good.status == RunStatus.SUCCESS, good
    build, test = good.job("Build"), good.job("test")
    assert build is not None and test is not None and test.status == JobStatus.SUCCESS
    attempt = build.current_attempt()
    assert attempt is not None
    text = ci_stack.log_text(attempt.log_prefix)
    for expected in ("tool-ran", "env=carried one=1", "dash-env-ok", "ws-ok", "1+2-}}"):
        assert expected in text, text
    test_attempt = test.current_attempt()
    assert test_attempt is not None
    assert "needs-ok success" in ci_stack.log_text(test_attempt.log_prefix)


# What real repositories' files use that GitHub accepts: anchors and aliases, a strategy with no
# matrix, object filters, step-level ${{ }} in timeout-minutes and continue-on-error, and the
# deprecated ::set-output (honoured, with GitHub's warning); ``python`` on the PATH and a custom
# shell with a quoted argument (numpy's).
ADOPTED = """
name: adopted
on: push
env: &shared
  SHARED: from-anchor
jobs:
  first:
    runs-on: linux
    strategy:
      fail-fast: false
      max-parallel: 2
    outputs:
      legacy: ${{ steps.old.outputs.legacy }}
      both: ${{ steps.old.outputs.both }}
    steps:
      - id: old
        run: |
          echo "::set-output name=legacy::from-command"
          echo "::set-output name=both::from-command"
          echo "both=from-file" >> "$GITHUB_OUTPUT"
      - name: limits from expressions
        timeout-minutes: ${{ fromJSON('1') }}
        continue-on-error: ${{ github.ref == 'refs/heads/main' }}
        run: exit 3
      - run: echo "after-tolerated-failure"
      - run: python -c "print('python-is', 'here')"
      - shell: 'bash -c "bash --noprofile --norc -eo pipefail {0}"'
        run: echo "quoted-shell-ran"
  second:
    needs: first
    runs-on: linux
    env: *shared
    if: ${{ !contains(needs.*.result, 'failure') }}
    steps:
      - run: |
          echo "shared=$SHARED"
          echo "legacy=${{ needs.first.outputs.legacy }} both=${{ needs.first.outputs.both }}"
          echo "results=${{ join(needs.*.result, ',') }}"
"""


async def test_syntax_real_repositories_use_runs_as_on_github(ci_stack: CIStack) -> None:
    repo = ci_stack.repo("adopted")
    sha = repo.commit({".github/workflows/adopted.yml": ADOPTED})
    push = await ci_stack.push(repo, sha)
    assert len(push.runs) == 1, push
    state = await ci_stack.wait_run(push.runs[0].run_id)
    assert state.status == RunStatus.SUCCESS, state
    first, second = state.job("first"), state.job("second")
    assert first is not None and second is not None
    assert second.status == JobStatus.SUCCESS, second
    first_attempt, second_attempt = first.current_attempt(), second.current_attempt()
    assert first_attempt is not None and second_attempt is not None
    first_log = ci_stack.log_text(first_attempt.log_prefix)
    assert "after-tolerated-failure" in first_log, first_log
    # ``python`` as on GitHub's images (python3 here), and a quoted custom shell split as GitHub does.
    assert "python-is here" in first_log and "quoted-shell-ran" in first_log, first_log
    # The step whose continue-on-error was an expression failed and was tolerated.
    steps = {s.index: s for s in first_attempt.steps}
    assert steps[1].outcome.value == "failure" and steps[1].status.value == "success", steps[1]
    warnings = [a.message for a in steps[0].annotations]
    assert len(warnings) == 1 and warnings[0].startswith("The `set-output` command is deprecated"), warnings
    text = ci_stack.log_text(second_attempt.log_prefix)
    assert "shared=from-anchor" in text, text
    assert "legacy=from-command both=from-file" in text, text
    assert "results=success" in text, text
