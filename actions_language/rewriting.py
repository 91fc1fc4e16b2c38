"""A called workflow's text as the run reads it: every expression of the called file (and of
its caller's ``with``, ``secrets``, ``if`` and ``name``) rewritten so ``inputs``, ``secrets``,
``needs``/``jobs``, ``matrix`` and ``strategy`` mean what they meant where they were written
(``actions_language.expansion`` says why and how the call is expanded)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actions_language.contexts import check_text
from actions_language.expression_rewrite import (
    equals,
    literal,
    literal_key,
    need_path,
    or_any,
    prop_chain,
    to_source,
    with_keys,
)
from actions_language.loader import YamlList, YamlMap
from actions_language.reusable import CallDeclaration, CallInput
from actions_language.schema import FileContext, finite_number, named_entries, scalar_text
from workflows.ci.expressions import (
    MAX_EXPRESSION_LENGTH,
    STATUS_FUNCTIONS,
    WORKSPACE_FUNCTIONS,
    ExpressionError,
    Node,
    StatusFunctions,
    condition_expression,
    evaluate,
    find_interpolations,
    parse,
    subnodes,
    to_text,
    unterminated,
)

if TYPE_CHECKING:
    from actions_language.expansion import Unit

# Where a caller's ``with`` and ``secrets`` values may look (GitHub's context availability).
WITH_CONTEXTS = {"github", "vars", "needs", "inputs", "strategy", "matrix"}
SECRETS_CONTEXTS = WITH_CONTEXTS | {"secrets"}


class RewriteError(ValueError):
    """An expression the expansion cannot carry into the called workflow's jobs."""


def template_node(text: str) -> Node:
    """A value as one expression: plain text is a string; ``${{ }}`` with text around it a
    ``format(...)``, as GitHub reads a template."""
    if "${{" not in text:
        return ("lit", text)
    return parse(condition_expression(text))


def _inlined(node: Node) -> str | None:
    """A literal's text, where putting it in place of its ``${{ }}`` changes nothing."""
    if node[0] != "lit" or isinstance(node[1], (dict, list)):
        return None
    text = to_text(node[1])
    return None if "${{" in text else text


def _constant(node: Node) -> bool:
    if node[0] == "ctx" or (node[0] == "call" and node[1] in STATUS_FUNCTIONS | WORKSPACE_FUNCTIONS):
        return False
    return all(_constant(p) for p in subnodes(node))


def _folded(node: Node) -> Node:
    """A constant expression (an input's literal in ``format(...)``) as its value, so a literal
    input reads as plain text where it is used."""
    if node[0] == "lit" or not _constant(node):
        return node
    try:
        value = evaluate(node, {}, StatusFunctions())
    except ExpressionError:
        return node
    return node if isinstance(value, (dict, list)) else ("lit", value)


def _typed(node: Node) -> Any:
    value = node[1]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


