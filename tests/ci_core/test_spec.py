"""Workflow parsing: the supported subset, rejections naming file/line/key, expressions, filters."""

from __future__ import annotations

import pytest

from actions_language.parser import parse_workflow
from actions_language.schema import WorkflowSpecError
from actions_language.triggers import push_triggers
from workflows.ci.expressions import ExpressionError, StatusFunctions, evaluate_condition, interpolate
from workflows.ci.types.spec import PushFilter

FULL = """
name: Full
on:
  push:
    branches: [main]
env:
  A: 1
  ON: on
jobs:
  build:
    name: Build it
    runs-on: [linux, x64]
    timeout-minutes: 10
    continue-on-error: true
    network: true
    env:
      B: ${{ github.ref }}
    outputs:
      o: ${{ steps.s.outputs.o }}
    steps:
      - id: s
        name: step
        run: echo hi
        shell: sh
        working-directory: sub
        if: ${{ success() }}
        continue-on-error: true
        timeout-minutes: 1
        env:
          C: ${{ env.A }}
  test:
    needs: build
    if: needs.build.result == 'success'
    runs-on: linux
    steps:
      - run: echo ${{ needs.build.outputs.o }}
"""


def test_full_subset_parses() -> None:
    spec = parse_workflow("w.yml", FULL)
    assert spec.name == "Full" and spec.env == {"A": "1", "ON": "on"}
    build, test = spec.jobs
    assert build.runs_on == ["linux", "x64"] and build.timeout_minutes == 10 and build.continue_on_error
    assert build.network and build.outputs == {"o": "${{ steps.s.outputs.o }}"}
    step = build.steps[0]
    assert (step.id, step.shell, step.working_directory, step.continue_on_error, step.timeout_minutes) == (
        "s",
        "sh",
        "sub",
        True,
        1.0,
    )
    assert test.needs == ["build"] and test.steps[0].name.startswith("Run echo")


def wf(jobs: str, top: str = "on: push\n") -> str:
    return top + "jobs:\n" + jobs


@pytest.mark.parametrize(
    ("text", "line", "key", "words"),
    [
        (
            wf("  a:\n    runs-on: linux\n    steps:\n      - uses: docker://alpine:3\n"),
            6,
            "jobs.a.steps[0].uses",
            "uses",
        ),
        (
            wf(
                "  a:\n    runs-on: linux\n    services:\n      db: {image: x, options: --privileged}\n"
                "    steps:\n      - run: x\n"
            ),
            6,
            "jobs.a.services.db.options",
            "--privileged is refused",
        ),
        (
            wf("  a:\n    runs-on: linux\n    needs: ghost\n    steps:\n      - run: x\n"),
            5,
            "jobs.a.needs",
            "unknown job",
        ),
        (
            wf(
                "  a:\n    runs-on: linux\n    needs: b\n    steps:\n      - run: x\n"
                "  b:\n    runs-on: linux\n    needs: a\n    steps:\n      - run: x\n"
            ),
            10,
            "jobs.b.needs",
            "a -> b -> a",
        ),
        (
            wf("  a:\n    runs-on: linux\n    if: secrets.TOKEN == 'x'\n    steps:\n      - run: x\n"),
            5,
            "jobs.a.if",
            "secrets",
        ),
        (
            wf("  a:\n    runs-on: linux\n    steps:\n      - run: x\n        shell: pwsh\n"),
            7,
            "jobs.a.steps[0].shell",
            "shell",
        ),
        (
            wf("  a:\n    runs-on: linux\n    if: needs.b.result == 'x'\n    steps:\n      - run: x\n"),
            5,
            "jobs.a.if",
            "needs",
        ),
        (wf("  a:\n    steps:\n      - run: x\n"), 4, "jobs.a", "runs-on"),
        ("on: push\njobs:\n  a: [\n", 4, None, "invalid YAML"),
        ("on: push\npermissions: read-some\njobs: {}\n", 2, "permissions", "read-all, write-all"),
        ("on: push\njobs:\n  a:\n    runs-on: linux\n    runs-on: linux\n", 5, None, "duplicate"),
    ],
)
def test_rejections_name_file_line_and_key(text: str, line: int, key: str | None, words: str) -> None:
    with pytest.raises(WorkflowSpecError) as err:
        parse_workflow(".github/workflows/x.yml", text)
    e = err.value.error
    assert (e.file, e.line, e.key) == (".github/workflows/x.yml", line, key), e
    assert words in e.message or words in str(err.value)
    assert str(err.value).startswith(f".github/workflows/x.yml:{line}: ")


