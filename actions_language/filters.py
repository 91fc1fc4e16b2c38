"""GitHub's filter patterns (``branches``, ``tags``, ``paths`` and their ``-ignore`` forms).

``*`` matches any characters but ``/``; ``**`` any characters; ``**/`` zero or more whole
directories (``**/docs/**`` matches ``docs/a``); ``?`` and ``+`` make the previous character
or class optional or repeatable; ``[a-z0-9]`` is a class; ``\\`` escapes the next character;
a leading ``!`` negates, and the last pattern that matches a name decides.

Patterns and names both come from the tenant, so matching is a state-set simulation, never
a backtracking regular expression: its cost is at most name length x pattern length, and
``check_pattern`` bounds the pattern (the parser refuses a longer one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MAX_PATTERN_LENGTH = 512
MAX_PATTERNS = 128
_ANY = "any"
_NOT_SLASH = "not-slash"
_DIRS = "dirs"


@dataclass(frozen=True)
class _Token:
    kind: str  # "char" (accepts ``accepts``), _ANY, _NOT_SLASH or _DIRS
    accepts: Callable[[str], bool] | None = None
    optional: bool = False
    repeat: bool = False


def check_pattern(pattern: str) -> str | None:
    """Why ``pattern`` cannot be a filter pattern (``None``: it can)."""
    if not pattern:
        return "patterns must not be empty"
    if len(pattern) > MAX_PATTERN_LENGTH:
        return f"patterns are at most {MAX_PATTERN_LENGTH} characters"
    if "\0" in pattern or "\n" in pattern:
        return "patterns must not hold NUL or newlines"
    return None


def _class(body: str) -> Callable[[str], bool]:
    chars: set[str] = set()
    ranges: list[tuple[str, str]] = []
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            ranges.append((body[i], body[i + 2]))
            i += 3
        else:
            chars.add(body[i])
            i += 1
    return lambda c: c in chars or any(lo <= c <= hi for lo, hi in ranges)


def _tokens(pattern: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**/", i):
                tokens.append(_Token(_DIRS))
                i += 3
            elif pattern.startswith("**", i):
                tokens.append(_Token(_ANY))
                i += 2
            else:
                tokens.append(_Token(_NOT_SLASH))
                i += 1
            continue
        if c in "?+" and tokens and tokens[-1].kind == "char" and not (tokens[-1].optional or tokens[-1].repeat):
            last = tokens.pop()
            tokens.append(_Token("char", last.accepts, optional=c == "?", repeat=c == "+"))
            i += 1
            continue
        if c == "[" and (end := pattern.find("]", i + 2)) != -1:
            tokens.append(_Token("char", _class(pattern[i + 1 : end])))
            i = end + 1
            continue
        if c == "\\" and i + 1 < len(pattern):
            i += 1
            c = pattern[i]
        tokens.append(_Token("char", _literal(c)))
        i += 1
    return tokens


def _literal(char: str) -> Callable[[str], bool]:
    return lambda c: c == char


def _closure(tokens: list[_Token], states: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """States reachable without reading: ``(i, k)`` is "at token i, k=0 nothing read yet,
    k=1 read some, k=2 (``**/`` only) just read a '/'"."""
    out = set(states)
    todo = list(states)
    while todo:
        i, k = todo.pop()
        if i >= len(tokens):
            continue
        t = tokens[i]
        if t.kind == _DIRS:
            done = k in (0, 2)
        elif t.kind in (_ANY, _NOT_SLASH):
            done = True
        else:
            done = k == 1 or t.optional
        if done and (i + 1, 0) not in out:
            out.add((i + 1, 0))
            todo.append((i + 1, 0))
    return out


def glob_match(pattern: str, name: str) -> bool:
    """Whether the whole ``name`` matches ``pattern`` (without its leading ``!``)."""
    tokens = _tokens(pattern)
    states = _closure(tokens, {(0, 0)})
    for c in name:
        after: set[tuple[int, int]] = set()
        for i, k in states:
            if i >= len(tokens):
                continue
            t = tokens[i]
            if t.kind == _ANY or (t.kind == _NOT_SLASH and c != "/"):
                after.add((i, 1))
            elif t.kind == _DIRS:
                after.add((i, 2 if c == "/" else 1))
            elif t.kind == "char" and (k == 0 or t.repeat) and t.accepts is not None and t.accepts(c):
                after.add((i, 1))
        if not after:
            return False
        states = _closure(tokens, after)
    return (len(tokens), 0) in states


def matches_any(patterns: list[str], name: str) -> bool:
    """GitHub's order-sensitive evaluation: later patterns win, and ``!`` negates."""
    matched = False
    for pattern in patterns:
        if pattern.startswith("!"):
            if matched and glob_match(pattern[1:], name):
                matched = False
        elif not matched and glob_match(pattern, name):
            matched = True
    return matched