@dataclass(eq=False)
class Substitution:
    """What ``inputs.x``, ``secrets.X``, ``needs.<job>`` (``jobs.<job>`` in outputs), ``matrix``
    and ``strategy`` stand for in one file's text (``None``: the context stays as it is)."""

    inputs: dict[str, Node] | None
    secrets: dict[str, Node] | None
    units: dict[str, Unit]
    renames: bool
    matrix: dict[str, Any] | None = None
    strategy: dict[str, Any] | None = None
    jobs_context: bool = False
    # A called file's env, for a job-level ``if`` of it (the run would give it the top file's).
    env: dict[str, str] | None = None
    # Characters substituted into the expression being rewritten: a value that stands for
    # another (an input for a caller's expression, nested) must not multiply past what one
    # expression may hold, whatever the nesting.
    _spent: int = field(default=0, init=False, repr=False)

    # Expressions ---------------------------------------------------------------------------

    def node(self, node: Node, ctx: FileContext | None = None, line: int | None = None, key: str | None = None) -> Node:
        """``node`` rewritten; with ``ctx``, a refusal is that file's error at ``line``/``key``."""
        try:
            self._spent = 0
            return self._rewrite(node)
        except RewriteError as exc:
            if ctx is None:
                raise
            raise ctx.fail(line, key, str(exc)) from None

    def _rewrite(self, node: Node) -> Node:
        return _folded(self._replace(node))

    def _replace(self, node: Node) -> Node:
        kind = node[0]
        if kind in ("ctx", "prop"):
            base, keys = prop_chain(node)
            if base[0] == "ctx":
                found = self._context(str(base[1]).lower(), keys)
                if found is not None:
                    return found
                return with_keys(base, [self._rewrite(k) for k in keys])
            return with_keys(self._rewrite(base), [self._rewrite(k) for k in keys])
        if kind in ("filter", "not"):
            return (kind, self._rewrite(node[1]))
        if kind in ("and", "or"):
            return (kind, self._rewrite(node[1]), self._rewrite(node[2]))
        if kind == "cmp":
            return (kind, node[1], self._rewrite(node[2]), self._rewrite(node[3]))
        if kind == "call":
            return (kind, node[1], [self._rewrite(a) for a in node[2]])
        return node

    def _charge(self, value: Node) -> Node:
        self._spent += len(to_source(value))
        if self._spent > MAX_EXPRESSION_LENGTH:
            raise RewriteError(
                f"an expression grows past {MAX_EXPRESSION_LENGTH} characters once the reusable workflows are expanded"
            )
        return value

    def _rest(self, value: Node, keys: list[Node]) -> Node:
        return with_keys(value, [self._rewrite(k) for k in keys])

    def _context(self, name: str, keys: list[Node]) -> Node | None:
        if name == "inputs" and self.inputs is not None:
            if not keys:
                if all(v[0] == "lit" for v in self.inputs.values()):
                    return literal({k: v[1] for k, v in self.inputs.items()})
                raise RewriteError("a called workflow reads its inputs one by one (inputs.<name>)")
            key = literal_key(keys[0])
            if key is None:
                raise RewriteError("a called workflow names its inputs literally (inputs.<name>)")
            return self._rest(self._charge(self.inputs.get(key.lower(), ("lit", None))), keys[1:])
        if name == "secrets" and self.secrets is not None and keys and literal_key(keys[0]) is not None:
            secret = self.secrets.get(str(literal_key(keys[0])).upper(), ("lit", ""))
            return self._rest(self._charge(secret), keys[1:])
        if name == "env" and self.env is not None:
            key = literal_key(keys[0]) if keys else None
            if key is None:
                raise RewriteError("a called workflow's job if reads its env one by one (env.<name>)")
            text = self.env.get(key, next((v for k, v in self.env.items() if k.lower() == key.lower()), None))
            return self._rest(self._charge(template_node(text) if text is not None else ("lit", None)), keys[1:])
        if name == "needs" or (name == "jobs" and self.jobs_context):
            return self._job(name, keys)
        if name in ("matrix", "strategy"):
            values = self.matrix if name == "matrix" else self.strategy
            if values is None:
                return None
            value: Any = values
            while keys and isinstance(value, dict) and literal_key(keys[0]) is not None:
                value = value.get(str(literal_key(keys[0])), None)
                keys = keys[1:]
            return self._rest(literal(value), keys)
        return None

    def _job(self, name: str, keys: list[Node]) -> Node | None:
        """``needs.<job>...``: the run's job it became, or (for a caller) its result or outputs."""
        key = literal_key(keys[0]) if keys else None
        if key is None:
            if keys and (self.renames or any(u.outputs is not None for u in self.units.values())):
                raise RewriteError(
                    f"{name} must be named literally ({name}.<job>) in a workflow that calls or is "
                    "called as a reusable workflow"
                )
            return None
        unit = self.units.get(key.lower())
        if unit is None:
            return None
        if unit.plain is not None:
            if unit.plain == key:
                return None
            return self._rest(need_path(unit.plain), keys[1:])
        assert unit.outputs is not None
        what = literal_key(keys[1]) if len(keys) > 1 else None
        if what == "result":
            return self._rest(self._charge(unit.result), keys[2:])
        output = literal_key(keys[2]) if what == "outputs" and len(keys) > 2 else None
        if output is None:
            raise RewriteError(
                f"{name}.{key} calls a reusable workflow: read {name}.{key}.result or {name}.{key}.outputs.<name>"
            )
        return self._rest(self._charge(unit.outputs.get(output.lower(), ("lit", None))), keys[3:])

    # Text and YAML -------------------------------------------------------------------------

    def expression_text(self, expr: str) -> str:
        """An ``if:`` (bare or ``${{ }}``) rewritten; text that does not parse stays as it is,
        for the parser to refuse with its own message."""
        if not expr.strip() or unterminated(expr):
            return expr
        try:
            node = parse(condition_expression(expr))
            self._spent = 0
        except ExpressionError:
            return expr
        return self._checked(to_source(self._rewrite(node)))

    def _checked(self, text: str) -> str:
        if len(text) > MAX_EXPRESSION_LENGTH:
            raise RewriteError(
                f"an expression grows past {MAX_EXPRESSION_LENGTH} characters once the reusable workflows are expanded"
            )
        return text

    def template(self, text: str) -> Any:
        """``text`` with each ``${{ }}`` rewritten; a literal result goes in as text (a value that
        is one ``${{ }}`` of a literal becomes that value: ``timeout-minutes: ${{ inputs.n }}``)."""
        spans = find_interpolations(text)
        if not spans:
            return text
        out: list[str] = []
        pos = 0
        for start, end, body in spans:
            out.append(text[pos:start])
            try:
                self._spent = 0
                node = self._rewrite(parse(body))
            except ExpressionError:
                out.append(text[start:end])
                pos = end
                continue
            if len(spans) == 1 and text[:start].strip() == "" and text[end:].strip() == "" and node[0] == "lit":
                if _inlined(node) is not None:
                    return _typed(node)
            inlined = _inlined(node)
            out.append(inlined if inlined is not None else "${{ " + self._checked(to_source(node)) + " }}")
            pos = end
        out.append(text[pos:])
        return "".join(out)

    def text(self, text: str) -> str:
        value = self.template(text)
        return value if isinstance(value, str) else to_text(value)

    def raw(self, value: Any, condition: bool = False) -> Any:
        """A copy of a YAML value with its text rewritten (``if:`` values as expressions), keeping
        every line, so the parser's errors still point into the file."""
        if isinstance(value, YamlMap):
            copy = YamlMap()
            copy.line = value.line
            copy.key_lines = dict(value.key_lines)
            for key, item in value.items():
                copy[key] = self.raw(item, condition=key == "if")
            return copy
        if isinstance(value, YamlList):
            items = YamlList(self.raw(item) for item in value)
            items.line = value.line
            items.item_lines = list(value.item_lines)
            return items
        if isinstance(value, str):
            return self.expression_text(value) if condition else self.template(value)
        return value


