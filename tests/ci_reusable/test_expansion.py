"""Reusable workflows expanded where the file is read: the jobs a call becomes, what their
expressions mean (inputs typed and defaulted, secrets passed or inherited, outputs, the caller's
matrix), what the run decides with them, and the refusals (types, required, cycles, depth,
paths that leave .github/workflows, other repositories without an actions source)."""

from __future__ import annotations

from typing import Any

import pytest

from actions_language.expansion import MAX_CALL_DEPTH
from actions_language.expression_rewrite import to_source
from actions_language.parser import parse_workflow
from actions_language.schema import WorkflowSpecError
from workflows.ci.expressions import StatusFunctions, evaluate_condition, interpolate
from workflows.ci.expressions import parse as parse_expr
from workflows.ci.types.spec import JobSpec, WorkflowSpec

LIB = """
on:
  workflow_call:
    inputs:
      greeting: {type: string, required: true}
      loud: {type: boolean, default: false}
      times: {type: number, default: 2}
    secrets:
      token: {required: false}
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
      - run: echo "token=${{ secrets.token }} loud=${{ inputs.loud }}"
  after:
    needs: say
    if: always()
    runs-on: linux
    steps:
      - run: echo ${{ needs.say.outputs.word }}
"""

CALLER = """
on: push
env:
  ROOT_ENV: root
jobs:
  setup:
    runs-on: linux
    outputs:
      v: ${{ steps.a.outputs.v }}
    steps:
      - id: a
        run: echo v=1 >> "$GITHUB_OUTPUT"
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

PATH = ".github/workflows/ci.yml"


def parse(text: str, **files: str) -> WorkflowSpec:
    contents = {f".github/workflows/{name}": body.encode() for name, body in files.items()}
    return parse_workflow(PATH, text, contents.get)


def refused(text: str, **files: str) -> WorkflowSpecError:
    with pytest.raises(WorkflowSpecError) as info:
        parse(text, **files)
    return info.value


def jobs_of(spec: WorkflowSpec) -> dict[str, JobSpec]:
    return {j.id: j for j in spec.jobs}


def decide(job: JobSpec, results: dict[str, str], cancelled: bool = False) -> bool:
    """The job's ``if:`` as the run decides it, with these results of the jobs it needs."""
    needs = {n: {"result": results[n], "outputs": {}} for n in job.needs}
    ancestors_ok = all(r == "success" for r in results.values()) and not cancelled
    status = StatusFunctions(success=ancestors_ok, failure="failure" in results.values(), cancelled=cancelled)
    return evaluate_condition(job.if_expr, status, {"needs": needs, "github": {}})


def test_a_call_becomes_the_called_jobs_named_as_github_names_them() -> None:
    spec = parse(CALLER, **{"lib.yml": LIB})
    jobs = jobs_of(spec)
    assert list(jobs) == ["setup", "call__say", "call__after", "report"]
    say, after, report = jobs["call__say"], jobs["call__after"], jobs["report"]
    assert (say.name, after.name) == ("call / say", "call / after")
    # Into the called workflow: its first job waits for the caller's needs; out of it, the
    # caller's dependents wait for every job the call became.
    assert say.needs == ["setup"]
    assert set(after.needs) == {"call__say", "setup"}
    assert set(report.needs) >= {"call__say", "call__after"}
    # inputs: the caller's with (an expression over its needs), defaults typed.
    assert say.steps[0].run == ('echo "word=${{ format(\'hi-{0}\', needs.setup.outputs.v) }}x2" >> "$GITHUB_OUTPUT"')
    assert say.steps[1].run == 'echo "token=${{ secrets.DEPLOY }} loud=true"'
    assert after.steps[0].run == "echo ${{ needs.call__say.outputs.word }}"
    # The secret the caller passed is the one the job fetches; nothing else.
    assert say.secrets == ["DEPLOY"] and after.secrets == []
    # The called file's env replaces the caller's for its jobs; the caller's own keep theirs.
    assert say.workflow_env == {"LIB_ENV": "lib-${{ format('hi-{0}', needs.setup.outputs.v) }}"}
    assert jobs["setup"].workflow_env is None and spec.env == {"ROOT_ENV": "root"}


