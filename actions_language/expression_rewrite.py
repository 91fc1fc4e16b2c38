"""Expressions rewritten as text: the parsed form of ``workflows.ci.expressions`` printed back
(with as few parentheses as its precedence needs, so a rewritten expression nests no deeper
than it must), literals of any JSON value, and the building blocks reusable workflows are
expanded with (``and_all``, ``or_any``, a job result compared). Light: stdlib only."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from workflows.ci.expressions import Node

# Binding strength of each node kind: a child weaker than its parent is parenthesised.
_OR, _AND, _CMP, _UNARY, _POSTFIX = 1, 2, 3, 4, 5
_STRENGTH = {"or": _OR, "and": _AND, "cmp": _CMP, "not": _UNARY}
# A property name the parser reads after a '.' (its identifier token).
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def literal(value: Any) -> Node:
    """An expression that yields ``value``: a scalar literal, or ``fromJSON('...')`` of a
    mapping or list (a matrix value, an input's typed default)."""
    if isinstance(value, (dict, list)):
        return ("call", "fromjson", [("lit", json.dumps(value, separators=(",", ":")))])
    if isinstance(value, int) and not isinstance(value, bool):
        return ("lit", float(value))
    return ("lit", value)


def _literal_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        number = float(value)
        if not math.isfinite(number):
            # No literal spells these; fromJSON does not either: GitHub's own text for them.
            return "'" + ("NaN" if number != number else ("Infinity" if number > 0 else "-Infinity")) + "'"
        return str(int(number)) if number.is_integer() and abs(number) < 1e15 else repr(number)
    return "'" + str(value).replace("'", "''") + "'"


def _strength(node: Node) -> int:
    return _STRENGTH.get(node[0], _POSTFIX)


def _wrapped(node: Node, at_least: int) -> str:
    text = to_source(node)
    return f"({text})" if _strength(node) < at_least else text


def _chain(node: Node, kind: str) -> list[Node]:
    """``a && b && c`` as its operands (printed flat: a long chain must not nest)."""
    if node[0] != kind:
        return [node]
    return [*_chain(node[1], kind), *_chain(node[2], kind)]


def to_source(node: Node) -> str:
    """The expression text of ``node`` (without ``${{ }}``); ``parse`` of it gives ``node`` back."""
    kind = node[0]
    if kind == "lit":
        return _literal_text(node[1])
    if kind == "ctx":
        return str(node[1])
    if kind == "prop":
        key = node[2]
        if key[0] == "lit" and isinstance(key[1], str) and _IDENT.fullmatch(key[1]):
            return f"{_wrapped(node[1], _POSTFIX)}.{key[1]}"
        return f"{_wrapped(node[1], _POSTFIX)}[{to_source(key)}]"
    if kind == "filter":
        return f"{_wrapped(node[1], _POSTFIX)}.*"
    if kind == "not":
        return f"!{_wrapped(node[1], _UNARY)}"
    if kind in ("and", "or"):
        op = " && " if kind == "and" else " || "
        return op.join(_wrapped(part, _STRENGTH[kind] + 1) for part in _chain(node, kind))
    if kind == "cmp":
        return f"{_wrapped(node[2], _UNARY)} {node[1]} {_wrapped(node[3], _UNARY)}"
    if kind == "call":
        return f"{node[1]}({', '.join(to_source(a) for a in node[2])})"
    raise ValueError(f"not an expression node: {kind!r}")


def _left_fold(kind: str, parts: Sequence[Node], empty: bool) -> Node:
    """``parts`` joined left to right by the binary ``kind`` node; the literal ``empty`` for none."""
    if not parts:
        return ("lit", empty)
    node = parts[0]
    for part in parts[1:]:
        node = (kind, node, part)
    return node


def and_all(parts: Sequence[Node]) -> Node:
    """``a && b && ...`` (``true`` for none)."""
    return _left_fold("and", parts, True)


def or_any(parts: Sequence[Node]) -> Node:
    """``a || b || ...`` (``false`` for none)."""
    return _left_fold("or", parts, False)


def need_path(job_id: str, *keys: str) -> Node:
    """``needs['<job_id>'].<keys...>``."""
    node: Node = ("prop", ("ctx", "needs"), ("lit", job_id))
    for key in keys:
        node = ("prop", node, ("lit", key))
    return node


def equals(node: Node, text: str) -> Node:
    return ("cmp", "==", node, ("lit", text))


def aggregate_result(results: Sequence[Node]) -> Node:
    """The result of a group of jobs from theirs, as ``workflows.ci.matrix.aggregate_result``
    decides it (failure, else cancelled, else skipped when all were, else success), as one
    expression over the jobs' ``needs`` results."""
    if not results:
        return ("lit", "skipped")
    ladder = [
        ("and", or_any([equals(r, "failure") for r in results]), ("lit", "failure")),
        ("and", or_any([equals(r, "cancelled") for r in results]), ("lit", "cancelled")),
        ("and", and_all([equals(r, "skipped") for r in results]), ("lit", "skipped")),
        ("lit", "success"),
    ]
    return or_any(ladder)


def prop_chain(node: Node) -> tuple[Node, list[Node]]:
    """``a.b['c']`` as its base (``a``) and the keys after it, outermost last."""
    keys: list[Node] = []
    while node[0] == "prop":
        keys.append(node[2])
        node = node[1]
    keys.reverse()
    return node, keys


def with_keys(base: Node, keys: Sequence[Node]) -> Node:
    for key in keys:
        base = ("prop", base, key)
    return base


def literal_key(key: Node) -> str | None:
    """A property key written literally (``.name`` or ``['name']``), else ``None``."""
    return key[1] if key[0] == "lit" and isinstance(key[1], str) else None
