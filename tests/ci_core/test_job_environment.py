"""The job environment, as a table of workflow files and what the parser makes of them, and one
end to end run through the real stack that checks what a job sees.

Parse side: ``defaults.run`` (workflow, job, step precedence), shells the sandbox can run,
``strategy`` (matrix/include/exclude/fromJSON/fail-fast/max-parallel), ``concurrency``,
``permissions``, ``on.push.paths``, ``on.workflow_dispatch.inputs``, ``container``/``services``;
what parses but does not run yet is refused with its line and key. Run side: the ``github``,
``runner``, ``job``, ``strategy``, ``matrix`` and ``inputs`` contexts and GitHub's variables,
``$GITHUB_EVENT_PATH`` (read-only), ``$GITHUB_STEP_SUMMARY`` (stored beside the log, masked,
capped), and a job that tries to break out through them.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import pytest

from actions_language.parser import parse_workflow
from actions_language.schema import WorkflowSpecError
from actions_language.shells import shell_argv
from activities.ci.step_runner import MAX_STEP_SUMMARY_BYTES
from clients.ci import start as ci_start
from tests.ci_core.conftest import CIStack
from workflows.ci.event import (
    MAX_EVENT_BYTES,
    bounded_event,
    event_actor,
    minimal_event,
    push_event,
    push_github_context,
)
from workflows.ci.matrix import MatrixError, expand_matrix
from workflows.ci.types.push import PullRequestInfo, PushContext, PushStatus
from workflows.ci.types.run import RunStatus
from workflows.ci.types.spec import WorkflowSpec


def wf(jobs: str, top: str = "", on: str = "on: push\n") -> str:
    return f"{on}{top}jobs:\n{jobs}"


def job(body: str = "", steps: str = "      - run: echo hi\n", name: str = "a") -> str:
    return f"  {name}:\n    runs-on: linux\n{body}    steps:\n{steps}"


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    read: Any = None
    value: Any = None
    line: int | None = None
    key: str | None = None
    words: str = ""


def shells(spec: WorkflowSpec) -> list[tuple[str, str | None]]:
    return [(s.shell, s.working_directory) for j in spec.jobs for s in j.steps]


CASES = [
    # defaults.run -----------------------------------------------------------------------------
    Case("no defaults: bash in the workspace", wf(job()), shells, [("bash", None)]),
    Case(
        "workflow defaults apply to run steps",
        wf(job(), top="defaults:\n  run:\n    shell: sh\n    working-directory: sub\n"),
        shells,
        [("sh", "sub")],
    ),
    Case(
        "job defaults override the workflow's, key by key",
        wf(
            job("    defaults:\n      run:\n        shell: python\n"),
            top="defaults:\n  run:\n    shell: sh\n    working-directory: sub\n",
        ),
        shells,
        [("python", "sub")],
    ),
    Case(
        "a step's own shell and working-directory override both",
        wf(
            job(
                "    defaults:\n      run:\n        working-directory: jobdir\n",
                "      - run: echo\n        shell: bash\n        working-directory: mine\n      - run: echo\n",
            ),
            top="defaults:\n  run:\n    shell: sh\n",
        ),
        shells,
        [("bash", "mine"), ("sh", "jobdir")],
    ),
    Case(
        "defaults do not apply to uses: steps",
        wf(job(steps="      - uses: actions/checkout@v4\n"), top="defaults:\n  run:\n    shell: sh\n"),
        lambda s: s.jobs[0].steps[0].run,
        "",
    ),
    Case(
        "a custom shell template",
        wf(job(steps="      - run: echo\n        shell: perl  -w {0}\n")),
        shells,
        [("perl  -w {0}", None)],
    ),
    Case(
        "working-directory defaults may use the job's contexts",
        wf(job("    defaults:\n      run:\n        working-directory: ${{ github.ref_name }}/x\n")),
        shells,
        [("bash", "${{ github.ref_name }}/x")],
    ),
    Case(
        "workflow defaults may not use secrets",
        wf(job(), top="defaults:\n  run:\n    working-directory: ${{ secrets.X }}\n"),
        line=4,
        key="defaults.run.working-directory",
        words="secrets",
    ),
    Case(
        "defaults only hold run",
        wf(job(), top="defaults:\n  shell: bash\n"),
        line=3,
        key="defaults.shell",
        words="unsupported key",
    ),
    Case(
        "defaults.run only holds shell and working-directory",
        wf(job("    defaults:\n      run:\n        env: x\n")),
        line=7,
        key="jobs.a.defaults.run.env",
        words="unsupported key",
    ),
    Case(
        "pwsh cannot run here",
        wf(job(steps="      - run: echo\n        shell: pwsh\n")),
        line=7,
        key="jobs.a.steps[0].shell",
        words="cannot run",
    ),
    Case(
        "powershell in defaults cannot run here either",
        wf(job(), top="defaults:\n  run:\n    shell: powershell\n"),
        line=4,
        key="defaults.run.shell",
        words="cannot run",
    ),
    Case(
        "a custom shell needs {0}",
        wf(job(steps="      - run: echo\n        shell: perl -w\n")),
        line=7,
        key="jobs.a.steps[0].shell",
        words="{0}",
    ),
    Case(
        "a custom shell's command is a plain program name",
        wf(job(steps="      - run: echo\n        shell: $(evil) {0}\n")),
        line=7,
        key="jobs.a.steps[0].shell",
        words="unsupported shell",
    ),
    Case(
        "no expressions in shell",
        wf(job(steps="      - run: echo\n        shell: ${{ github.sha }} {0}\n")),
        line=7,
        key="jobs.a.steps[0].shell",
        words="expressions",
    ),
    # strategy -----------------------------------------------------------------------------------
    Case(
        "a matrix parses fully",
        wf(
            job(
                "    strategy:\n      fail-fast: false\n      max-parallel: 2\n      matrix:\n"
                "        os: [linux, mac]\n        v: [1, 2.5]\n        include: [{os: linux, extra: e}]\n"
                "        exclude: [{os: mac, v: 1}]\n"
            )
        ),
        lambda s: s.jobs[0].strategy.model_dump(exclude={"line"}),
        {
            "axes": {"os": ["linux", "mac"], "v": [1, 2.5]},
            "include": [{"os": "linux", "extra": "e"}],
            "exclude": [{"os": "mac", "v": 1}],
            "matrix_expression": None,
            "fail_fast": False,
            "max_parallel": 2,
        },
    ),
    Case(
        "fromJSON in an axis, in include and for the whole matrix",
        wf(
            job("    strategy:\n      matrix: ${{ fromJSON(needs.a.outputs.m) }}\n", name="b").replace(
                "runs-on", "needs: a\n    runs-on"
            )
            + job(
                '    strategy:\n      matrix:\n        os: ${{ fromJSON(\'["x","y"]\') }}\n'
                "        include: ${{ fromJSON('[]') }}\n",
                name="c",
            )
            + job()
        ),
        lambda s: (s.jobs[0].strategy.matrix_expression, s.jobs[1].strategy.axes, s.jobs[1].strategy.include),
        ("${{ fromJSON(needs.a.outputs.m) }}", {"os": '${{ fromJSON(\'["x","y"]\') }}'}, "${{ fromJSON('[]') }}"),
    ),
    Case(
        "matrix runs are accepted without opting in",
        wf(job("    strategy:\n      matrix:\n        os: [a]\n")),
        lambda s: s.jobs[0].strategy.axes,
        {"os": ["a"]},
    ),
    Case(
        "a parse error in a matrix file is still reported as such",
        wf(job("    strategy:\n      matrix:\n        os: [a]\n", steps="      - run: ''\n")),
        line=9,
        key="jobs.a.steps[0].run",
        words="empty",
    ),
    Case(
        "an empty axis",
        wf(job("    strategy:\n      matrix:\n        os: []\n")),
        line=7,
        key="jobs.a.strategy.matrix.os",
        words="at least one value",
    ),
    Case(
        "an axis that is a plain string",
        wf(job("    strategy:\n      matrix:\n        os: linux\n")),
        line=7,
        key="jobs.a.strategy.matrix.os",
        words="single ${{ }} expression",
    ),
    Case(
        "text around the expression is not an expression",
        wf(job("    strategy:\n      matrix: x-${{ fromJSON('{}') }}\n")),
        line=6,
        key="jobs.a.strategy.matrix",
        words="single ${{ }} expression",
    ),
    Case(
        "no axis and no include",
        wf(job("    strategy:\n      matrix:\n        exclude: [{a: 1}]\n")),
        line=6,
        key="jobs.a.strategy.matrix",
        words="at least one axis",
    ),
    Case(
        "exclude naming no axis",
        wf(job("    strategy:\n      matrix:\n        os: [a]\n        exclude: [{arch: x}]\n")),
        line=6,
        key="jobs.a.strategy.matrix.exclude",
        words="not an axis",
    ),
    Case(
        "everything excluded",
        wf(job("    strategy:\n      matrix:\n        os: [a]\n        exclude: [{os: a}]\n")),
        line=6,
        key="jobs.a.strategy.matrix",
        words="no combinations",
    ),
    Case(
        "more than 256 combinations",
        wf(
            job(
                "    strategy:\n      matrix:\n        a: "
                + str(list(range(20)))
                + "\n        b: "
                + str(list(range(20)))
                + "\n"
            )
        ),
        line=6,
        key="jobs.a.strategy.matrix",
        words="at most 256",
    ),
    Case(
        "include must be a list of mappings",
        wf(job("    strategy:\n      matrix:\n        os: [a]\n        include: [a]\n")),
        line=8,
        key="jobs.a.strategy.matrix.include",
        words="list of mappings",
    ),
    Case(
        "max-parallel must be positive",
        wf(job("    strategy:\n      max-parallel: 0\n      matrix:\n        os: [a]\n")),
        line=6,
        key="jobs.a.strategy.max-parallel",
        words="positive",
    ),
    Case(
        "fail-fast must be a boolean or an expression",
        wf(job("    strategy:\n      fail-fast: maybe\n      matrix:\n        os: [a]\n")),
        line=6,
        key="jobs.a.strategy.fail-fast",
        words="true or false",
    ),
    Case(
        "a strategy cannot read secrets",
        wf(job("    strategy:\n      matrix:\n        os: ${{ fromJSON(secrets.X) }}\n")),
        line=7,
        key="jobs.a.strategy.matrix.os",
        words="secrets",
    ),
    Case(
        "steps may read matrix, strategy and inputs",
        wf(job(steps="      - run: echo ${{ matrix.os }} ${{ strategy.job-index }} ${{ inputs.level }}\n")),
        lambda s: s.jobs[0].steps[0].run,
        "echo ${{ matrix.os }} ${{ strategy.job-index }} ${{ inputs.level }}",
    ),
    Case(
        "a job's if reads inputs (the run evaluates them there)",
        wf(job("    if: inputs.deploy\n")),
        lambda s: s.jobs[0].if_expr,
        "inputs.deploy",
    ),
    Case(
        "a job's if cannot read secrets",
        wf(job("    if: secrets.TOKEN\n")),
        line=5,
        key="jobs.a.if",
        words="not available",
    ),
    # concurrency ------------------------------------------------------------------------------
    Case(
        "workflow concurrency as a string",
        wf(job(), top="concurrency: ci-${{ github.ref }}\n"),
        lambda s: (s.concurrency.group, s.concurrency.cancel_in_progress),
        ("ci-${{ github.ref }}", False),
    ),
    Case(
        "job concurrency as a mapping",
        wf(job("    concurrency:\n      group: deploy\n      cancel-in-progress: ${{ github.ref != 'main' }}\n")),
        lambda s: (s.jobs[0].concurrency.group, s.jobs[0].concurrency.cancel_in_progress),
        ("deploy", "${{ github.ref != 'main' }}"),
    ),
    Case(
        "workflow concurrency is accepted without opting in",
        wf(job(), top="concurrency: g\n"),
        lambda s: s.concurrency.group,
        "g",
    ),
    Case(
        "job concurrency is accepted without opting in",
        wf(job("    concurrency: g\n")),
        lambda s: s.jobs[0].concurrency.group,
        "g",
    ),
    Case(
        "a concurrency mapping needs a group",
        wf(job("    concurrency:\n      cancel-in-progress: true\n")),
        line=5,
        key="jobs.a.concurrency.group",
        words="needs 'group'",
    ),
    Case(
        "an empty concurrency group",
        wf(job(), top="concurrency: ''\n"),
        line=2,
        key="concurrency",
        words="empty",
    ),
    Case(
        "workflow concurrency cannot read needs",
        wf(job(), top="concurrency: ${{ needs.a.result }}\n"),
        line=2,
        key="concurrency",
        words="not available",
    ),
    # permissions ------------------------------------------------------------------------------
    Case("read-all", wf(job(), top="permissions: read-all\n"), lambda s: s.permissions, "read-all"),
    Case(
        "scopes at job level",
        wf(job("    permissions:\n      contents: read\n      id-token: write\n      issues: none\n")),
        lambda s: s.jobs[0].permissions,
        {"contents": "read", "id-token": "write", "issues": "none"},
    ),
    Case("an empty mapping", wf(job(), top="permissions: {}\n"), lambda s: s.permissions, {}),
    Case(
        "an unknown scope",
        wf(job(), top="permissions:\n  everything: write\n"),
        line=3,
        key="permissions.everything",
        words="unknown permission scope",
    ),
    Case(
        "an unknown level",
        wf(job(), top="permissions:\n  contents: admin\n"),
        line=3,
        key="permissions.contents",
        words="read, write",
    ),
    Case(
        "id-token cannot be read",
        wf(job(), top="permissions:\n  id-token: read\n"),
        line=3,
        key="permissions.id-token",
        words="none, write",
    ),
    # on.push.paths ----------------------------------------------------------------------------
    Case(
        "paths parse into the push filter",
        wf(job(), on="on:\n  push:\n    branches: [main]\n    paths: ['src/**', '!src/docs/**']\n"),
        lambda s: (s.on_push.paths, s.on_push.paths_ignore, s.on_push.branches),
        (["src/**", "!src/docs/**"], None, ["main"]),
    ),
    Case(
        "paths-ignore parses",
        wf(job(), on="on:\n  push:\n    paths-ignore: docs/**\n"),
        lambda s: s.on_push.paths_ignore,
        ["docs/**"],
    ),
    Case(
        "path filters are accepted (pushes are filtered by them)",
        wf(job(), on="on:\n  push:\n    paths-ignore: docs/**\n"),
        lambda s: s.on_push.paths_ignore,
        ["docs/**"],
    ),
    Case(
        "paths with paths-ignore",
        wf(job(), on="on:\n  push:\n    paths: [a]\n    paths-ignore: [b]\n"),
        line=4,
        key="on.push.paths-ignore",
        words="together",
    ),
    # workflow_dispatch ------------------------------------------------------------------------
    Case(
        "workflow_dispatch inputs of every type",
        wf(
            job(),
            on="on:\n  push:\n  workflow_dispatch:\n    inputs:\n"
            "      level:\n        type: choice\n        options: [low, high]\n        default: high\n"
            "      dry:\n        type: boolean\n        default: false\n        required: true\n"
            "      n:\n        type: number\n        default: 3\n"
            "      env:\n        type: environment\n"
            "      note:\n        description: free text\n",
        ),
        lambda s: {k: v.model_dump() for k, v in s.on_dispatch.inputs.items()},
        {
            "level": {
                "type": "choice",
                "description": "",
                "required": False,
                "default": "high",
                "options": ["low", "high"],
            },
            "dry": {"type": "boolean", "description": "", "required": True, "default": False, "options": []},
            "n": {"type": "number", "description": "", "required": False, "default": 3.0, "options": []},
            "env": {"type": "environment", "description": "", "required": False, "default": None, "options": []},
            "note": {"type": "string", "description": "free text", "required": False, "default": None, "options": []},
        },
    ),
    Case("workflow_dispatch alone", wf(job(), on="on: workflow_dispatch\n"), lambda s: s.on_dispatch.inputs, {}),
    Case("no workflow_dispatch", wf(job()), lambda s: s.on_dispatch, None),
    Case(
        "an unknown input type",
        wf(job(), on="on:\n  workflow_dispatch:\n    inputs:\n      x:\n        type: file\n"),
        line=5,
        key="on.workflow_dispatch.inputs.x.type",
        words="supported types",
    ),
    Case(
        "a choice without options",
        wf(job(), on="on:\n  workflow_dispatch:\n    inputs:\n      x:\n        type: choice\n"),
        line=5,
        key="on.workflow_dispatch.inputs.x.options",
        words="options",
    ),
    Case(
        "a choice default outside its options",
        wf(
            job(),
            on="on:\n  workflow_dispatch:\n    inputs:\n      x:\n        type: choice\n        options: [a]\n"
            "        default: b\n",
        ),
        line=7,
        key="on.workflow_dispatch.inputs.x.default",
        words="not one of the options",
    ),
    Case(
        "a boolean default that is not a boolean",
        wf(job(), on="on:\n  workflow_dispatch:\n    inputs:\n      x:\n        type: boolean\n        default: yes\n"),
        line=6,
        key="on.workflow_dispatch.inputs.x.default",
        words="true or false",
    ),
    Case(
        "a number default that is not a number",
        wf(job(), on="on:\n  workflow_dispatch:\n    inputs:\n      x:\n        type: number\n        default: .inf\n"),
        line=6,
        key="on.workflow_dispatch.inputs.x.default",
        words="finite number",
    ),
    Case(
        "input names are case-insensitive",
        wf(job(), on="on:\n  workflow_dispatch:\n    inputs:\n      x:\n      X:\n"),
        line=5,
        key="on.workflow_dispatch.inputs.X",
        words="duplicate",
    ),
    Case(
        "more than 25 inputs",
        wf(job(), on="on:\n  workflow_dispatch:\n    inputs:\n" + "".join(f"      i{n}:\n" for n in range(26))),
        line=3,
        key="on.workflow_dispatch.inputs",
        words="at most 25",
    ),
    # container and services -------------------------------------------------------------------
    Case(
        "container: an image name",
        wf(job("    container: node:20\n")),
        lambda spec: spec.jobs[0].container.image,
        "node:20",
    ),
    Case(
        "services: health options parsed",
        wf(
            job(
                "    services:\n      DB:\n        image: postgres\n"
                "        options: --health-cmd 'pg_isready -q' --health-interval=2s\n"
            )
        ),
        lambda spec: (list(spec.jobs[0].services), spec.jobs[0].services["db"].health_cmd),
        (["db"], "pg_isready -q"),
    ),
    Case(
        "container --privileged is refused",
        wf(job("    container:\n      image: node:20\n      options: --privileged\n")),
        line=7,
        key="jobs.a.container.options",
        words="--privileged is refused",
    ),
    Case(
        "services host mounts are refused",
        wf(job("    services:\n      db:\n        image: postgres\n        volumes: [/etc:/etc]\n")),
        line=8,
        key="jobs.a.services.db.volumes",
        words="host mounts are refused",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_job_environment_parsing(case: Case) -> None:
    path = ".github/workflows/env.yml"
    if case.line is None and case.key is None:
        spec = parse_workflow(path, case.text)
        assert case.read(spec) == case.value
        return
    with pytest.raises(WorkflowSpecError) as err:
        parse_workflow(path, case.text)
    e = err.value.error
    assert (e.file, e.line, e.key) == (path, case.line, case.key), e.render()
    assert case.words in e.message, e.render()


@pytest.mark.parametrize(
    ("shell", "argv"),
    [
        ("bash", ["bash", "--noprofile", "--norc", "-eo", "pipefail", "/s"]),
        ("sh", ["sh", "-e", "/s"]),
        ("python", ["python3", "/s"]),
        ("perl -w {0}", ["perl", "-w", "/s"]),
        ("bash -x {0} --flag", ["bash", "-x", "/s", "--flag"]),
        ("perl  -w   {0}", ["perl", "-w", "/s"]),
        # numpy's: a quoted argument is one argument, as GitHub's runner splits it.
        (
            'script -q -e -c "bash --noprofile --norc -eo pipefail {0}"',
            ["script", "-q", "-e", "-c", "bash --noprofile --norc -eo pipefail /s"],
        ),
        # The .NET rules: \" is a quote, "" inside quotes one quote, 2n backslashes before a
        # quote are n, other backslashes literal, single quotes ordinary.
        (r"sh -c \"x {0}", ["sh", "-c", '"x', "/s"]),
        (r'sh -c "a""b" {0}', ["sh", "-c", 'a"b', "/s"]),
        (r'sh -c \\"a b" {0}', ["sh", "-c", "\\a b", "/s"]),
        (r"sh -c a\\b {0}", ["sh", "-c", r"a\\b", "/s"]),
        ("sh -c 'echo it' {0}", ["sh", "-c", "'echo", "it'", "/s"]),
    ],
)
def test_shell_argv(shell: str, argv: list[str]) -> None:
    assert shell_argv(shell, "/s") == argv


@pytest.mark.parametrize(
    ("axes", "include", "exclude", "expected"),
    [
        ({"a": [1, 2], "b": ["x"]}, [], [], [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]),
        # A partial exclude removes every combination it matches; 1 and 1.0 are the same number.
        ({"a": [1, 2], "b": ["x", "y"]}, [], [{"a": 1.0}], [{"a": 2, "b": "x"}, {"a": 2, "b": "y"}]),
        # Include extends the combinations whose original values it keeps, else adds its own.
        (
            {"os": ["l", "m"]},
            [{"os": "l", "extra": 1}, {"os": "w"}, {"extra": 2}],
            [],
            [{"os": "l", "extra": 2}, {"os": "m", "extra": 2}, {"os": "w"}],
        ),
        ({}, [{"only": "include"}], [], [{"only": "include"}]),
        # true is not 1.
        ({"a": [True, 1]}, [], [{"a": 1}], [{"a": True}]),
    ],
)
def test_expand_matrix(
    axes: dict[str, list[Any]], include: list[dict[str, Any]], exclude: list[dict[str, Any]], expected: list[Any]
) -> None:
    assert expand_matrix(axes, include, exclude) == expected


def test_expand_matrix_refuses_huge_products_without_building_them() -> None:
    with pytest.raises(MatrixError):
        expand_matrix({f"a{i}": list(range(10)) for i in range(12)})


def test_the_event_is_bounded_and_names_the_actor() -> None:
    payload = {
        "ref": "refs/heads/main",
        "sender": {"login": "octocat"},
        "commits": [{"message": "m" * 5000, "added": [f"f{i}" for i in range(1000)]} for _ in range(500)],
        "head_commit": {"message": "x" * 100_000},
        "deep": {"a": {"b": {"c": {"d": {"e": {"f": {"g": 1}}}}}}},
    }
    event = bounded_event(payload)
    assert len(json.dumps(event)) <= MAX_EVENT_BYTES
    assert event["ref"] == "refs/heads/main" and event["sender"] == {"login": "octocat"}
    assert len(event["head_commit"]["message"]) == 1024
    assert event_actor(payload) == "octocat"
    assert event_actor({"pusher": {"name": "pushy"}}) == "pushy"
    assert event_actor({"sender": "not a mapping"}) == ""
    assert minimal_event("push", "refs/heads/x", "abc", "o/r", "me")["repository"]["owner"] == {"login": "o"}


JOBENV = """
name: jobenv
on: push
defaults:
  run:
    shell: sh
