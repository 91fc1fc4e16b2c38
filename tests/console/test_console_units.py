"""The console's pure pieces, without a browser: where sign-in may send the browser, the CSRF
token, the job graph's layout, and the run graph drawn from an API run (a matrix job as its
combinations)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from api.console.pages import run_graph
from api.console.render import NODE_HEIGHT, NODE_WIDTH, layout_graph, when
from api.console.session import csrf_token, safe_next
from api.schemas.ci.runs import JobOut, RunOut


@pytest.mark.parametrize(
    "target",
    [
        None,
        "",
        "https://evil.example/console/videos",
        "//evil.example/console/x",
        "/\\evil.example",
        "/console/../v1/videos",
        "/console/videos\r\nSet-Cookie: x=1",
        "/v1/videos",
        "javascript:alert(1)",
        "/console/@evil.example",
    ],
)
def test_sign_in_never_leaves_the_console(target: str | None) -> None:
    assert safe_next(target) == "/console/videos"


def test_sign_in_returns_to_a_console_page() -> None:
    assert safe_next("/console/runs?repo=r_1") == "/console/runs?repo=r_1"


def test_csrf_token_is_bound_to_the_key() -> None:
    assert csrf_token("lh_a") == csrf_token("lh_a")
    assert csrf_token("lh_a") != csrf_token("lh_b")
    assert "lh_a" not in csrf_token("lh_a")


def test_graph_columns_follow_needs() -> None:
    graph = layout_graph(
        [
            ("build", "build", "success", []),
            ("lint", "lint", "success", []),
            ("test", "test", "running", ["build"]),
            ("deploy", "deploy", "waiting", ["test", "lint", "missing"]),
            ("self", "self", "waiting", ["self"]),
        ]
    )
    x = {n.id: n.x for n in graph.nodes}
    assert x["build"] == x["lint"] == x["self"] < x["test"] < x["deploy"]
    # One edge per known need; an unknown or self need draws nothing.
    assert len(graph.edges) == 3
    assert graph.width >= x["deploy"] + NODE_WIDTH


def test_graph_survives_a_cycle() -> None:
    graph = layout_graph([("a", "a", "waiting", ["b"]), ("b", "b", "waiting", ["a"])])
    assert {n.id for n in graph.nodes} == {"a", "b"}


def _run(*jobs: JobOut) -> RunOut:
    return RunOut(
        id="run_00000001",
        repo_id="repo_1",
        commit_sha="0" * 40,
        ref="refs/heads/main",
        workflow_path=".github/workflows/ci.yml",
        status="in_progress",
        created_at=datetime(2026, 1, 2, 3, 4, tzinfo=UTC),
        jobs=list(jobs),
    )


def test_run_graph_draws_a_matrix_job_as_its_combinations() -> None:
    graph = run_graph(
        _run(
            JobOut(id="build", name="build", status="success"),
            JobOut(id="test", name="test", status="in_progress", needs=["build"], combinations=["test-1", "test-2"]),
            JobOut(id="test-1", name="test (a)", status="success", needs=["build"], matrix_of="test"),
            JobOut(id="test-2", name="test (b)", status="in_progress", needs=["build"], matrix_of="test"),
            JobOut(id="deploy", name="deploy", status="waiting", needs=["test"]),
        )
    )
    # No node for the matrix job itself (it runs nothing), one per combination.
    assert [n.id for n in graph.nodes] == ["build", "test-1", "test-2", "deploy"]
    x = {n.id: n.x for n in graph.nodes}
    assert x["build"] < x["test-1"] == x["test-2"] < x["deploy"]
    # build -> each combination, each combination -> deploy (which needs the matrix job).
    ends = {(e.x1, e.y1, e.x2, e.y2) for e in graph.edges}
    by_id = {n.id: n for n in graph.nodes}

    def edge(a: str, b: str) -> tuple[int, int, int, int]:
        return (by_id[a].x + NODE_WIDTH, by_id[a].y + NODE_HEIGHT // 2, by_id[b].x, by_id[b].y + NODE_HEIGHT // 2)

    assert ends == {edge("build", c) for c in ("test-1", "test-2")} | {edge(c, "deploy") for c in ("test-1", "test-2")}


def test_run_graph_draws_a_matrix_job_not_expanded_yet_as_itself() -> None:
    graph = run_graph(
        _run(
            JobOut(id="build", name="build", status="in_progress"),
            JobOut(id="test", name="test", status="waiting", needs=["build"]),
            JobOut(id="deploy", name="deploy", status="waiting", needs=["test"]),
        )
    )
    assert [n.id for n in graph.nodes] == ["build", "test", "deploy"] and len(graph.edges) == 2


def test_when_shows_a_moment_to_the_minute_in_utc() -> None:
    assert when(datetime(2026, 1, 2, 3, 4, 59, tzinfo=UTC)) == "2026-01-02 03:04 UTC"
    assert when(None) == "-"