def test_the_called_outputs_reach_a_job_after_the_caller() -> None:
    report = jobs_of(parse(CALLER, **{"lib.yml": LIB}))["report"]
    context = {
        "needs": {
            "call__say": {"result": "success", "outputs": {"word": "hi-1x2"}},
            "call__after": {"result": "success", "outputs": {}},
            "setup": {"result": "success", "outputs": {"v": "1"}},
        }
    }
    assert interpolate(report.steps[0].run, context) == 'echo "said=hi-1x2 result=success"'
    context["needs"]["call__after"]["result"] = "failure"
    assert interpolate(report.steps[0].run, context) == 'echo "said=hi-1x2 result=failure"'


def test_conditions_decide_as_in_a_run_of_the_called_workflow() -> None:
    lib = LIB.replace("  say:\n    runs-on: linux", "  say:\n    if: github.event_name == 'never'\n    runs-on: linux")
    jobs = jobs_of(parse(CALLER, **{"lib.yml": lib}))
    say, after, report = jobs["call__say"], jobs["call__after"], jobs["report"]
    assert decide(say, {"setup": "success"}) is False
    # A called job skipped by its own if does not fail the call: the caller's dependents run,
    # and the called always() job runs.
    assert decide(after, {"setup": "success", "call__say": "skipped"}) is True
    assert decide(report, {"setup": "success", "call__say": "skipped", "call__after": "success"}) is True
    # The caller's needs failed: no called job runs, always() ones included (the call is skipped).
    assert decide(after, {"setup": "failure", "call__say": "skipped"}) is False
    assert decide(report, {"setup": "failure", "call__say": "skipped", "call__after": "skipped"}) is False
    # A failed called job fails the call for its dependents.
    assert decide(report, {"setup": "success", "call__say": "failure", "call__after": "success"}) is False


def test_a_caller_if_false_skips_every_called_job() -> None:
    caller = CALLER.replace("    uses: ./.github", "    if: needs.setup.outputs.v == 'go'\n    uses: ./.github")
    jobs = jobs_of(parse(caller, **{"lib.yml": LIB}))
    after = jobs["call__after"]
    needs: dict[str, Any] = {n: {"result": "success", "outputs": {"v": "stop"}} for n in after.needs}
    assert not evaluate_condition(after.if_expr, StatusFunctions(), {"needs": needs})
    needs["setup"] = {"result": "success", "outputs": {"v": "go"}}
    assert evaluate_condition(after.if_expr, StatusFunctions(), {"needs": needs})


def test_secrets_inherit_passes_the_callers_and_none_passes_nothing() -> None:
    inherit = CALLER.replace("    secrets:\n      token: ${{ secrets.DEPLOY }}\n", "    secrets: inherit\n")
    say = jobs_of(parse(inherit, **{"lib.yml": LIB}))["call__say"]
    assert say.steps[1].run == 'echo "token=${{ secrets.token }} loud=true"' and say.secrets == ["TOKEN"]
    none = CALLER.replace("    secrets:\n      token: ${{ secrets.DEPLOY }}\n", "")
    say = jobs_of(parse(none, **{"lib.yml": LIB}))["call__say"]
    assert say.steps[1].run == 'echo "token= loud=true"' and say.secrets == []