jobs:
  env:
    runs-on: linux
    defaults:
      run:
        working-directory: sub
    steps:
      - name: workflow shell, job working directory
        run: |
          test "$(basename "$PWD")" = sub && echo "cwd-ok"
          test -z "$BASH_VERSION" && echo "sh-ok"
      - name: python from defaults overridden per step
        shell: python
        working-directory: .
        run: |
          import os, sys
          print("py-ok", sys.version_info[0], os.path.basename(os.getcwd()))
      - name: a custom shell
        shell: bash -x {0}
        run: echo custom-ok
      - name: a shell the sandbox lacks fails its step, not the worker
        shell: no-such-shell {0}
        continue-on-error: true
        run: echo never
      - name: contexts
        shell: bash
        run: |
          echo "actor=${{ github.actor }}/$GITHUB_ACTOR"
          echo "event=${{ github.event_name }} ref=${{ github.event.ref }} pusher=${{ github.event.pusher.name }}"
          echo "sha=${{ github.sha }}/$GITHUB_SHA"
          echo "ref=${{ github.ref }} name=${{ github.ref_name }} repo=${{ github.repository }}"
          echo "run=${{ github.run_id }}/$GITHUB_RUN_ID number=${{ github.run_number }}/$GITHUB_RUN_NUMBER"
          echo "attempt=${{ github.run_attempt }}/$GITHUB_RUN_ATTEMPT ws=${{ github.workspace }}"
          echo "runner=${{ runner.os }}/$RUNNER_OS arch=${{ runner.arch }}/$RUNNER_ARCH"
          echo "name=${{ runner.name }}/$RUNNER_NAME temp=${{ runner.temp }}/$RUNNER_TEMP"
          echo "tools=${{ runner.tool_cache }}/$RUNNER_TOOL_CACHE"
          echo "job=${{ job.status }} container=${{ toJSON(job.container) }} services=${{ toJSON(job.services) }}"
          echo "matrix=${{ toJSON(matrix) }} strategy=${{ toJSON(strategy) }} inputs=${{ toJSON(inputs) }}"
      - name: the event file
        shell: bash
        run: |
          python3 - <<'PY'
          import json, os
          e = json.load(open(os.environ["GITHUB_EVENT_PATH"]))
          print("event-file", e["ref"], e["sender"]["login"])
          PY
          if (echo '{}' > "$GITHUB_EVENT_PATH") 2>/dev/null; then echo "EVENT-WRITABLE"; fi
          if rm -f "$GITHUB_EVENT_PATH" 2>/dev/null && test ! -e "$GITHUB_EVENT_PATH"; then echo "EVENT-REMOVED"; fi
      - name: summaries
        shell: bash
        run: |
          echo "## Results of ${{ github.job }}" >> "$GITHUB_STEP_SUMMARY"
          echo "::add-mask::summary-secret-31337"
          echo "hidden: summary-secret-31337" >> "$GITHUB_STEP_SUMMARY"
          # The summary file cannot be swapped for a link to a host file.
          if ln -sf /etc/hostname "$GITHUB_STEP_SUMMARY" 2>/dev/null; then echo "SUMMARY-RELINKED"; fi
      - name: an oversized summary is dropped
        shell: bash
        run: head -c 1100000 /dev/zero | tr '\\0' 'x' >> "$GITHUB_STEP_SUMMARY"
      - name: a second summary
        shell: bash
        run: echo "second step summary" >> "$GITHUB_STEP_SUMMARY"
