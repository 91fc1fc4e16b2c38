"""GitHub Actions expressions (``${{ ... }}`` and ``if:``) for the supported subset.

Pure and deterministic (no I/O): the run workflow evaluates job ``if`` conditions, the job
activity evaluates step conditions and substitutes ``${{ }}`` in ``run``/``env``/outputs, and
the parser validates every expression at parse time.

Supported: literals (``'str'`` with ``''`` escapes, numbers, ``true``/``false``/``null``),
contexts (``github``, ``env``, ``needs``, ``steps``, ``job``, ``runner``, ``secrets``), property access
(``a.b`` and ``a['b']``), object filters (``labels.*.name``, ``a[*]``: every element or value,
then each one's property), ``!``, ``< <= > >= == !=`` (GitHub's loose equality; strings compare
case-insensitively), ``&&``, ``||``, parentheses, the status functions ``success()``,
``failure()``, ``always()``, ``cancelled()``, ``contains``/``startsWith``/``endsWith``,
``format``, ``join``, ``toJSON``, ``fromJSON``, and ``hashFiles`` in steps (the worker supplies it).

GitHub's limits hold: an expression is at most 21,000 characters and nests at most 50 deep; a
``}}`` inside a string literal does not close ``${{``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


class ExpressionError(ValueError):
    """An expression that cannot be parsed or evaluated."""


STATUS_FUNCTIONS = frozenset({"success", "failure", "always", "cancelled"})
STRING_FUNCTIONS = frozenset({"contains", "startswith", "endswith"})
# Functions of values: format('{0}', x), join(array, sep), toJSON(value), fromJSON(text).
VALUE_FUNCTIONS = frozenset({"format", "join", "tojson", "fromjson"})
# GitHub's ExpressionConstants: longest expression and deepest nesting it accepts.
MAX_EXPRESSION_LENGTH = 21_000
MAX_EXPRESSION_DEPTH = 50
# Functions that read the job's workspace: only steps (on the worker) can evaluate them.
WORKSPACE_FUNCTIONS = frozenset({"hashfiles"})  # hashFiles (names are case-insensitive)

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<num>-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|0x[0-9a-fA-F]+)
      | (?P<str>'(?:[^']|'')*')
      | (?P<op>&&|\|\||==|!=|<=|>=|<|>|!|\(|\)|\[|\]|\.|,|\*)
      | (?P<ident>[A-Za-z_][A-Za-z0-9_-]*)
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class StatusFunctions:
    """Values of ``success()``, ``failure()``, ``cancelled()`` where an expression runs."""

    success: bool = True
    failure: bool = False
    cancelled: bool = False
    # ``hashFiles(patterns...)`` over the job's workspace; None where there is no workspace.
    hash_files: Callable[[list[str]], str] | None = None


# AST nodes are tuples: ("lit", v) ("ctx", name) ("prop", node, key_node) ("filter", node)
# ("not", n) ("and", a, b) ("or", a, b) ("cmp", op, a, b) ("call", name, [args]).
Node = tuple[Any, ...]


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ExpressionError(f"unexpected character {text[pos:].strip()[:1]!r} in expression {text.strip()!r}")
        kind = m.lastgroup
        assert kind is not None
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0
        self.depth = 0

    def _nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_EXPRESSION_DEPTH:
            raise ExpressionError(f"expression nests deeper than {MAX_EXPRESSION_DEPTH} levels")

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            want = f"{value!r}" if value else "more input"
            raise ExpressionError(f"expected {want} in expression {self.text.strip()!r}")
        self.i += 1
        return tok

    def parse(self) -> Node:
        if not self.tokens:
            raise ExpressionError("empty expression")
        node = self.or_()
        if self.peek() is not None:
            raise ExpressionError(f"unexpected {self.peek()[1]!r} in expression {self.text.strip()!r}")  # type: ignore[index]
        return node

    def _chain(self, op: str, kind: str, operand: Callable[[], Node]) -> Node:
        """Operands joined by ``op``, left to right: ``a || b || c`` is ``(a || b) || c``."""
        node = operand()
        while self.peek() == ("op", op):
            self.take()
            node = (kind, node, operand())
        return node

    def or_(self) -> Node:
        return self._chain("||", "or", self.and_)

    def and_(self) -> Node:
        return self._chain("&&", "and", self.cmp)

    def cmp(self) -> Node:
        node = self.unary()
        tok = self.peek()
        if tok is not None and tok[0] == "op" and tok[1] in ("==", "!=", "<", "<=", ">", ">="):
            self.take()
            node = ("cmp", tok[1], node, self.unary())
        return node

    def unary(self) -> Node:
        self._nest()
        try:
            if self.peek() == ("op", "!"):
                self.take()
                return ("not", self.unary())
            return self.postfix(self.primary())
        finally:
            self.depth -= 1

    def primary(self) -> Node:
        kind, value = self.take()
        if kind == "num":
            number = float(int(value, 16)) if value.lower().startswith("0x") else float(value)
            return ("lit", number)
        if kind == "str":
            return ("lit", value[1:-1].replace("''", "'"))
        if kind == "op" and value == "(":
            node = self.or_()
            self.take(")")
            return node
        if kind == "ident":
            lowered = value.lower()
            if lowered in ("true", "false"):
                return ("lit", lowered == "true")
            if lowered == "null":
                return ("lit", None)
            if self.peek() == ("op", "("):
                self.take()
                args: list[Node] = []
                if self.peek() != ("op", ")"):
                    args.append(self.or_())
                    while self.peek() == ("op", ","):
                        self.take()
                        args.append(self.or_())
                self.take(")")
                return ("call", lowered, args)
            return ("ctx", value)
        raise ExpressionError(f"unexpected {value!r} in expression {self.text.strip()!r}")

    def postfix(self, node: Node) -> Node:
        while True:
            tok = self.peek()
            if tok == ("op", "."):
                self.take()
                kind, value = self.take()
                if (kind, value) == ("op", "*"):
                    node = ("filter", node)
                    continue
                if kind != "ident":
                    raise ExpressionError(f"expected a property name after '.' in {self.text.strip()!r}")
                node = ("prop", node, ("lit", value))
            elif tok == ("op", "["):
                self.take()
                if self.peek() == ("op", "*"):
                    self.take()
                    self.take("]")
                    node = ("filter", node)
                    continue
                key = self.or_()
                self.take("]")
                node = ("prop", node, key)
            else:
                return node


def parse(text: str) -> Node:
    """Parse an expression (without ``${{ }}``); raises ``ExpressionError``."""
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(f"expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    return _Parser(text).parse()


def find_interpolations(text: str) -> list[tuple[int, int, str]]:
    """Every ``${{ ... }}`` in ``text`` as (start, end, body); a ``}}`` inside a string literal
    (``'...'``, ``''`` escapes a quote) does not close it. An unterminated one ends the scan."""
    found: list[tuple[int, int, str]] = []
    pos = 0
    while True:
        start = text.find("${{", pos)
        if start == -1:
            return found
        i = start + 3
        in_string = False
        while i < len(text):
            c = text[i]
            if in_string:
                if c == "'":
                    if text.startswith("''", i):
                        i += 2
                        continue
                    in_string = False
            elif c == "'":
                in_string = True
            elif text.startswith("}}", i):
                break
            i += 1
        else:
            return found
        found.append((start, i + 2, text[start + 3 : i]))
        pos = i + 2


def unterminated(text: str) -> bool:
    """Whether ``text`` opens a ``${{`` that never closes."""
    spans = find_interpolations(text)
    tail = spans[-1][1] if spans else 0
    return "${{" in text[tail:]


def condition_expression(text: str) -> str:
    """The expression an ``if:`` value means. Bare or wholly wrapped: that expression. Text
    around ``${{ }}`` makes GitHub read the whole value as a string template, i.e.
    ``format('text {0}', expr)``: truthy whenever it is not empty."""
    stripped = text.strip()
    spans = find_interpolations(stripped)
    if not spans:
        return stripped
    if len(spans) == 1 and spans[0][0] == 0 and spans[0][1] == len(stripped):
        return spans[0][2]
    parts: list[str] = []
    args: list[str] = []
    pos = 0
    for start, end, body in spans:
        parts.append(_format_literal(stripped[pos:start]))
        parts.append("{" + str(len(args)) + "}")
        args.append(f"({body})")
        pos = end
    parts.append(_format_literal(stripped[pos:]))
    template = "".join(parts).replace("'", "''")
    return f"format('{template}', {', '.join(args)})"


def _format_literal(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


# Evaluation ---------------------------------------------------------------------------------


def truthy(value: Any) -> bool:
    if value is None or value is False:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value != 0 and not math.isnan(value)
    if isinstance(value, str):
        return value != ""
    return True


def _to_number(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        s = value.strip()
        if s == "":
            return 0.0
        try:
            return float(int(s, 16)) if s.lower().startswith("0x") else float(s)
        except ValueError:
            return math.nan
    return math.nan


def _compare(op: str, a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        x: Any = a.lower()
        y: Any = b.lower()
    elif type(a) is type(b) and not isinstance(a, (str, int, float, bool)) and a is not None:
        # Objects and arrays compare by identity in GitHub; equal only if the same value here.
        return (a == b) if op == "==" else (a != b) if op == "!=" else False
    else:
        x, y = _to_number(a), _to_number(b)
        if math.isnan(x) or math.isnan(y):
            return op == "!="
    if op == "==":
        return bool(x == y)
    if op == "!=":
        return bool(x != y)
    if op == "<":
        return bool(x < y)
    if op == "<=":
        return bool(x <= y)
    if op == ">":
        return bool(x > y)
    return bool(x >= y)


def to_text(value: Any) -> str:
    """How a value is substituted into ``${{ }}``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


class FilteredList(list):  # type: ignore[type-arg]
    """What an object filter (``.*``) yields: an array whose property access applies to each
    element, keeping the elements that have it (``labels.*.name`` is every label's name)."""


def _elements(value: Any) -> list[Any]:
    """What ``.*`` takes from a value: an array's items, an object's values, else nothing."""
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return list(value.values())
    return []


_MISSING = object()


def _property(base: Any, key: Any) -> Any:
    """``base[key]``, or ``_MISSING``."""
    if isinstance(base, dict):
        if key in base:
            return base[key]
        # Property names are case-insensitive in GitHub expressions.
        lowered = str(key).lower()
        for k, v in base.items():
            if str(k).lower() == lowered:
                return v
        return _MISSING
    if isinstance(base, list):
        idx = _to_number(key)
        return base[int(idx)] if not math.isnan(idx) and 0 <= int(idx) < len(base) else _MISSING
    return _MISSING


def evaluate(node: Node, context: dict[str, Any], status: StatusFunctions) -> Any:
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "ctx":
        name = node[1]
        if name not in context:
            raise ExpressionError(f"unknown context {name!r}")
        return context[name]
    if kind == "filter":
        base = evaluate(node[1], context, status)
        if isinstance(base, FilteredList):
            # A filter of a filter flattens one level: ``a.*.*`` is every grandchild.
            return FilteredList(item for element in base for item in _elements(element))
        return FilteredList(_elements(base))
    if kind == "prop":
        base = evaluate(node[1], context, status)
        key = evaluate(node[2], context, status)
        if isinstance(base, FilteredList):
            found = (_property(element, key) for element in base)
            return FilteredList(v for v in found if v is not _MISSING)
        value = _property(base, key)
        return None if value is _MISSING else value
    if kind == "not":
        return not truthy(evaluate(node[1], context, status))
    if kind == "and":
        left = evaluate(node[1], context, status)
        return evaluate(node[2], context, status) if truthy(left) else left
    if kind == "or":
        left = evaluate(node[1], context, status)
        return left if truthy(left) else evaluate(node[2], context, status)
    if kind == "cmp":
        return _compare(node[1], evaluate(node[2], context, status), evaluate(node[3], context, status))
    if kind == "call":
        name, args = node[1], node[2]
        if name in STATUS_FUNCTIONS:
            if args:
                raise ExpressionError(f"{name}() takes no arguments")
            return {
                "success": status.success,
                "failure": status.failure,
                "always": True,
                "cancelled": status.cancelled,
            }[name]
        if name in STRING_FUNCTIONS:
            if len(args) != 2:
                raise ExpressionError(f"{name}() takes two arguments")
            hay, needle = (evaluate(a, context, status) for a in args)
            if name == "contains" and isinstance(hay, list):
                return any(_compare("==", item, needle) for item in hay)
            h, n = to_text(hay).lower(), to_text(needle).lower()
            return n in h if name == "contains" else h.startswith(n) if name == "startswith" else h.endswith(n)
        if name in VALUE_FUNCTIONS:
            return _value_function(name, [evaluate(a, context, status) for a in args])
        if name in WORKSPACE_FUNCTIONS:
            if status.hash_files is None:
                raise ExpressionError(f"{name}() is only available in steps")
            if not args:
                raise ExpressionError(f"{name}() takes at least one pattern")
            return status.hash_files([to_text(evaluate(a, context, status)) for a in args])
        raise ExpressionError(f"unknown function {name}()")
    raise ExpressionError(f"bad expression node {kind}")


_FORMAT_TOKEN = re.compile(r"\{\{|\}\}|\{(\d+)\}|[{}]")


def _value_function(name: str, args: list[Any]) -> Any:
    if name == "format":
        if not args:
            raise ExpressionError("format() takes a format string and its arguments")
        fmt, values = to_text(args[0]), args[1:]

        def sub(m: re.Match[str]) -> str:
            token = m.group(0)
            if token in ("{{", "}}"):
                return token[0]
            if m.group(1) is None:
                raise ExpressionError(f"format(): unbalanced brace in {fmt!r}")
            index = int(m.group(1))
            if index >= len(values):
                raise ExpressionError(f"format(): no argument {{{index}}} in {fmt!r}")
            return to_text(values[index])

        return _FORMAT_TOKEN.sub(sub, fmt)
    if name == "join":
        if not 1 <= len(args) <= 2:
            raise ExpressionError("join() takes an array and an optional separator")
        sep = to_text(args[1]) if len(args) == 2 else ","
        return sep.join(to_text(v) for v in args[0]) if isinstance(args[0], list) else to_text(args[0])
    if len(args) != 1:
        raise ExpressionError(f"{name}() takes one argument")
    if name == "tojson":
        return json.dumps(args[0], indent=2)
    try:
        return json.loads(to_text(args[0]))
    except ValueError as exc:
        raise ExpressionError(f"fromJSON(): not JSON: {exc}") from None


def subnodes(node: Node) -> Iterator[Node]:
    """The nodes right under ``node``: its operands, and each argument of a call."""
    for part in node[1:]:
        if isinstance(part, tuple):
            yield part
        elif isinstance(part, list):
            yield from part


def uses_status_function(node: Node) -> bool:
    if node[0] == "call" and node[1] in STATUS_FUNCTIONS:
        return True
    return any(uses_status_function(part) for part in subnodes(node))


def evaluate_condition(expr: str | None, status: StatusFunctions, context: dict[str, Any]) -> bool:
    """An ``if:`` condition; without a status function it means ``success() && (expr)``."""
    if expr is None or not expr.strip():
        return status.success
    node = parse(condition_expression(expr))
    if not uses_status_function(node):
        return status.success and truthy(evaluate(node, context, status))
    return truthy(evaluate(node, context, status))


def interpolate(text: str, context: dict[str, Any], status: StatusFunctions | None = None) -> str:
    """Substitute every ``${{ expr }}`` in ``text``."""
    fns = status or StatusFunctions()
    out: list[str] = []
    pos = 0
    for start, end, body in find_interpolations(text):
        out.append(text[pos:start])
        out.append(to_text(evaluate(parse(body), context, fns)))
        pos = end
    out.append(text[pos:])
    return "".join(out)


def expressions_in(text: str) -> list[str]:
    """The ``${{ }}`` bodies in ``text``."""
    return [body for _, _, body in find_interpolations(text)]


def context_paths(node: Node) -> list[list[str]]:
    """Context references in an expression as literal paths (``[["needs", "build", "outputs"]]``);
    dynamic keys end a path."""
    found: list[list[str]] = []

    def path_of(n: Node) -> list[str] | None:
        if n[0] == "ctx":
            return [n[1]]
        if n[0] == "prop":
            base = path_of(n[1])
            if base is None:
                return None
            if n[2][0] == "lit" and isinstance(n[2][1], str):
                return [*base, n[2][1]]
            return base
        return None

    def walk(n: Node) -> None:
        p = path_of(n)
        if p is not None:
            found.append(p)
            if n[0] == "prop":
                walk(n[2])
            return
        for part in subnodes(n):
            walk(part)

    walk(node)
    return found


def function_names(node: Node) -> list[str]:
    names: list[str] = []
    if node[0] == "call":
        names.append(node[1])
    for part in subnodes(node):
        names.extend(function_names(part))
    return names


def github_context(sha: str, ref: str, repository: str, run_id: str, workflow_name: str) -> dict[str, Any]:
    """The ``github`` context for the supported subset."""
    if ref.startswith("refs/heads/"):
        ref_name, ref_type = ref[len("refs/heads/") :], "branch"
    elif ref.startswith("refs/tags/"):
        ref_name, ref_type = ref[len("refs/tags/") :], "tag"
    else:
        ref_name, ref_type = ref, ""
    return {
        "sha": sha,
        "ref": ref,
        "ref_name": ref_name,
        "ref_type": ref_type,
        "repository": repository,
        "repository_owner": repository.split("/", 1)[0],
        "event_name": "push",
        "run_id": run_id,
        "workflow": workflow_name,
    }