def test_a_matrix_caller_calls_once_per_combination() -> None:
    caller = """
on: push
jobs:
  call:
    strategy:
      matrix:
        who: [ann, bob]
    uses: ./.github/workflows/lib.yml
    with:
      greeting: ${{ matrix.who }}
      times: 3
"""
    jobs = jobs_of(parse(caller, **{"lib.yml": LIB}))
    assert list(jobs) == ["call-1__say", "call-1__after", "call-2__say", "call-2__after"]
    assert jobs["call-2__say"].name == "call (bob) / say"
    assert jobs["call-1__say"].steps[0].run == 'echo "word=annx3" >> "$GITHUB_OUTPUT"'
    assert jobs["call-2__after"].needs == ["call-2__say"]


def test_nested_calls_inherit_through_every_level() -> None:
    middle = """
on:
  workflow_call:
    inputs:
      name: {type: string, default: mid}
    outputs:
      said: {value: "${{ jobs.inner.outputs.said }}"}
jobs:
  inner:
    uses: ./.github/workflows/lib.yml
    with:
      greeting: via-${{ inputs.name }}
    secrets: inherit
"""
    caller = """
on: push
jobs:
  outer:
    uses: ./.github/workflows/middle.yml
    secrets: inherit
  after:
    needs: outer
    runs-on: linux
    steps:
      - run: echo ${{ needs.outer.outputs.said }}
"""
    jobs = jobs_of(parse(caller, **{"lib.yml": LIB, "middle.yml": middle}))
    assert jobs["outer__inner__say"].name == "outer / inner / say"
    assert jobs["outer__inner__say"].steps[0].run.startswith('echo "word=via-midx2"')
    assert jobs["after"].steps[0].run == "echo ${{ needs.outer__inner__say.outputs.word }}"


@pytest.mark.parametrize(
    ("with_block", "key", "words"),
    [
        ("    with: {}\n", "jobs.call.with", "input 'greeting' of .github/workflows/lib.yml is required"),
        ("    with: {greeting: x, nope: 1}\n", "jobs.call.with.nope", "not an input of .github/workflows/lib.yml"),
        ("    with: {greeting: x, loud: 'yes'}\n", "jobs.call.with.loud", "must be true or false"),
        ("    with: {greeting: x, times: many}\n", "jobs.call.with.times", "must be a number"),
        ("    with: {greeting: '${{ secrets.X }}'}\n", "jobs.call.with.greeting", "context 'secrets' is not available"),
        (
            "    with: {greeting: x}\n    secrets: {other: x}\n",
            "jobs.call.secrets.other",
            "not a secret of .github/workflows/lib.yml",
        ),
        ("    with: {greeting: x}\n    runs-on: linux\n", "jobs.call.runs-on", "not allowed in a job that calls"),
    ],
)
def test_a_callers_mistakes_name_its_key_and_line(with_block: str, key: str, words: str) -> None:
    caller = "on: push\njobs:\n  call:\n    uses: ./.github/workflows/lib.yml\n" + with_block
    error = refused(caller, **{"lib.yml": LIB}).error
    assert (error.file, error.key) == (PATH, key), error
    assert words in error.message, error
    assert error.line is not None and error.line >= 3


def test_a_required_secret_must_be_passed() -> None:
    lib = LIB.replace("token: {required: false}", "token: {required: true}")
    error = refused(
        "on: push\njobs:\n  c:\n    uses: ./.github/workflows/lib.yml\n    with: {greeting: x}\n", **{"lib.yml": lib}
    ).error
    assert error.key == "jobs.c.secrets" and "secret 'TOKEN'" in error.message


@pytest.mark.parametrize(
    "uses",
    [
        "./.github/workflows/../../etc/passwd.yml",
        "./.github/workflows/../workflows/lib.yml",
        "/etc/passwd",
        "./.github/workflows/sub/lib.yml",
        ".github/workflows/lib.yml",
        "./.github/workflows/lib.yml@main",
        "./.github/workflows/${{ github.ref }}.yml",
        "./other/lib.yml",
    ],
)
def test_a_called_path_cannot_leave_the_workflows_directory(uses: str) -> None:
    error = refused(f"on: push\njobs:\n  c:\n    uses: '{uses}'\n", **{"lib.yml": LIB}).error
    assert (error.key, error.line) == ("jobs.c.uses", 4), error


