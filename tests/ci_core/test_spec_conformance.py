"""GitHub's workflow parsing rules, as a table: each case is a small file and what GitHub does
with it (accept, with the value it reads; or refuse, with the line and key we must name).

Written from GitHub's documented behaviour (workflow syntax, expressions, contexts, limits):
ids are case-insensitive and ``__`` is reserved; anchors and aliases are read (GitHub accepts
them since 2025-09-18), merge keys are not, and an alias bomb fails; an empty ``if:`` is
``success()``; text around ``${{ }}`` in ``if:`` is a string template; ``}}`` inside a string
literal does not close an expression; expressions hold at most 21,000 characters; numbers and
booleans print as GitHub prints them; a huge ``timeout-minutes`` is accepted. Where leasehold
reads less than GitHub, the case says so: an ``environment:`` name's expressions may use only what
the push's listing knows (its protection rules travel with the run from the push), while
``environment.url`` takes GitHub's contexts for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from actions_language.parser import parse_workflow
from actions_language.schema import MAX_TIMEOUT_MINUTES, WorkflowSpecError
from workflows.ci.expressions import StatusFunctions, evaluate_condition, interpolate
from workflows.ci.types.spec import WorkflowSpec


def wf(jobs: str, top: str = "") -> str:
    return f"on: push\n{top}jobs:\n{jobs}"


def job(body: str = "", steps: str = "      - run: echo hi\n", name: str = "a") -> str:
    return f"  {name}:\n    runs-on: linux\n{body}    steps:\n{steps}"


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    # Accepted: a function of the spec returning the value to compare with ``value``.
    read: Any = None
    value: Any = None
    # Refused: (line, key) the error must name, and a fragment of the message.
    line: int | None = None
    key: str | None = None
    message: str = ""


CASES = [
    # Per-file robustness: numbers GitHub accepts.
    Case(
        "timeout +999..9",
        wf(job("    timeout-minutes: +" + "9" * 400 + "\n")),
        lambda s: s.jobs[0].timeout_minutes,
        float(MAX_TIMEOUT_MINUTES),
    ),
    Case(
        "timeout 1e400",
        wf(job("    timeout-minutes: 1e400\n")),
        lambda s: s.jobs[0].timeout_minutes,
        float(MAX_TIMEOUT_MINUTES),
    ),
    Case(
        "timeout .nan",
        wf(job("    timeout-minutes: .nan\n")),
        line=5,
        key="jobs.a.timeout-minutes",
        message="positive number",
    ),
    # YAML tags a value does not fit: an error at the line, not a crash.
    Case("!!bool tag", wf(job().replace("runs-on: linux", "runs-on: !!bool test")), line=4, message="bool value"),
    Case("!!int tag", wf(job().replace("runs-on: linux", "runs-on: !!int x")), line=4, message="int value"),
    Case("!!float tag", wf(job().replace("runs-on: linux", "runs-on: !!float y")), line=4, message="float value"),
    # Anchors and aliases are read as GitHub reads them (since 2025-09-18); merge keys are not.
    Case("anchor", wf(job(), top="env: &shared\n  A: 1\n"), lambda s: s.env, {"A": "1"}),
    Case("alias", "on: push\nenv:\n  A: &x 1\n  B: *x\njobs:\n" + job(), lambda s: s.env, {"A": "1", "B": "1"}),
    Case(
        "aliased steps",
        "on: push\njobs:\n  a:\n    runs-on: linux\n    steps: &s\n      - run: echo one\n"
        "  b:\n    runs-on: linux\n    steps: *s\n",
        lambda s: [st.run for st in s.jobs[1].steps],
        ["echo one"],
    ),
    Case(
        "merge key",
        "on: push\nenv: &e\n  A: 1\njobs:\n  a:\n    runs-on: linux\n    env:\n      <<: *e\n"
        "    steps:\n      - run: echo hi\n",
        line=8,
        message="merge keys",
    ),
    Case(
        "alias bomb",
        "on: push\nenv:\n  A: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"  {chr(66 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(6))
        + "jobs:\n"
        + job(),
        line=7,
        message="aliases expand to more than 100000 nodes",
    ),
    Case("recursive alias", "on: push\nenv: &r\n  A: *r\njobs:\n" + job(), line=2, message="contains it"),
    # A strategy without a matrix (fail-fast or max-parallel alone): one job, as on GitHub.
    Case(
        "strategy without matrix",
        wf(job("    strategy:\n      fail-fast: false\n      max-parallel: 3\n")),
        lambda s: (len(s.jobs), s.jobs[0].strategy),
        (1, None),
    ),
    Case(
        "strategy without matrix, bad max-parallel",
        wf(job("    strategy:\n      max-parallel: 0\n")),
        line=6,
        key="jobs.a.strategy.max-parallel",
        message="positive",
    ),
    # A step's timeout-minutes and continue-on-error may be one ${{ }} (evaluated when it starts).
    Case(
        "step timeout expression",
        wf(job(steps="      - run: a\n        timeout-minutes: ${{ matrix.t || 5 }}\n")),
        lambda s: (s.jobs[0].steps[0].timeout_minutes, s.jobs[0].steps[0].timeout_minutes_expr),
        (None, "${{ matrix.t || 5 }}"),
    ),
    Case(
        "step continue-on-error expression",
        wf(job(steps="      - uses: actions/checkout@v4\n        continue-on-error: ${{ runner.os == 'Linux' }}\n")),
        lambda s: s.jobs[0].steps[0].continue_on_error_expr,
        "${{ runner.os == 'Linux' }}",
    ),
    Case(
        "step limit with secrets",
        wf(job(steps="      - run: a\n        continue-on-error: ${{ secrets.X != '' }}\n")),
        line=7,
        key="jobs.a.steps[0].continue-on-error",
        message="secrets",
    ),
    Case(
        "step limit with text around",
        wf(job(steps="      - run: a\n        timeout-minutes: 1${{ 0 }}\n")),
        line=7,
        key="jobs.a.steps[0].timeout-minutes",
        message="single ${{ }} expression",
    ),
    # run-name: the run's title, over github, inputs and vars.
    Case(
        "run-name",
        wf(job(), top="run-name: Deploy ${{ inputs.env }} by @${{ github.actor }}\n"),
        lambda s: s.run_name,
        "Deploy ${{ inputs.env }} by @${{ github.actor }}",
    ),
    Case(
        "run-name with secrets",
        wf(job(), top="run-name: ${{ secrets.TOKEN }}\n"),
        line=2,
        key="run-name",
        message="secrets",
    ),
    # Object filters in expressions.
    Case(
        "labels.*.name",
        wf(job("    if: contains(github.event.pull_request.labels.*.name, 'ci')\n")),
        lambda s: s.jobs[0].if_expr,
        "contains(github.event.pull_request.labels.*.name, 'ci')",
    ),
    Case(
        "filter without a base",
        wf(job("    if: contains(*.name, 'ci')\n")),
        line=5,
        key="jobs.a.if",
        message="'*'",
    ),
    # Environment variable names: any name without '=' (GitHub takes 'root-env').
    Case("env name with -", wf(job(), top="env:\n  root-env: x\n"), lambda s: s.env, {"root-env": "x"}),
    Case("env name with =", wf(job(), top="env:\n  'a=b': x\n"), line=3, key="env.a=b", message="'='"),
    # Number and boolean coercion as GitHub prints them.
    Case(
        "env numbers",
        wf(job(), top="env:\n  I: 1\n  F: 1.0\n  G: 1.5\n  B: true\n  N: 0x10\n"),
        lambda s: s.env,
        {"I": "1", "F": "1", "G": "1.5", "B": "true", "N": "16"},
    ),
    Case(
        "env yaml 1.1 words stay strings",
        wf(job(), top="env:\n  Y: yes\n  O: off\n"),
        lambda s: s.env,
        {"Y": "yes", "O": "off"},
    ),
    # if: empty or null means success(); with and without ${{ }}.
    Case("if empty", wf(job("    if: ''\n")), lambda s: s.jobs[0].if_expr, None),
    Case("if null", wf(job("    if: null\n")), lambda s: s.jobs[0].if_expr, None),
    Case(
        "if bare",
        wf(job("    if: github.ref == 'refs/heads/main'\n")),
        lambda s: s.jobs[0].if_expr,
        "github.ref == 'refs/heads/main'",
    ),
    Case(
        "if wrapped",
        wf(job("    if: ${{ github.ref == 'refs/heads/main' }}\n")),
        lambda s: s.jobs[0].if_expr,
        " github.ref == 'refs/heads/main' ",
    ),
    Case(
        "if with text around",
        wf(job("    if: ${{ false }} && true\n")),
        lambda s: s.jobs[0].if_expr,
        "format('{0} && true', ( false ))",
    ),
    Case(
        "step if null",
        wf(job(steps="      - run: echo\n        if: null\n")),
        lambda s: s.jobs[0].steps[0].if_expr,
        None,
    ),
    # Expressions: '}}' inside a string literal; the 21,000-character limit.
    Case(
        "}} in a string",
        wf(job(steps="      - run: echo \"${{ 'a}}b' }}\"\n")),
        lambda s: s.jobs[0].steps[0].run,
        "echo \"${{ 'a}}b' }}\"",
    ),
    Case(
        "expression too long",
        wf(job(steps="      - run: echo ${{ '" + "a" * 21_000 + "' }}\n")),
        line=6,
        key="jobs.a.steps[0].run",
        message="21000",
    ),
    Case(
        "unterminated",
        wf(job(steps="      - run: echo ${{ github.sha\n")),
        line=6,
        key="jobs.a.steps[0].run",
        message="unterminated",
    ),
    Case(
        "nesting limit",
        wf(job(steps="      - run: echo ${{ " + "(" * 60 + "1" + ")" * 60 + " }}\n")),
        line=6,
        message="50",
    ),
    # environment: '' means none.
    Case("environment empty", wf(job("    environment: ''\n")), lambda s: s.jobs[0].environment, None),
    # environment: a name, or {name, url}. GitHub allows expressions in both. The url takes them
    # over the contexts GitHub lists for it; a name's are evaluated when the push is listed (its
    # protection rules travel with the run from there), so it may use github, vars and inputs,
    # and a context known only at run time (needs, strategy, matrix) is refused as unsupported.
    Case("environment name", wf(job("    environment: production\n")), lambda s: s.jobs[0].environment, "production"),
    Case(
        "environment url expression",
        wf(job("    environment:\n      name: production\n      url: ${{ steps.deploy.outputs.url }}\n")),
        lambda s: s.jobs[0].environment,
        "production",
    ),
    Case(
        "environment url over vars, matrix, needs",
        wf(
            job(name="build")
            + job(
                "    needs: build\n    strategy:\n      matrix:\n        region: [eu]\n"
                "    environment:\n      name: production\n"
                "      url: https://${{ matrix.region }}.${{ vars.DOMAIN }}/${{ needs.build.outputs.path }}\n",
                name="deploy",
            )
        ),
        lambda s: s.jobs[1].environment,
        "production",
    ),
    Case(
        "environment url without secrets",
        wf(job("    environment:\n      name: production\n      url: ${{ secrets.URL }}\n")),
        line=7,
        key="jobs.a.environment.url",
        message="'secrets' is not available",
    ),
    Case(
        "environment url unterminated",
        wf(job("    environment:\n      name: production\n      url: ${{ job.status\n")),
        line=7,
        key="jobs.a.environment.url",
        message="unterminated",
    ),
    Case(
        "environment url not text",
        wf(job("    environment:\n      name: production\n      url: [a]\n")),
        line=7,
        key="jobs.a.environment.url",
        message="must be a string",
    ),
    Case(
        "environment name expression",
        wf(job("    environment: ${{ github.ref_name == 'main' && 'production' || 'staging' }}\n")),
        lambda s: (s.jobs[0].environment, s.jobs[0].environment_expression.key),
        (None, "jobs.a.environment"),
    ),
    Case(
        "environment.name expression",
        wf(job("    environment:\n      url: https://example.com\n      name: ${{ vars.TARGET }}\n")),
        lambda s: (s.jobs[0].environment_expression.text, s.jobs[0].environment_expression.line),
        ("${{ vars.TARGET }}", 7),
    ),
    Case(
        "environment name over inputs",
        wf(job("    environment: deploy-${{ inputs.target }}\n")),
        lambda s: s.jobs[0].environment_expression.text,
        "deploy-${{ inputs.target }}",
    ),
    Case(
        "environment name matrix expression",
        wf(job("    strategy:\n      matrix:\n        env: [a, b]\n    environment: ${{ matrix.env }}\n")),
        line=8,
        key="jobs.a.environment",
        message="context 'matrix' in an environment name is not supported here: it would be known only at run time",
    ),
    Case(
        "environment name over needs",
        wf(job(name="build") + job("    needs: build\n    environment: ${{ needs.build.outputs.env }}\n", name="b")),
        line=10,
        key="jobs.b.environment",
        message="context 'needs' in an environment name is not supported here",
    ),
    Case(
        "environment.name over strategy",
        wf(job("    environment:\n      name: e${{ strategy.job-index }}\n")),
        line=6,
        key="jobs.a.environment.name",
        message="context 'strategy' in an environment name is not supported here",
    ),
    Case(
        "environment name over github.job",
        wf(job("    environment: ${{ github.job }}\n")),
        line=5,
        key="jobs.a.environment",
        message="github.job in an environment name is not supported here",
    ),
    Case(
        "environment name over secrets",
        wf(job("    environment: ${{ secrets.ENV }}\n")),
        line=5,
        key="jobs.a.environment",
        message="'secrets' is not available here",
    ),
    Case(
        "environment name unterminated",
        wf(job("    environment: ${{ vars.X\n")),
        line=5,
        key="jobs.a.environment",
        message="unterminated",
    ),
    Case(
        "environment name written out, bad",
        wf(job("    environment: prod eu\n")),
        line=5,
        key="jobs.a.environment",
        message="letters, digits",
    ),
    Case(
        "environment other key",
        wf(job("    environment:\n      name: production\n      deploy: true\n")),
        line=7,
        key="jobs.a.environment.deploy",
        message="supported: name, url",
    ),
    # Ids: case-insensitive, '__' reserved.
    Case(
        "job ids differ in case",
        wf(job(name="MY-JOB") + job(name="my-job")),
        line=7,
        key="jobs.my-job",
        message="case-insensitive",
    ),
    Case(
        "needs in another case",
        wf(job(name="Build") + job("    needs: build\n", name="test")),
        lambda s: s.jobs[1].needs,
        ["Build"],
    ),
    Case(
        "step ids differ in case",
        wf(job(steps="      - id: S\n        run: a\n      - id: s\n        run: b\n")),
        line=8,
        key="jobs.a.steps[1].id",
        message="case-insensitive",
    ),
    Case("job id __", wf(job(name="__a")), line=3, key="jobs.__a", message="reserved"),
    Case(
        "step id __",
        wf(job(steps="      - id: __s\n        run: a\n")),
        line=6,
        key="jobs.a.steps[0].id",
        message="reserved",
    ),
    # Disabled workflow commands are refused at push time, not silently ignored; the deprecated
    # ``::set-output`` still works on GitHub (with a warning), so it is accepted.
    Case(
        "::set-output",
        wf(job(steps="      - run: echo '::set-output name=a::b'\n")),
        lambda s: s.jobs[0].steps[0].run,
        "echo '::set-output name=a::b'",
    ),
    Case(
        "::set-env",
        wf(job(steps="      - run: echo '::set-env name=a::b'\n")),
        line=6,
        key="jobs.a.steps[0].run",
        message="$GITHUB_ENV",
    ),
    # Deep nesting is an error, not a RecursionError.
    Case("deep nesting", "on: push\njobs: " + "[" * 3000 + "]" * 3000 + "\n", line=2, message="nesting"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_github_rule(case: Case) -> None:
    if case.read is not None:
        spec = parse_workflow("w.yml", case.text)
        assert isinstance(spec, WorkflowSpec)
        assert case.read(spec) == case.value
        return
    with pytest.raises(WorkflowSpecError) as err:
        parse_workflow("w.yml", case.text)
    assert err.value.error.file == "w.yml"
    assert err.value.error.line == case.line, err.value.error.render()
    if case.key is not None:
        assert err.value.error.key == case.key, err.value.error.render()
    assert case.message in err.value.error.message, err.value.error.render()


DEPLOY = """on:
  workflow_call:
    inputs:
      target: {type: string, required: true}
