"""The console's pure pieces, without a browser: where sign-in may send the browser, the CSRF
token, and the job graph's layout."""

from __future__ import annotations

import pytest

from api.console.render import NODE_WIDTH, layout_graph
from api.console.session import csrf_token, safe_next


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
