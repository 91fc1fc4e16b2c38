"""The 1.0 size rule (issue 28): outside tests, no module over 600 lines and no function over 80,
unless a comment says why it must stay whole: ``# Whole on purpose: <why>`` among a module's
first ten lines, or on the line above a function (above its decorators)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.foundation.test_import_graph import PACKAGES as GRAPH_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
# Every package outside tests/ that holds code a reader must follow.
PACKAGES = tuple(p for p in GRAPH_PACKAGES if p != "tests")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MARK = "# Whole on purpose:"


def _files(root: Path) -> list[Path]:
    return [p for package in PACKAGES for p in sorted((root / package).rglob("*.py")) if "__pycache__" not in p.parts]


def oversized(root: Path) -> list[str]:
    """Each module and function over the limits without the mark, as ``path:line what``."""
    found: list[str] = []
    for path in _files(root):
        text = path.read_text()
        lines = text.splitlines()
        rel = path.relative_to(root)
        if len(lines) > MAX_MODULE_LINES and not any(MARK in line for line in lines[:10]):
            found.append(f"{rel}:1 module of {len(lines)} lines")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            above = lines[first - 2] if first >= 2 else ""
            if length > MAX_FUNCTION_LINES and MARK not in above:
                found.append(f"{rel}:{node.lineno} {node.name} of {length} lines")
    return found


def test_no_module_or_function_over_the_limits() -> None:
    assert len(_files(ROOT)) > 200  # a walk that saw nothing would pass
    found = oversized(ROOT)
    assert not found, "over the 1.0 size limits (split it, or mark why it stays whole):\n" + "\n".join(found)


def test_the_check_can_fail(tmp_path: Path) -> None:
    package = tmp_path / "api"
    package.mkdir()
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    (package / "long.py").write_text(f"def long():\n{body}\n\n\n{MARK} a table\ndef kept():\n{body}\n")
    (package / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (package / "whole.py").write_text(f"{MARK} generated\n" + "x = 1\n" * (MAX_MODULE_LINES + 1))
    assert sorted(oversized(tmp_path)) == ["api/big.py:1 module of 601 lines", "api/long.py:1 long of 81 lines"]