def test_another_repositorys_workflow_is_refused_with_why_without_an_actions_source() -> None:
    # A reader of this commit's files only (a deployment with no actions source): the refusal
    # names the file, line and key, and says the feature is not supported here. With a source,
    # tests/ci_reusable/test_other_repositories.py.
    error = refused("on: push\njobs:\n  c:\n    uses: acme/lib/.github/workflows/lib.yml@v1\n").error
    assert (error.file, error.line, error.key) == (PATH, 4, "jobs.c.uses"), error
    assert error.message.startswith("acme/lib/.github/workflows/lib.yml@v1: workflows of another repository")
    assert "not supported on this deployment" in error.message


def test_missing_and_non_reusable_files_are_refused() -> None:
    error = refused("on: push\njobs:\n  c:\n    uses: ./.github/workflows/gone.yml\n").error
    assert error.key == "jobs.c.uses" and "no workflow file .github/workflows/gone.yml" in error.message
    plain = "on: push\njobs:\n  j:\n    runs-on: linux\n    steps: [{run: x}]\n"
    error = refused("on: push\njobs:\n  c:\n    uses: ./.github/workflows/plain.yml\n", **{"plain.yml": plain}).error
    assert "is not a reusable workflow" in error.message
    # A file GitHub would store as a symbolic link is its target's text in git: never followed.
    error = refused(
        "on: push\njobs:\n  c:\n    uses: ./.github/workflows/link.yml\n", **{"link.yml": "/etc/passwd"}
    ).error
    assert error.file == ".github/workflows/link.yml" and "must be a mapping" in error.message
    # Without the commit's files (no reader), a call cannot be expanded.
    with pytest.raises(WorkflowSpecError, match="no workflow file"):
        parse_workflow(PATH, "on: push\njobs:\n  c:\n    uses: ./.github/workflows/lib.yml\n")


def _calling(target: str) -> str:
    return f"on:\n  workflow_call:\njobs:\n  next:\n    uses: ./.github/workflows/{target}\n"


def test_cycles_are_refused() -> None:
    error = refused(
        "on: push\njobs:\n  c:\n    uses: ./.github/workflows/a.yml\n",
        **{"a.yml": _calling("b.yml"), "b.yml": _calling("a.yml")},
    ).error
    assert error.file == ".github/workflows/b.yml" and error.key == "jobs.next.uses"
    assert "cannot call itself" in error.message and "a.yml -> .github/workflows/b.yml -> .github/workflows/a.yml" in (
        error.message
    )
    # The top-level file calling itself.
    error = refused(_calling("ci.yml").replace("workflow_call:", "push:"), **{"ci.yml": _calling("ci.yml")}).error
    assert "cannot call itself" in error.message


def test_nesting_stops_at_githubs_ten_levels() -> None:
    leaf = "on: workflow_call\njobs:\n  leaf:\n    runs-on: linux\n    steps: [{run: echo leaf}]\n"

    def chain(levels: int) -> dict[str, str]:
        # The top-level file is level 1: levels - 1 called files, the last one with steps.
        files = {f"l{i}.yml": _calling(f"l{i + 1}.yml") for i in range(1, levels - 1)}
        files[f"l{levels - 1}.yml"] = leaf
        return files

    top = "on: push\njobs:\n  c:\n    uses: ./.github/workflows/l1.yml\n"
    spec = parse(top, **chain(MAX_CALL_DEPTH))
    assert [j.name for j in spec.jobs] == ["c / " + " / ".join(["next"] * (MAX_CALL_DEPTH - 2)) + " / leaf"]
    error = refused(top, **chain(MAX_CALL_DEPTH + 1)).error
    assert f"nest at most {MAX_CALL_DEPTH} levels" in error.message and error.key == "jobs.next.uses"


