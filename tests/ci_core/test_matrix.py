"""A matrix as GitHub expands, names and sums it up: pure functions, table-driven.

GitHub's rules (workflow syntax, ``jobs.<id>.strategy``): the product of the axes, first axis
slowest; ``exclude`` drops every combination an entry matches, even partially; ``include``
adds its keys to every combination whose original values it does not change, or becomes a
combination of its own; ``fromJSON`` matrices are evaluated when the job starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from actions_language.parser import parse_workflow
from actions_language.schema import WorkflowSpecError
from workflows.ci.expressions import ExpressionError
from workflows.ci.matrix import (
    MatrixError,
    aggregate_result,
    combination_ids,
    combination_name,
    expand_matrix,
    resolve_strategy,
)
from workflows.ci.types.spec import StrategySpec


@dataclass(frozen=True)
class Expansion:
    name: str
    axes: dict[str, list[Any]]
    include: list[dict[str, Any]] = field(default_factory=list)
    exclude: list[dict[str, Any]] = field(default_factory=list)
    want: list[dict[str, Any]] | None = None
    error: str = ""


EXPANSIONS = [
    Expansion("one axis", {"os": ["a", "b"]}, want=[{"os": "a"}, {"os": "b"}]),
    Expansion(
        "product, first axis slowest",
        {"os": ["a", "b"], "v": [1, 2]},
        want=[{"os": "a", "v": 1}, {"os": "a", "v": 2}, {"os": "b", "v": 1}, {"os": "b", "v": 2}],
    ),
    Expansion(
        "exclude by a partial match",
        {"os": ["a", "b"], "v": [1, 2]},
        exclude=[{"os": "b"}],
        want=[{"os": "a", "v": 1}, {"os": "a", "v": 2}],
    ),
    Expansion(
        "exclude compares numbers as numbers",
        {"v": [1, 2.0]},
        exclude=[{"v": 2}],
        want=[{"v": 1}],
    ),
    Expansion(
        "exclude keeps true apart from 1",
        {"v": [1, True]},
        exclude=[{"v": True}],
        want=[{"v": 1}],
    ),
    Expansion(
        "include extends every matching combination",
        {"os": ["a", "b"], "v": [1, 2]},
        include=[{"os": "a", "extra": "x"}],
        want=[
            {"os": "a", "v": 1, "extra": "x"},
            {"os": "a", "v": 2, "extra": "x"},
            {"os": "b", "v": 1},
            {"os": "b", "v": 2},
        ],
    ),
    Expansion(
        "include that would change an original value becomes its own combination",
        {"os": ["a"]},
        include=[{"os": "c", "v": 9}],
        want=[{"os": "a"}, {"os": "c", "v": 9}],
    ),
    Expansion(
        "a later include may overwrite a value an earlier include added",
        {"os": ["a"]},
        include=[{"color": "red"}, {"color": "blue"}],
        want=[{"os": "a", "color": "blue"}],
    ),
    Expansion(
        "include only (no axes)",
        {},
        include=[{"x": 1}, {"x": 2}],
        want=[{"x": 1}, {"x": 2}],
    ),
    Expansion("everything excluded", {"os": ["a"]}, exclude=[{"os": "a"}], error="no combinations"),
    Expansion("too many", {"a": list(range(20)), "b": list(range(20))}, error="at most 256"),
    # A small file (or fromJSON output) must not multiply into a huge run state.
    Expansion("too many bytes", {"big": ["x" * 4000], "n": list(range(100))}, error="bytes"),
]


@pytest.mark.parametrize("case", EXPANSIONS, ids=lambda c: c.name)
def test_expansion(case: Expansion) -> None:
    if case.error:
        with pytest.raises(MatrixError, match=case.error):
            expand_matrix(case.axes, case.include, case.exclude)
        return
    assert expand_matrix(case.axes, case.include, case.exclude) == case.want


@dataclass(frozen=True)
class Naming:
    name: str
    job_name: str
    matrix: dict[str, Any]
    want: str


NAMINGS = [
    Naming("values follow the job id in brackets", "build", {"os": "ubuntu", "node": 18}, "build (ubuntu, 18)"),
    Naming("a plain name: values follow it", "Build it", {"os": "ubuntu"}, "Build it (ubuntu)"),
    Naming("a name with matrix expressions is interpolated", "t-${{ matrix.os }}", {"os": "mac"}, "t-mac"),
    Naming("booleans and floats as GitHub prints them", "b", {"x": True, "y": 2.0, "z": 1.5}, "b (true, 2, 1.5)"),
    Naming("a mapping value prints as JSON", "b", {"cfg": {"a": 1}}, 'b ({"a": 1})'),
    Naming("github context in a name", "${{ github.ref }}/${{ matrix.v }}", {"v": 1}, "refs/heads/main/1"),
    Naming("a huge name is cut", "${{ matrix.v }}", {"v": "x" * 5000}, "x" * 197 + "..."),
]


@pytest.mark.parametrize("case", NAMINGS, ids=lambda c: c.name)
def test_naming(case: Naming) -> None:
    assert combination_name(case.job_name, case.matrix, {"github": {"ref": "refs/heads/main"}}) == case.want


def test_combination_ids_are_unique_and_key_safe() -> None:
    assert combination_ids("build", 3, {"build"}) == ["build-1", "build-2", "build-3"]
    # A job already named like a combination keeps its id; the combination gets another.
    assert combination_ids("build", 2, {"build", "Build-2"}) == ["build-1", "build-2_"]
    assert combination_ids("build", 2, {"build", "build-1"}, start=2) == ["build-2", "build-3"]


@pytest.mark.parametrize(
    ("results", "want"),
    [
        (["success", "success"], "success"),
        (["success", "failure", "cancelled"], "failure"),
        (["success", "cancelled"], "cancelled"),
        (["skipped", "skipped"], "skipped"),
        (["skipped", "success"], "success"),
        (["cancelled", "skipped"], "cancelled"),
    ],
)
def test_aggregate_result(results: list[str], want: str) -> None:
    assert aggregate_result(results) == want


CONTEXT: dict[str, Any] = {
    "github": {"ref": "refs/heads/main"},
    "needs": {
        "plan": {
            "result": "success",
            "outputs": {"m": '{"os": ["x", "y"], "include": [{"os": "x", "big": true}]}', "n": "[1,2,3]"},
        }
    },
    "inputs": {"par": "2"},
}


@dataclass(frozen=True)
class Resolving:
    name: str
    strategy: StrategySpec
    want: list[dict[str, Any]] | None = None
    fail_fast: bool = True
    max_parallel: int | None = None
    error: type[Exception] | None = None


RESOLVINGS = [
    Resolving(
        "a whole matrix from needs outputs, with its include",
        StrategySpec(matrix_expression="${{ fromJSON(needs.plan.outputs.m) }}"),
        want=[{"os": "x", "big": True}, {"os": "y"}],
    ),
    Resolving(
        "an axis from fromJSON beside a plain one",
        StrategySpec(axes={"n": "${{ fromJSON(needs.plan.outputs.n) }}", "os": ["a"]}, exclude=[{"n": 2}]),
        want=[{"n": 1, "os": "a"}, {"n": 3, "os": "a"}],
    ),
    Resolving(
        "fail-fast and max-parallel from expressions",
        StrategySpec(
            axes={"os": ["a"]}, fail_fast="${{ github.ref != 'refs/heads/main' }}", max_parallel="${{ inputs.par }}"
        ),
        want=[{"os": "a"}],
        fail_fast=False,
        max_parallel=2,
    ),
    Resolving(
        "a value interpolated inside an axis",
        StrategySpec(axes={"ref": ["on-${{ github.ref }}"]}),
        want=[{"ref": "on-refs/heads/main"}],
    ),
    Resolving(
        "a matrix that is not a mapping",
        StrategySpec(matrix_expression="${{ fromJSON('[1]') }}"),
        error=MatrixError,
    ),
    Resolving("an axis that is not a list", StrategySpec(axes={"os": "${{ fromJSON('3') }}"}), error=MatrixError),
    Resolving(
        "exclude naming no axis",
        StrategySpec(axes={"os": ["a", "b"]}, exclude="${{ fromJSON('[{\"nope\": 1}]') }}"),
        error=MatrixError,
    ),
    Resolving("not JSON", StrategySpec(matrix_expression="${{ fromJSON('{') }}"), error=ExpressionError),
    Resolving(
        "zero max-parallel",
        StrategySpec(axes={"os": ["a"]}, max_parallel="${{ 0 }}"),
        error=MatrixError,
    ),
]


@pytest.mark.parametrize("case", RESOLVINGS, ids=lambda c: c.name)
def test_resolve_strategy(case: Resolving) -> None:
    if case.error is not None:
        with pytest.raises(case.error):
            resolve_strategy(case.strategy, CONTEXT)
        return
    resolved = resolve_strategy(case.strategy, CONTEXT)
    assert resolved.combinations == case.want
    assert (resolved.fail_fast, resolved.max_parallel) == (case.fail_fast, case.max_parallel)


def test_a_resolved_matrix_is_bounded() -> None:
    big = StrategySpec(matrix_expression="${{ fromJSON(needs.plan.outputs.m) }}")
    context = {"needs": {"plan": {"outputs": {"m": '{"a": ' + str(list(range(300))) + "}"}}}}
    with pytest.raises(MatrixError, match="at most"):
        resolve_strategy(big, context)


# The parser: where ${{ matrix.x }} may stand outside steps, and what it refuses there -------------


def matrix_job(extra: str) -> str:
    return (
        "on: push\njobs:\n  a:\n    strategy:\n      matrix:\n        os: [linux]\n"
        f"{extra}    steps:\n      - run: echo hi\n"
    )


@dataclass(frozen=True)
class Placement:
    name: str
    extra: str
    read: Any = None
    want: Any = None
    line: int | None = None
    key: str = ""
    words: str = ""


PLACEMENTS = [
    Placement(
        "runs-on from the matrix",
        "    runs-on: ${{ matrix.os }}\n",
        lambda j: j.runs_on,
        ["${{ matrix.os }}"],
    ),
    Placement(
        "timeout-minutes and continue-on-error from the matrix",
        "    runs-on: linux\n    timeout-minutes: ${{ matrix.t }}\n    continue-on-error: ${{ matrix.x }}\n",
        lambda j: (j.timeout_minutes_expr, j.continue_on_error_expr, j.timeout_minutes, j.continue_on_error),
        ("${{ matrix.t }}", "${{ matrix.x }}", 360.0, False),
    ),
    Placement(
        "a name from the matrix",
        "    runs-on: linux\n    name: b-${{ matrix.os }}\n",
        lambda j: j.name,
        "b-${{ matrix.os }}",
    ),
    Placement(
        "secrets cannot choose a runner",
        "    runs-on: ${{ secrets.RUNNER }}\n",
        line=7,
        key="jobs.a.runs-on",
        words="secrets",
    ),
    Placement(
        "text around an expression in timeout-minutes",
        "    runs-on: linux\n    timeout-minutes: ${{ matrix.t }} minutes\n",
        line=8,
        key="jobs.a.timeout-minutes",
        words="single ${{ }}",
    ),
    Placement(
        "env is not available to continue-on-error",
        "    runs-on: linux\n    continue-on-error: ${{ env.X }}\n",
        line=8,
        key="jobs.a.continue-on-error",
        words="env",
    ),
    Placement(
        "secrets in a job name",
        "    runs-on: linux\n    name: ${{ secrets.X }}\n",
        line=8,
        key="jobs.a.name",
        words="secrets",
    ),
]


@pytest.mark.parametrize("case", PLACEMENTS, ids=lambda c: c.name)
def test_matrix_expressions_outside_steps(case: Placement) -> None:
    path = ".github/workflows/m.yml"
    if case.key:
        with pytest.raises(WorkflowSpecError) as err:
            parse_workflow(path, matrix_job(case.extra))
        e = err.value.error
        assert (e.file, e.line, e.key) == (path, case.line, case.key), e
        assert case.words in e.message, e.message
        return
    assert case.read(parse_workflow(path, matrix_job(case.extra)).jobs[0]) == case.want