def test_expressions() -> None:
    ctx = {
        "github": {"sha": "abc", "ref": "refs/heads/main"},
        "env": {"X": "Hello"},
        "needs": {"b": {"result": "success", "outputs": {"n": "3"}}},
    }
    ok = StatusFunctions(success=True, failure=False, cancelled=False)
    bad = StatusFunctions(success=False, failure=True, cancelled=False)
    assert interpolate("${{ github.sha }}-${{ env.X }}-${{ needs.b.outputs.n }}", ctx) == "abc-Hello-3"
    assert evaluate_condition("github.ref == 'refs/heads/MAIN'", ok, ctx)  # case-insensitive
    assert evaluate_condition("needs.b.outputs.n >= 3 && env.X != 'bye'", ok, ctx)
    assert not evaluate_condition("needs.b.outputs.n > 3 || !env.X", ok, ctx)
    assert not evaluate_condition("true", bad, ctx)  # implicit success() &&
    assert evaluate_condition("failure()", bad, ctx) and evaluate_condition("always()", bad, ctx)
    assert evaluate_condition("${{ startsWith(github.ref, 'refs/heads/') && contains(env.X, 'ell') }}", ok, ctx)
    assert not evaluate_condition("cancelled()", ok, ctx)
    with pytest.raises(ExpressionError):
        evaluate_condition("github.ref ==", ok, ctx)
    with pytest.raises(ExpressionError):
        interpolate("${{ secrets.X }}", ctx)


@pytest.mark.parametrize(
    ("push", "ref", "expected"),
    [
        (PushFilter(enabled=True), "refs/heads/any", True),
        (PushFilter(enabled=False), "refs/heads/main", False),
        (PushFilter(enabled=True, branches=["main", "release/**"]), "refs/heads/release/1/2", True),
        (PushFilter(enabled=True, branches=["release/*"]), "refs/heads/release/1/2", False),
        (PushFilter(enabled=True, branches=["feature/*", "!feature/wip"]), "refs/heads/feature/wip", False),
        (PushFilter(enabled=True, branches=["feature/*", "!feature/wip"]), "refs/heads/feature/x", True),
        (PushFilter(enabled=True, branches_ignore=["docs/**"]), "refs/heads/docs/a", False),
        (PushFilter(enabled=True, branches=["main"]), "refs/tags/v1", False),
        (PushFilter(enabled=True, tags=["v[0-9]*"]), "refs/tags/v1.2", True),
        (PushFilter(enabled=True, tags=["v*"]), "refs/heads/main", False),
        (PushFilter(enabled=True, tags_ignore=["nightly"]), "refs/tags/nightly", False),
    ],
)
def test_push_filters(push: PushFilter, ref: str, expected: bool) -> None:
    assert push_triggers(push, ref) is expected


def test_on_forms() -> None:
    assert parse_workflow(
        "w", wf("  a:\n    runs-on: l\n    steps:\n      - run: x\n", "on: [push, pull_request]\n")
    ).on_push.enabled
    spec = parse_workflow("w", wf("  a:\n    runs-on: l\n    steps:\n      - run: x\n", "on: pull_request\n"))
    assert not spec.on_push.enabled


BUILTIN_ACTIONS = """
on: push
jobs:
  deploy:
    runs-on: linux
    environment: {name: production, url: https://example.invalid}
    steps:
      - uses: actions/checkout@v4
      - id: c
        uses: actions/cache@v3
        with:
          key: deps-${{ hashFiles('a.lock', '!b.lock') }}
          path: deps
"""


def test_builtin_actions_and_environment() -> None:
    spec = parse_workflow("w.yml", BUILTIN_ACTIONS)
    job = spec.jobs[0]
    assert job.environment == "production"
    assert [s.action for s in job.steps] == ["actions/checkout", "actions/cache"]
    assert job.steps[1].with_inputs == {"key": "deps-${{ hashFiles('a.lock', '!b.lock') }}", "path": "deps"}
    seen: list[list[str]] = []
    fns = StatusFunctions(hash_files=lambda patterns: seen.append(patterns) or "abc")
    assert interpolate(job.steps[1].with_inputs["key"], {}, fns) == "deps-abc"
    assert seen == [["a.lock", "!b.lock"]]
    with pytest.raises(ExpressionError, match="only available in steps"):
        interpolate("${{ hashFiles('x') }}", {}, StatusFunctions())


@pytest.mark.parametrize(
    ("step", "key", "words"),
    [
        ("- uses: actions/cache@v4\n        with: {key: k}", "jobs.a.steps[0].with.path", "needs this input"),
        ("- uses: actions/cache@v4\n        with: {key: k, path: p, lookup-only: 1}", "lookup-only", "supported"),
        ("- uses: actions/checkout", "jobs.a.steps[0].uses", "owner/repo[/path]@ref"),
        ("- uses: actions/checkout@v4\n        run: echo", "jobs.a.steps[0].run", "not both"),
    ],
)
def test_builtin_action_rejections(step: str, key: str, words: str) -> None:
    with pytest.raises(WorkflowSpecError) as caught:
        parse_workflow("w.yml", f"on: push\njobs:\n  a:\n    runs-on: linux\n    steps:\n      {step}\n")
    assert caught.value.error.key is not None and caught.value.error.key.endswith(key)
    assert words in caught.value.error.message and caught.value.error.line is not None