def test_too_many_jobs_in_all_are_refused() -> None:
    caller = "on: push\njobs:\n" + "".join(f"  c{i}:\n    uses: ./.github/workflows/wide.yml\n" for i in range(3))
    wide = "on: workflow_call\njobs:\n" + "".join(
        f"  j{i}:\n    runs-on: linux\n    steps: [{{run: x}}]\n" for i in range(30)
    )
    error = refused(caller, **{"wide.yml": wide}).error
    assert "more than 64 jobs" in error.message


def test_a_job_id_taken_by_a_called_job_is_refused() -> None:
    caller = (
        "on: push\njobs:\n  call:\n    uses: ./.github/workflows/lib.yml\n    with: {greeting: x}\n"
        "  call__say:\n    runs-on: linux\n    steps: [{run: x}]\n"
    )
    assert "is taken by a job of a called workflow" in refused(caller, **{"lib.yml": LIB}).error.message


def test_needs_of_a_caller_must_name_result_or_outputs() -> None:
    caller = CALLER.replace("result=${{ needs.call.result }}", "all=${{ toJSON(needs.call) }}")
    error = refused(caller, **{"lib.yml": LIB}).error
    assert error.key == "jobs.report" and "needs.call.result or needs.call.outputs" in error.message


@pytest.mark.parametrize(
    "text",
    [
        "a && b && c || !d",
        "(a || b) && c",
        "!(a == 'x') || needs['with space'].result",
        "format('{0} ''q''', github.ref)[0]",
        "fromJSON('[1,2]')[*] == 1.5",
        "contains(needs.*.result, 'failure') && x.y-z",
        "-1 < 2.5e3",
    ],
)
def test_a_rewritten_expression_parses_back_to_itself(text: str) -> None:
    node = parse_expr(text)
    assert parse_expr(to_source(node)) == node


def test_inputs_that_multiply_through_the_levels_are_refused() -> None:
    # Each level passes its input on twenty times over: 20**9 copies at the bottom unless the
    # expansion stops the growth (it must, quickly: this is a hostile file, not a slow one).
    doubled = "-".join(["${{ inputs.x }}"] * 20)

    def level(target: str) -> str:
        return (
            "on:\n  workflow_call:\n    inputs:\n      x: {type: string, default: seed}\n"
            f"jobs:\n  next:\n    uses: ./.github/workflows/{target}\n    with:\n      x: '{doubled}'\n"
        )

    leaf = (
        "on:\n  workflow_call:\n    inputs:\n      x: {type: string}\n"
        "jobs:\n  leaf:\n    runs-on: linux\n    steps: [{run: 'echo ${{ inputs.x }} ${{ github.ref }}'}]\n"
    )
    files = {f"l{i}.yml": level(f"l{i + 1}.yml") for i in range(1, 9)}
    files["l9.yml"] = leaf
    top = "on: push\njobs:\n  c:\n    uses: ./.github/workflows/l1.yml\n    with: {x: '${{ github.sha }}'}\n"
    error = refused(top, **files).error
    assert "grows past 21000 characters" in error.message, error


def test_a_called_jobs_if_reads_the_called_files_env() -> None:
    lib = (
        "on: workflow_call\nenv:\n  TARGET: prod\njobs:\n  deploy:\n    if: env.TARGET == 'prod'\n"
        "    runs-on: linux\n    steps: [{run: echo deploy}]\n"
    )
    caller = "on: push\nenv:\n  TARGET: dev\njobs:\n  c:\n    uses: ./.github/workflows/lib.yml\n"
    deploy = jobs_of(parse(caller, **{"lib.yml": lib}))["c__deploy"]
    # The run evaluates a job's if with the top file's env: the called file's must be in it already.
    root_env = {"TARGET": "dev"}
    assert evaluate_condition(deploy.if_expr, StatusFunctions(), {"env": root_env, "needs": {}})
    assert deploy.workflow_env == {"TARGET": "prod"}