# A caller's with: and secrets: -------------------------------------------------------------


def _input_value(ctx: FileContext, decl: CallInput, value: Any, line: int | None, key: str, sub: Substitution) -> Node:
    """One input's value as the called file's ``inputs.<name>`` holds it, typed."""
    if isinstance(value, str) and "${{" in value:
        node = sub.node(template_node(value), ctx, line, key)
        if decl.type == "boolean" and node[0] != "lit":
            # GitHub converts the value to a boolean; ``'false'`` must not read as true.
            return or_any([("cmp", "==", node, ("lit", True)), equals(node, "true")])
        if node[0] != "lit" or decl.type == "string":
            return node
        value = node[1]
    if decl.type == "boolean":
        if isinstance(value, str) and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        if not isinstance(value, bool):
            raise ctx.fail(line, key, "must be true or false (a boolean input)")
        return ("lit", value)
    if decl.type == "number":
        number = finite_number(value)
        if number is None and isinstance(value, str):
            number = finite_number(_float(value))
        if number is None:
            raise ctx.fail(line, key, "must be a number (a number input)")
        return ("lit", number)
    return ("lit", scalar_text(ctx, value, line, key))


def _float(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


def call_inputs(
    ctx: FileContext, where: str, raw: YamlMap, decl: CallDeclaration, path: str, sub: Substitution, needs: list[str]
) -> dict[str, Node]:
    """The called file's ``inputs``: the caller's ``with`` checked against its declarations
    (unknown names, required ones, types), else each default, else its type's empty value."""
    given = raw.get("with")
    wline = raw.key_lines.get("with", raw.line)
    if given is not None and not isinstance(given, YamlMap):
        raise ctx.fail(wline, f"{where}.with", "must be a mapping of input names to values")
    values: dict[str, Node] = {}
    for name, value, kline in named_entries(ctx, given or YamlMap(), f"{where}.with"):
        key = f"{where}.with.{name}"
        declared = decl.inputs.get(name.lower())
        if declared is None:
            known = ", ".join(i.name for i in decl.inputs.values()) or "none"
            raise ctx.fail(kline, key, f"not an input of {path} (its inputs: {known})")
        if isinstance(value, (YamlMap, YamlList)):
            raise ctx.fail(kline, key, "must be a string, number or boolean")
        if isinstance(value, str):
            check_text(ctx, value, kline, key, WITH_CONTEXTS, needs)
        values[declared.name.lower()] = _input_value(ctx, declared, value, kline, key, sub)
    for lowered, declared in decl.inputs.items():
        if lowered in values:
            continue
        if declared.default is not None:
            values[lowered] = _input_value(ctx, declared, declared.default, wline, f"{where}.with", sub)
        elif declared.required:
            raise ctx.fail(wline, f"{where}.with", f"input {declared.name!r} of {path} is required")
        else:
            values[lowered] = ("lit", {"boolean": False, "number": 0.0}.get(declared.type, ""))
    return values


def call_secrets(
    ctx: FileContext,
    where: str,
    raw: YamlMap,
    decl: CallDeclaration,
    path: str,
    sub: Substitution,
    inherited: dict[str, Node] | None,
    needs: list[str],
) -> dict[str, Node] | None:
    """The secrets the called file sees: ``inherit`` passes the caller's own (all of them, as on
    GitHub); a mapping passes those it names (declared ones only); without one, none."""
    given = raw.get("secrets")
    sline = raw.key_lines.get("secrets", raw.line)
    if given == "inherit":
        return inherited
    if given is not None and not isinstance(given, YamlMap):
        raise ctx.fail(sline, f"{where}.secrets", "must be 'inherit' or a mapping of secret names to values")
    passed: dict[str, Node] = {}
    for name, value, kline in named_entries(ctx, given or YamlMap(), f"{where}.secrets"):
        key = f"{where}.secrets.{name}"
        if name.upper() not in decl.secrets:
            known = ", ".join(decl.secrets) or "none"
            raise ctx.fail(kline, key, f"not a secret of {path} (its secrets: {known})")
        text = scalar_text(ctx, value, kline, key)
        check_text(ctx, text, kline, key, SECRETS_CONTEXTS, needs)
        passed[name.upper()] = sub.node(template_node(text), ctx, kline, key)
    for name, required in decl.secrets.items():
        if required and name not in passed:
            raise ctx.fail(sline, f"{where}.secrets", f"secret {name!r} of {path} is required")
    return passed