jobs:
  deploy:
    runs-on: linux
    environment: ${{ inputs.target }}
    steps:
      - run: echo
"""


def test_environment_named_by_an_input_of_a_called_workflow() -> None:
    """``environment: ${{ inputs.target }}`` in a reusable workflow is the caller's ``with``: a
    written-out name (a written-out matrix's values included) is that name when the file is read;
    an expression over what the listing knows stays one, for the listing to evaluate; one over
    the caller's ``needs`` is known only at run time and is refused at the called file's line."""
    called = {".github/workflows/deploy.yml": DEPLOY}.get
    caller = (
        "on: push\njobs:\n  setup:\n    runs-on: linux\n    steps: [{{run: x}}]\n"
        "  go:\n    needs: setup\n    strategy:\n      matrix:\n        env: [eu, us]\n"
        "    uses: ./.github/workflows/deploy.yml\n    with:\n      target: {}\n"
    )
    spec = parse_workflow(".github/workflows/ci.yml", caller.format("production"), called)
    assert [(j.id, j.environment) for j in spec.jobs[1:]] == [
        ("go-1__deploy", "production"),
        ("go-2__deploy", "production"),
    ]
    spec = parse_workflow(".github/workflows/ci.yml", caller.format("prod-${{ matrix.env }}"), called)
    assert [j.environment for j in spec.jobs[1:]] == ["prod-eu", "prod-us"]
    spec = parse_workflow(".github/workflows/ci.yml", caller.format("${{ github.ref_name }}"), called)
    written = spec.jobs[1].environment_expression
    assert spec.jobs[1].environment is None and written is not None
    assert (written.text, written.file, written.line, written.key) == (
        "${{ github.ref_name }}",
        ".github/workflows/deploy.yml",
        8,
        "jobs.deploy.environment",
    )
    with pytest.raises(WorkflowSpecError) as err:
        parse_workflow(".github/workflows/ci.yml", caller.format("${{ needs.setup.outputs.env }}"), called)
    error = err.value.error
    assert (error.file, error.line, error.key) == (".github/workflows/deploy.yml", 8, "jobs.deploy.environment")
    assert "context 'needs' in an environment name is not supported here" in error.message


OK = StatusFunctions()
FAILED = StatusFunctions(success=False, failure=True)

CONDITIONS = [
    # (if text, status, expected): text around ${{ }} is a non-empty string, so always truthy
    # (and still gated by success(), having no status function).
    ("${{ false }} && true", OK, True),
    ("${{ false }}", OK, False),
    ("false", OK, False),
    ("${{ false }} && true", FAILED, False),
    ("${{ always() }}", FAILED, True),
    ("github.ref == 'REFS/HEADS/MAIN'", OK, True),  # strings compare case-insensitively
]


@pytest.mark.parametrize(("text", "status", "expected"), CONDITIONS)
def test_if_conditions_evaluate_as_github(text: str, status: StatusFunctions, expected: bool) -> None:
    assert evaluate_condition(text, status, {"github": {"ref": "refs/heads/main"}}) is expected


FUNCTIONS = [
    ("${{ format('{0}-{1}', 'a', 2) }}", "a-2"),
    ("${{ format('{{0}} {0}', 'x') }}", "{0} x"),
    ("${{ join(fromJSON('[1, 2, 3]'), '+') }}", "1+2+3"),
    ('${{ join(fromJSON(\'["a", "b"]\')) }}', "a,b"),
    ("${{ toJSON(fromJSON('{\"a\": 1}')) }}", '{\n  "a": 1\n}'),
    ("${{ fromJSON('true') && 'yes' }}", "yes"),
    ("x ${{ 'a}}b' }} y", "x a}}b y"),
    ("${{ 'it''s' }}", "it's"),
]


@pytest.mark.parametrize(("text", "expected"), FUNCTIONS)
def test_functions_and_literals(text: str, expected: str) -> None:
    assert interpolate(text, {}) == expected


EVENT = {
    "event": {
        "pull_request": {"labels": [{"name": "bug"}, {"name": "Skip-CI"}, {"color": "red"}]},
        "commits": [{"files": ["a", "b"]}, {"files": ["c"]}],
    }
}
NEEDS = {"lint": {"result": "success"}, "test": {"result": "failure", "outputs": {"x": "1"}}}
FILTERS = [
    # Object filters: every element (or value), then each one's property where it has one.
    ("${{ toJSON(github.event.pull_request.labels.*.name) }}", '[\n  "bug",\n  "Skip-CI"\n]'),
    ("${{ contains(github.event.pull_request.labels.*.name, 'skip-ci') }}", "true"),
    ("${{ join(needs.*.result, ',') }}", "success,failure"),
    ("${{ join(needs[*].result) }}", "success,failure"),
    ("${{ contains(needs.*.result, 'cancelled') }}", "false"),
    # A filter of a filter flattens one level.
    ("${{ join(github.event.commits.*.files.*, '') }}", "abc"),
    ("${{ join(github.event.commits.*.files[0], '') }}", "ac"),
    # A filter of something that is neither array nor object is empty.
    ("${{ toJSON(github.event.missing.*.name) }}", "[]"),
    ("${{ toJSON(needs.*.outputs.x) }}", '[\n  "1"\n]'),
]


@pytest.mark.parametrize(("text", "expected"), FILTERS)
def test_object_filters(text: str, expected: str) -> None:
    assert interpolate(text, {"github": EVENT, "needs": NEEDS}) == expected