"""


async def test_the_job_environment_end_to_end(ci_stack: CIStack) -> None:
    repo = ci_stack.repo("jobenv")
    (repo.path / "sub").mkdir()
    sha = repo.commit({".github/workflows/env.yml": JOBENV, "sub/.keep": ""})
    event = {"ref": "refs/heads/main", "after": sha, "sender": {"login": "octocat"}, "pusher": {"name": "octo"}}
    inp = ci_stack.push_input(repo, sha).model_copy(update={"actor": "octocat", "event_payload": event})
    pid = await ci_start.start_push(ci_stack.client, inp)
    deadline = time.monotonic() + 60
    while (push := await ci_start.push_state(ci_stack.client, pid)).status == PushStatus.LISTING:
        assert time.monotonic() < deadline, push
        await asyncio.sleep(0.2)
    state = await ci_stack.wait_run(push.runs[0].run_id)
    job = state.job("env")
    assert job is not None
    attempt = job.current_attempt()
    assert attempt is not None and attempt.log is not None
    text = ci_stack.log_text(attempt.log_prefix)
    assert state.status == RunStatus.SUCCESS, text
    ws = "/ci/work"
    expected = [
        "cwd-ok",
        "sh-ok",
        "py-ok 3 work",
        "+ echo custom-ok",
        "failed to execute no-such-shell",
        "step 4 failed with exit code 127",
        "actor=octocat/octocat",
        "event=push ref=refs/heads/main pusher=octo",
        f"sha={sha}/{sha}",
        f"ref=refs/heads/main name=main repo=acme/{repo.path.name}",
        f"run={state.run_id}/{state.run_id} number=1/1",
        f"attempt={attempt.attempt}/{attempt.attempt} ws={ws}",
        "runner=Linux/Linux arch=X64/X64",
        "temp=/ci/tmp//ci/tmp",
        "tools=/ci/home/tool-cache//ci/home/tool-cache",
        "job=success container={} services={}",
        "matrix={} strategy={} inputs={}",
        "event-file refs/heads/main octocat",
        "over 1048576 bytes; it was not kept",
    ]
    for line in expected:
        assert line in text, (line, text)
    for attack in ("EVENT-WRITABLE", "EVENT-REMOVED", "SUMMARY-RELINKED"):
        assert attack not in text, text
    assert "name=leasehold-" in text and "leasehold-" in text.split("name=leasehold-", 1)[1].split("/", 1)[1]
    assert attempt.log.summary_key == attempt.log_prefix + "summary.md"
    summary = ci_stack.store.get(attempt.log.summary_key).decode()
    assert summary == "## Results of env\nhidden: ***\nsecond step summary\n", summary
    assert MAX_STEP_SUMMARY_BYTES == 1 << 20


def test_the_github_context_of_a_push_without_a_webhook() -> None:
    base = {
        "tenant_id": "t",
        "repo_id": "r",
        "repo_full_name": "acme/app",
        "clone_url": "/x",
        "commit_sha": "a" * 40,
    }
    push = PushContext(**base, ref="refs/heads/main")  # type: ignore[arg-type]
    github = push_github_context(push, "run_1", "ci")
    # A reconciled push has no sender: the repository owner stands in.
    assert (github["actor"], github["event_name"], github["ref_name"]) == ("acme", "push", "main")
    assert github["event"]["after"] == "a" * 40 and github["event"]["repository"]["full_name"] == "acme/app"

    pr = PushContext(
        **base,  # type: ignore[arg-type]
        ref="refs/pull/7/head",
        event="pull_request",
        actor="mallory",
        pull_request=PullRequestInfo(number=7, head_ref="feat", base_ref="main", head_repo="m/f", base_repo="acme/app"),
        inputs={"level": "high"},
    )
    github = push_github_context(pr, "run_2", "ci")
    assert (github["actor"], github["event_name"], github["head_ref"], github["base_ref"]) == (
        "mallory",
        "pull_request",
        "feat",
        "main",
    )
    assert github["event"]["pull_request"]["head"] == {"ref": "feat", "sha": "a" * 40, "repo": {"full_name": "m/f"}}
    assert github["event"]["number"] == 7 and github["event"]["inputs"] == {"level": "high"}
    assert push_event(pr.model_copy(update={"event_payload": {"given": True}})) == {"given": True}
