"""Parsing ``.github/workflows/*.yml`` into a ``WorkflowSpec``: the ``run:`` subset of GitHub Actions.

Anything outside the subset is rejected with the file, 1-based line and key, so a run can fail
with a message a user can act on. YAML follows 1.2 booleans (``on:`` is a key, not ``True``).
Also: ``on.push`` branch/tag filters (``push_triggers``). ``uses:`` is checked here as a reference
only (``actions_language.action_refs``); the action itself is read when the push is listed
(``activities.ci.actions``). Light: PyYAML and pydantic only.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

import yaml

from actions_language.action_refs import ActionRefError, is_builtin, parse_uses
from actions_language.filters import MAX_PATTERNS, check_pattern, matches_any
from workflows.ci.expressions import (
    STATUS_FUNCTIONS,
    STRING_FUNCTIONS,
    VALUE_FUNCTIONS,
    WORKSPACE_FUNCTIONS,
    ExpressionError,
    condition_expression,
    context_paths,
    expressions_in,
    find_interpolations,
    function_names,
    parse,
    unterminated,
)
from workflows.ci.matrix import MatrixError, expand_matrix
from workflows.ci.types.spec import (
    ACTION_CACHE,
    MAX_JOBS_PER_WORKFLOW,
    MAX_STEPS_PER_JOB,
    ConcurrencySpec,
    DispatchInput,
    DispatchSpec,
    JobSpec,
    PushFilter,
    SpecError,
    StepSpec,
    StrategySpec,
    WorkflowSpec,
)

log = logging.getLogger(__name__)

MAX_WORKFLOW_BYTES = 512 * 1024
JOB_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
# GitHub keeps ids starting with '__' for itself.
RESERVED_ID_PREFIX = "__"
# Longest timeout a job or step may ask for (GitHub's own cap on a self-hosted job: 5 days);
# a larger number, ``+999...9`` included, means "as long as allowed".
MAX_TIMEOUT_MINUTES = 5 * 24 * 60
# Deepest YAML nesting read (GitHub's files are shallow; this keeps hostile ones from
# exhausting the parser's stack).
MAX_YAML_DEPTH = 64
# Most nodes a document may hold once its aliases are expanded (a real workflow has a few
# thousand; a "billion laughs" alias bomb has billions).
MAX_YAML_EXPANDED_NODES = 100_000
# Workflow commands GitHub disabled; a step that prints them would silently do nothing.
# (``::set-output`` and ``::save-state`` are deprecated but still work: ``actions_language.commands``.)
DISABLED_COMMANDS = re.compile(r"::(set-env|add-path)\b")
# Shells GitHub names that the sandbox runs (``python`` runs python3); a custom shell is a
# ``command [args] {0}`` template. GitHub's Windows shells cannot run here.
SHELLS = ("bash", "sh", "python")
UNAVAILABLE_SHELLS = ("pwsh", "powershell", "cmd")
CUSTOM_SHELL_COMMAND = re.compile(r"^[A-Za-z0-9_./+-]+$")
MAX_SHELL_LENGTH = 1024
SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

WORKFLOW_KEYS = {"name", "run-name", "on", "env", "jobs", "defaults", "concurrency", "permissions"}
# The longest run title kept (GitHub cuts run names too).
MAX_RUN_NAME_CHARS = 1024
JOB_KEYS = {
    "defaults",
    "strategy",
    "concurrency",
    "permissions",
    "name",
    "needs",
    "runs-on",
    "env",
    "if",
    "timeout-minutes",
    "continue-on-error",
    "outputs",
    "steps",
    "network",
    "environment",
}
STEP_KEYS = {"id", "name", "run", "env", "working-directory", "shell", "if", "continue-on-error", "timeout-minutes"}
USES_STEP_KEYS = {"id", "name", "uses", "with", "env", "if", "continue-on-error", "timeout-minutes"}
# ``with:`` inputs of actions/cache leasehold implements (key and path are required).
CACHE_INPUTS = {"key", "path", "restore-keys"}
ENVIRONMENT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
PUSH_KEYS = {"branches", "branches-ignore", "tags", "tags-ignore", "paths", "paths-ignore"}
DISPATCH_INPUT_KEYS = {"description", "required", "default", "type", "options", "deprecationMessage"}
DISPATCH_INPUT_TYPES = ("string", "boolean", "choice", "number", "environment")
# GitHub's cap on workflow_dispatch inputs.
MAX_DISPATCH_INPUTS = 25
INPUT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
PERMISSION_SCOPES = {
    "actions",
    "attestations",
    "checks",
    "contents",
    "deployments",
    "discussions",
    "id-token",
    "issues",
    "models",
    "packages",
    "pages",
    "pull-requests",
    "repository-projects",
    "security-events",
    "statuses",
}
PERMISSION_LEVELS = {"read", "write", "none"}
# Scopes GitHub gives fewer levels: id-token is write or none, models read or none.
PERMISSION_LIMITS = {"id-token": {"write", "none"}, "models": {"read", "none"}}
# Most jobs one matrix may expand to (GitHub's limit).
MAX_MATRIX_JOBS = 256


# Which contexts each place may use (GitHub's context availability, reduced to the subset).
WORKFLOW_ENV_CONTEXTS = {"github", "vars", "secrets", "inputs"}
JOB_IF_CONTEXTS = {"github", "vars", "needs", "env", "inputs"}
JOB_ENV_CONTEXTS = {"github", "vars", "needs", "env", "secrets", "inputs", "strategy", "matrix"}
STEP_CONTEXTS = {"github", "vars", "needs", "env", "steps", "job", "runner", "secrets", "inputs", "strategy", "matrix"}
# A step's timeout-minutes and continue-on-error (GitHub's list: no secrets).
STEP_LIMIT_CONTEXTS = STEP_CONTEXTS - {"secrets"}
OUTPUT_CONTEXTS = {"github", "vars", "needs", "env", "steps", "job", "runner", "inputs", "strategy", "matrix"}
# Where a strategy and a workflow's concurrency may look (no env, no secrets).
STRATEGY_CONTEXTS = {"github", "vars", "needs", "inputs"}
WORKFLOW_CONCURRENCY_CONTEXTS = {"github", "vars", "inputs"}
# ``run-name``: GitHub's list.
RUN_NAME_CONTEXTS = {"github", "vars", "inputs"}
JOB_CONCURRENCY_CONTEXTS = {"github", "vars", "needs", "inputs", "strategy", "matrix"}
# A job's runs-on, timeout-minutes and continue-on-error, evaluated by the run when it starts.
JOB_START_CONTEXTS = {"github", "vars", "needs", "inputs", "strategy", "matrix"}
# defaults.run.working-directory: a job's defaults may use what its env may (minus secrets).
WORKFLOW_DEFAULTS_CONTEXTS = {"github", "vars", "inputs"}
JOB_DEFAULTS_CONTEXTS = {"github", "vars", "needs", "env", "inputs", "strategy", "matrix"}


class WorkflowSpecError(ValueError):
    """A rejected workflow file; ``error`` says where and why."""

    def __init__(self, error: SpecError) -> None:
        super().__init__(error.render())
        self.error = error


class _Map(dict):
    """A mapping that remembers the line of itself and of each key."""

    line: int = 0
    key_lines: dict[Any, int]


class _List(list):
    line: int = 0
    item_lines: list[int]


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans, line numbers and duplicate-key errors; reads anchors
    and aliases as GitHub does (since 2025-09-18; no merge keys), bounded so that an alias bomb
    or a recursive alias fails, refuses deep nesting, and turns every constructor failure into
    a YAML error."""

    _depth = 0

    def construct_document(self, node: yaml.Node) -> Any:
        _check_expanded(node)
        return super().construct_document(node)

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        event = self.peek_event()
        depth = self._depth
        if depth >= MAX_YAML_DEPTH:
            message = f"nesting deeper than {MAX_YAML_DEPTH} levels"
            raise yaml.composer.ComposerError(None, None, message, event.start_mark)
        self._depth = depth + 1
        try:
            return yaml.composer.Composer.compose_node(self, parent, index)
        finally:
            self._depth = depth

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # A tag the value does not fit (``!!bool test``, ``!!int x``, a huge ``!!float``) or any other
        # constructor failure becomes a YAML error at the node's line, never another exception.
        try:
            return yaml.constructor.SafeConstructor.construct_object(self, node, deep)
        except yaml.YAMLError:
            raise
        except Exception as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {node.tag.rsplit(':', 1)[-1]} value {str(node.value)[:40]!r}", node.start_mark
            ) from exc


def _check_expanded(root: yaml.Node) -> None:
    """Refuse a document whose aliases, expanded, would exceed ``MAX_YAML_EXPANDED_NODES`` nodes
    or ``MAX_YAML_DEPTH`` levels, or refer to themselves. Each node is measured once (aliases
    share their anchor's node), so the check costs what the text does, not what it expands to."""
    sizes: dict[int, tuple[int, int]] = {}
    busy: set[int] = set()

    def measure(node: yaml.Node) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in busy:
            raise yaml.composer.ComposerError(None, None, "an alias refers to a node that contains it", node.start_mark)
        busy.add(key)
        size, depth = 1, 1
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        for child in children:
            child_size, child_depth = measure(child)
            size += child_size
            depth = max(depth, child_depth + 1)
            if size > MAX_YAML_EXPANDED_NODES or depth > MAX_YAML_DEPTH:
                what = (
                    f"more than {MAX_YAML_EXPANDED_NODES} nodes"
                    if size > MAX_YAML_EXPANDED_NODES
                    else (f"nesting deeper than {MAX_YAML_DEPTH} levels")
                )
                raise yaml.composer.ComposerError(None, None, f"aliases expand to {what}", node.start_mark)
        busy.discard(key)
        sizes[key] = (size, depth)
        return size, depth

    # Deep but legal documents stay far below the interpreter's recursion limit (MAX_YAML_DEPTH).
    measure(root)


# YAML 1.1 reads on/off/yes/no as booleans; GitHub (YAML 1.2) does not.
_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:bool"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _Map:
    result = _Map()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, _value in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise yaml.constructor.ConstructorError(
                None, None, "YAML merge keys ('<<') are not supported (GitHub does not read them)", key_node.start_mark
            )
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)) or key is None:
            raise yaml.constructor.ConstructorError(None, None, "mapping keys must be scalars", key_node.start_mark)
        if key in result:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


def _construct_list(loader: _Loader, node: yaml.SequenceNode) -> _List:
    result = _List(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


# YAML 1.2 core schema numbers (GitHub's): no 1.1 octal '010', sexagesimal or '1_000'; '1e3'
# is a float without a dot.
_INT_12 = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_12 = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
for _tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
    for _first in list(_Loader.yaml_implicit_resolvers):
        _Loader.yaml_implicit_resolvers[_first] = [
            (tag, rx) for tag, rx in _Loader.yaml_implicit_resolvers[_first] if tag != _tag
        ]
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", _INT_12, list("-+0123456789"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int | float:
    text = str(loader.construct_scalar(node))
    if text.startswith("0x"):
        return int(text[2:], 16)
    if text.startswith("0o"):
        return int(text[2:], 8)
    if not re.fullmatch(r"[-+]?[0-9]+", text):
        raise ValueError(f"not an integer: {text!r}")
    if len(text) > 4000:
        # GitHub reads numbers as doubles: an integer this long is +-Infinity.
        return -math.inf if text.startswith("-") else math.inf
    return int(text, 10)


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_list)


class _Ctx:
    """Where we are in the file, to name file, line and key in errors."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, line: int | None, key: str | None, message: str) -> WorkflowSpecError:
        return WorkflowSpecError(SpecError(file=self.path, line=line, key=key, message=message))


def _line_of(container: Any, key: Any) -> int | None:
    if isinstance(container, _Map):
        return container.key_lines.get(key, container.line)
    if isinstance(container, _List) and isinstance(key, int) and key < len(container.item_lines):
        return container.item_lines[key]
    return getattr(container, "line", None)


def _number_text(value: int | float) -> str:
    """A YAML number as GitHub prints it: ``1.0`` is ``1``; huge integers stay digits."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(value)
    return str(value) if value.bit_length() < 10_000 else ("-" if value < 0 else "") + "Infinity"


def _scalar_text(ctx: _Ctx, value: Any, line: int | None, key: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return _number_text(value)
    if value is None:
        return ""
    raise ctx.fail(line, key, "must be a string, number or boolean")


def _string_list(ctx: _Ctx, value: Any, line: int | None, key: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        return [v if isinstance(v, str) else _number_text(v) for v in value]
    raise ctx.fail(line, key, "must be a string or a list of strings")


def _check_keys(ctx: _Ctx, mapping: _Map, allowed: set[str], where: str) -> None:
    for key in mapping:
        if key not in allowed:
            hint = {
                "uses": "'uses:' is supported only in steps (reusable workflows are not supported)",
                "services": "'services' is not supported: this deployment has no container backend "
                "(jobs run directly in a bubblewrap sandbox)",
                "container": "'container' is not supported: this deployment has no container backend "
                "(jobs run directly in a bubblewrap sandbox)",
                "with": "'with' is not supported (it belongs to 'uses:' actions)",
            }.get(str(key), f"unsupported key (supported: {', '.join(sorted(allowed))})")
            raise ctx.fail(mapping.key_lines.get(key, mapping.line), f"{where}{key}", hint)


def _check_expression(
    ctx: _Ctx, expr: str, line: int | None, key: str, contexts: set[str], needs: list[str] | None
) -> None:
    try:
        node = parse(expr)
    except ExpressionError as exc:
        raise ctx.fail(line, key, str(exc)) from None
    # Only steps run where the workspace is (STEP_CONTEXTS is the one set with both).
    in_step = "steps" in contexts and "secrets" in contexts
    for name in function_names(node):
        if name in WORKSPACE_FUNCTIONS and not in_step:
            raise ctx.fail(line, key, f"{name}() is only available in steps")
        if name not in STATUS_FUNCTIONS | STRING_FUNCTIONS | VALUE_FUNCTIONS | WORKSPACE_FUNCTIONS:
            raise ctx.fail(line, key, f"unknown function {name}()")
    for path in context_paths(node):
        root = path[0]
        if root not in contexts:
            allowed = ", ".join(sorted(contexts))
            raise ctx.fail(line, key, f"context {root!r} is not available here (available: {allowed})")
        if (
            root == "needs"
            and needs is not None
            and len(path) > 1
            and path[1].lower() not in {n.lower() for n in needs}
        ):
            raise ctx.fail(line, key, f"needs.{path[1]} is not in this job's 'needs'")
        if root == "secrets" and (len(path) < 2 or not SECRET_NAME.match(path[1])):
            # The job fetches exactly the secrets it names; a computed name cannot be known.
            raise ctx.fail(line, key, "secrets must be named literally, as secrets.NAME")


def _check_text(ctx: _Ctx, text: str, line: int | None, key: str, contexts: set[str], needs: list[str] | None) -> None:
    if unterminated(text):
        raise ctx.fail(line, key, "unterminated '${{' expression")
    for expr in expressions_in(text):
        _check_expression(ctx, expr, line, key, contexts, needs)


def _env(
    ctx: _Ctx, value: Any, line: int | None, where: str, contexts: set[str], needs: list[str] | None
) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, _Map):
        raise ctx.fail(line, where, "must be a mapping of variable names to values")
    env: dict[str, str] = {}
    for k, v in value.items():
        kline = value.key_lines.get(k)
        name = _scalar_text(ctx, k, kline, where)
        # GitHub takes any name ('root-env' too); the environment itself cannot hold '=' or NUL.
        if not name or "=" in name or "\0" in name:
            raise ctx.fail(kline, f"{where}.{name}", "invalid environment variable name (empty, or holds '=' or NUL)")
        text = _scalar_text(ctx, v, kline, f"{where}.{name}")
        _check_text(ctx, text, kline, f"{where}.{name}", contexts, needs)
        env[name] = text
    return env


def _positive_number(ctx: _Ctx, value: Any, line: int | None, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value <= 0:
        raise ctx.fail(line, key, "must be a positive number of minutes")
    # Compared before any conversion: an integer of hundreds of digits does not fit a float.
    return float(MAX_TIMEOUT_MINUTES) if value >= MAX_TIMEOUT_MINUTES else float(value)


def _bool(ctx: _Ctx, value: Any, line: int | None, key: str) -> bool:
    if not isinstance(value, bool):
        raise ctx.fail(line, key, "must be true or false (expressions are not supported here)")
    return value


def _if(ctx: _Ctx, value: Any, line: int | None, key: str, contexts: set[str], needs: list[str] | None) -> str | None:
    """An ``if:`` as the expression it means; ``None`` for an empty one (GitHub: ``success()``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return None
    if not isinstance(value, (str, int, float)):
        raise ctx.fail(line, key, "must be an expression")
    text = _scalar_text(ctx, value, line, key)
    if not text.strip():
        return None
    if unterminated(text):
        raise ctx.fail(line, key, "unterminated '${{' expression")
    expr = condition_expression(text)
    _check_expression(ctx, expr, line, key, contexts, needs)
    return expr


def _push_filter(ctx: _Ctx, on: Any, line: int | None) -> PushFilter:
    if isinstance(on, str):
        return PushFilter(enabled=on == "push")
    if isinstance(on, list):
        events = _string_list(ctx, on, line, "on")
        return PushFilter(enabled="push" in events)
    if not isinstance(on, _Map):
        raise ctx.fail(line, "on", "must be an event name, a list of event names or a mapping")
    if "push" not in on:
        return PushFilter(enabled=False)
    push = on["push"]
    pline = on.key_lines.get("push")
    if push is None:
        return PushFilter(enabled=True)
    if not isinstance(push, _Map):
        raise ctx.fail(pline, "on.push", "must be a mapping of filters or empty")
    _check_keys(ctx, push, PUSH_KEYS, "on.push.")
    for a, b in (("branches", "branches-ignore"), ("tags", "tags-ignore"), ("paths", "paths-ignore")):
        if a in push and b in push:
            raise ctx.fail(push.key_lines[b], f"on.push.{b}", f"cannot be used together with '{a}'")
    values: dict[str, list[str] | None] = {}
    for key in PUSH_KEYS:
        values[key] = _patterns(ctx, push[key], push.key_lines.get(key), f"on.push.{key}") if key in push else None
    return PushFilter(
        enabled=True,
        branches=values["branches"],
        branches_ignore=values["branches-ignore"],
        tags=values["tags"],
        tags_ignore=values["tags-ignore"],
        paths=values["paths"],
        paths_ignore=values["paths-ignore"],
        paths_line=_paths_line(push),
    )


def _patterns(ctx: _Ctx, value: Any, line: int | None, key: str) -> list[str]:
    """A filter's glob patterns (``actions_language.filters``), bounded in number and length."""
    patterns = _string_list(ctx, value, line, key)
    if len(patterns) > MAX_PATTERNS:
        raise ctx.fail(line, key, f"at most {MAX_PATTERNS} patterns")
    for pattern in patterns:
        why = check_pattern(pattern)
        if why is not None:
            raise ctx.fail(line, key, why)
    return patterns


def _finite(value: Any) -> float | None:
    """``value`` as a finite double (GitHub's numbers), or ``None`` when it is not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _dispatch(ctx: _Ctx, on: Any) -> DispatchSpec | None:
    """``on.workflow_dispatch`` and its inputs; ``None`` when the file cannot be run by hand."""
    if isinstance(on, str):
        return DispatchSpec() if on == "workflow_dispatch" else None
    if isinstance(on, list):
        return DispatchSpec() if "workflow_dispatch" in on else None
    if not isinstance(on, _Map) or "workflow_dispatch" not in on:
        return None
    raw = on["workflow_dispatch"]
    line = on.key_lines.get("workflow_dispatch")
    if raw is None:
        return DispatchSpec()
    if not isinstance(raw, _Map):
        raise ctx.fail(line, "on.workflow_dispatch", "must be a mapping (with 'inputs') or empty")
    _check_keys(ctx, raw, {"inputs"}, "on.workflow_dispatch.")
    inputs_raw = raw.get("inputs")
    iline = raw.key_lines.get("inputs")
    if inputs_raw is None:
        return DispatchSpec()
    if not isinstance(inputs_raw, _Map):
        raise ctx.fail(iline, "on.workflow_dispatch.inputs", "must be a mapping of input names to definitions")
    if len(inputs_raw) > MAX_DISPATCH_INPUTS:
        raise ctx.fail(iline, "on.workflow_dispatch.inputs", f"at most {MAX_DISPATCH_INPUTS} inputs")
    inputs: dict[str, DispatchInput] = {}
    for k, v in inputs_raw.items():
        kline = inputs_raw.key_lines.get(k)
        name = _scalar_text(ctx, k, kline, "on.workflow_dispatch.inputs")
        where = f"on.workflow_dispatch.inputs.{name}"
        if not INPUT_NAME.match(name):
            raise ctx.fail(kline, where, "input names start with a letter or '_' and hold letters, digits, '_', '-'")
        if name.lower() in {n.lower() for n in inputs}:
            raise ctx.fail(kline, where, "duplicate input name (names are case-insensitive)")
        inputs[name] = _dispatch_input(ctx, v, kline, where)
    return DispatchSpec(inputs=inputs)


def _dispatch_input(ctx: _Ctx, raw: Any, line: int | None, where: str) -> DispatchInput:
    if raw is None:
        return DispatchInput()
    if not isinstance(raw, _Map):
        raise ctx.fail(line, where, "must be a mapping (description, required, default, type, options)")
    _check_keys(ctx, raw, DISPATCH_INPUT_KEYS, f"{where}.")

    def ln(key: str) -> int | None:
        return raw.key_lines.get(key, raw.line)

    kind = _scalar_text(ctx, raw["type"], ln("type"), f"{where}.type") if "type" in raw else "string"
    if kind not in DISPATCH_INPUT_TYPES:
        raise ctx.fail(ln("type"), f"{where}.type", f"supported types: {', '.join(DISPATCH_INPUT_TYPES)}")
    options: list[str] = []
    if "options" in raw:
        if kind != "choice":
            raise ctx.fail(ln("options"), f"{where}.options", "only a 'choice' input has options")
        if not isinstance(raw["options"], _List):
            raise ctx.fail(ln("options"), f"{where}.options", "must be a list of strings")
        options = [_scalar_text(ctx, o, ln("options"), f"{where}.options") for o in raw["options"]]
    if kind == "choice" and not options:
        raise ctx.fail(ln("type"), f"{where}.options", "a 'choice' input needs a non-empty list of options")
    default: str | bool | float | None = None
    if "default" in raw and raw["default"] is not None:
        value, dline = raw["default"], ln("default")
        if kind == "boolean":
            if not isinstance(value, bool):
                raise ctx.fail(dline, f"{where}.default", "a boolean input's default must be true or false")
            default = value
        elif kind == "number":
            number = _finite(value)
            if number is None:
                raise ctx.fail(dline, f"{where}.default", "a number input's default must be a finite number")
            default = number
        else:
            if not isinstance(value, (str, int, float)):
                raise ctx.fail(dline, f"{where}.default", "must be a string")
            default = _scalar_text(ctx, value, dline, f"{where}.default")
            if kind == "choice" and default not in options:
                raise ctx.fail(dline, f"{where}.default", f"{default!r} is not one of the options")
    return DispatchInput(
        type=kind,
        description=_scalar_text(ctx, raw["description"], ln("description"), f"{where}.description")
        if "description" in raw
        else "",
        required=_bool(ctx, raw["required"], ln("required"), f"{where}.required") if "required" in raw else False,
        default=default,
        options=options,
    )


PULL_REQUEST_KEYS = {"branches", "branches-ignore", "types", "paths", "paths-ignore"}
PULL_REQUEST_TYPES = ("opened", "synchronize", "reopened")


def _pull_request_filter(ctx: _Ctx, on: Any) -> PushFilter:
    if isinstance(on, str):
        return PushFilter(enabled=on == "pull_request")
    if isinstance(on, list):
        return PushFilter(enabled="pull_request" in on)
    if not isinstance(on, _Map) or "pull_request" not in on:
        return PushFilter(enabled=False)
    pr = on["pull_request"]
    line = on.key_lines.get("pull_request")
    if pr is None:
        return PushFilter(enabled=True)
    if not isinstance(pr, _Map):
        raise ctx.fail(line, "on.pull_request", "must be a mapping of filters or empty")
    _check_keys(ctx, pr, PULL_REQUEST_KEYS, "on.pull_request.")
    for a, b in (("branches", "branches-ignore"), ("paths", "paths-ignore")):
        if a in pr and b in pr:
            raise ctx.fail(pr.key_lines[b], f"on.pull_request.{b}", f"cannot be used together with '{a}'")
    values = {
        k: (_string_list if k == "types" else _patterns)(ctx, pr[k], pr.key_lines.get(k), f"on.pull_request.{k}")
        if k in pr
        else None
        for k in PULL_REQUEST_KEYS
    }
    for t in values["types"] or []:
        if t not in PULL_REQUEST_TYPES:
            raise ctx.fail(
                pr.key_lines.get("types"), "on.pull_request.types", f"supported types: {', '.join(PULL_REQUEST_TYPES)}"
            )
    return PushFilter(
        enabled=True,
        branches=values["branches"],
        branches_ignore=values["branches-ignore"],
        types=values["types"],
        paths=values["paths"],
        paths_ignore=values["paths-ignore"],
        paths_line=_paths_line(pr),
    )


def _paths_line(event: _Map) -> int | None:
    """The line of an event's ``paths`` (or ``paths-ignore``) filter, for errors about it."""
    key = "paths" if "paths" in event else "paths-ignore" if "paths-ignore" in event else None
    return event.key_lines.get(key) if key else None


def pull_request_triggers(pr: PushFilter, base_branch: str, action: str) -> bool:
    """Whether a pull request into ``base_branch`` with ``action`` triggers the workflow."""
    if not pr.enabled or action not in (pr.types or PULL_REQUEST_TYPES):
        return False
    if pr.branches is not None:
        return _matches_any(pr.branches, base_branch)
    if pr.branches_ignore is not None:
        return not _matches_any(pr.branches_ignore, base_branch)
    return True


def _run_script(ctx: _Ctx, value: Any, line: int | None, key: str) -> str:
    """A step's ``run:`` text (a workflow's or a composite action's): not empty, and none of the
    workflow commands GitHub disabled (printing one would silently do nothing)."""
    run = _scalar_text(ctx, value, line, key)
    if not run.strip():
        raise ctx.fail(line, key, "must not be empty")
    disabled = DISABLED_COMMANDS.search(run)
    if disabled:
        replacement = {"set-env": "$GITHUB_ENV", "add-path": "$GITHUB_PATH"}
        raise ctx.fail(
            line,
            key,
            f"the '::{disabled.group(1)}::' workflow command is disabled (as on GitHub); "
            f"write to {replacement[disabled.group(1)]} instead",
        )
    return run


def _step(
    ctx: _Ctx, job_id: str, index: int, raw: Any, line: int | None, needs: list[str], defaults: _RunDefaults
) -> StepSpec:
    where = f"jobs.{job_id}.steps[{index}]"
    if not isinstance(raw, _Map):
        raise ctx.fail(line, where, "must be a mapping")
    if "uses" in raw:
        return _uses_step(ctx, where, index, raw, needs)
    _check_keys(ctx, raw, STEP_KEYS, f"{where}.")

    def ln(key: str) -> int | None:
        return raw.key_lines.get(key, raw.line)

    if "run" not in raw:
        raise ctx.fail(raw.line, where, "a step needs 'run:' or 'uses:'")
    run = _run_script(ctx, raw["run"], ln("run"), f"{where}.run")
    _check_text(ctx, run, ln("run"), f"{where}.run", STEP_CONTEXTS, needs)
    step_id = _step_id(ctx, raw, where, ln("id")) if "id" in raw else None
    # A step's own shell and working-directory win over defaults.run (the job's, then the workflow's).
    shell = _shell(ctx, raw["shell"], ln("shell"), f"{where}.shell") if "shell" in raw else defaults.shell or "bash"
    wd = defaults.working_directory
    if "working-directory" in raw:
        wd = _scalar_text(ctx, raw["working-directory"], ln("working-directory"), f"{where}.working-directory")
        _check_text(ctx, wd, ln("working-directory"), f"{where}.working-directory", STEP_CONTEXTS, needs)
    first_line = run.strip().splitlines()[0]
    return StepSpec(
        index=index,
        id=step_id,
        name=_scalar_text(ctx, raw["name"], ln("name"), f"{where}.name") if "name" in raw else f"Run {first_line}",
        run=run,
        env=_env(ctx, raw.get("env"), ln("env"), f"{where}.env", STEP_CONTEXTS, needs),
        working_directory=wd,
        shell=shell,
        if_expr=_if(ctx, raw["if"], ln("if"), f"{where}.if", STEP_CONTEXTS, needs) if "if" in raw else None,
        line=raw.line,
        **_step_limits(ctx, raw, where, needs),
    )


def _uses_step(ctx: _Ctx, where: str, index: int, raw: _Map, needs: list[str]) -> StepSpec:
    """``uses:`` of an action: its reference is checked here, the action itself at listing."""
    if "run" in raw:
        raise ctx.fail(raw.key_lines.get("run"), f"{where}.run", "a step has either 'run:' or 'uses:', not both")
    _check_keys(ctx, raw, USES_STEP_KEYS, f"{where}.")

    def ln(key: str) -> int | None:
        return raw.key_lines.get(key, raw.line)

    uses = _scalar_text(ctx, raw["uses"], ln("uses"), f"{where}.uses").strip()
    action = uses.partition("@")[0]
    if not is_builtin(uses):
        # Any other action is resolved (and its action.yml checked) when the push is listed.
        try:
            parse_uses(uses)
        except ActionRefError as exc:
            raise ctx.fail(ln("uses"), f"{where}.uses", f"action {uses!r}: {exc}") from None
    inputs: dict[str, str] = {}
    if "with" in raw:
        given = raw["with"]
        if not isinstance(given, _Map):
            raise ctx.fail(ln("with"), f"{where}.with", "must be a mapping of inputs")
        for k, v in given.items():
            kline = given.key_lines.get(k)
            name = str(k)
            if action.lower() == ACTION_CACHE and name not in CACHE_INPUTS:
                raise ctx.fail(
                    kline, f"{where}.with.{name}", f"unsupported input (supported: {', '.join(sorted(CACHE_INPUTS))})"
                )
            text = _scalar_text(ctx, v, kline, f"{where}.with.{name}")
            _check_text(ctx, text, kline, f"{where}.with.{name}", STEP_CONTEXTS, needs)
            inputs[name] = text
    if action.lower() == ACTION_CACHE:
        for required in ("key", "path"):
            if not inputs.get(required, "").strip():
                raise ctx.fail(ln("with"), f"{where}.with.{required}", "actions/cache needs this input")
    return StepSpec(
        index=index,
        id=_step_id(ctx, raw, where, ln("id")) if "id" in raw else None,
        name=_scalar_text(ctx, raw["name"], ln("name"), f"{where}.name") if "name" in raw else f"Run {uses}",
        uses=uses,
        with_inputs=inputs,
        env=_env(ctx, raw.get("env"), ln("env"), f"{where}.env", STEP_CONTEXTS, needs),
        if_expr=_if(ctx, raw["if"], ln("if"), f"{where}.if", STEP_CONTEXTS, needs) if "if" in raw else None,
        line=raw.line,
        **_step_limits(ctx, raw, where, needs),
    )


def _step_limits(ctx: _Ctx, raw: _Map, where: str, needs: list[str]) -> dict[str, Any]:
    """A step's ``timeout-minutes`` and ``continue-on-error``: values, or each one ``${{ }}``
    (``${{ matrix.experimental }}``) that the job evaluates when the step starts."""
    limits: dict[str, Any] = {}
    for key, field in (("timeout-minutes", "timeout_minutes"), ("continue-on-error", "continue_on_error")):
        if key not in raw:
            continue
        value, line = raw[key], raw.key_lines.get(key, raw.line)
        expr = _start_expression(ctx, value, line, f"{where}.{key}", needs, STEP_LIMIT_CONTEXTS)
        if expr is not None:
            limits[f"{field}_expr"] = expr
        elif field == "timeout_minutes":
            limits[field] = _positive_number(ctx, value, line, f"{where}.{key}")
        else:
            limits[field] = _bool(ctx, value, line, f"{where}.{key}")
    return limits


def _step_id(ctx: _Ctx, raw: _Map, where: str, line: int | None) -> str:
    step_id = _scalar_text(ctx, raw["id"], line, f"{where}.id")
    if not JOB_ID.match(step_id):
        raise ctx.fail(line, f"{where}.id", "must start with a letter or '_' and hold letters, digits, '_', '-'")
    if step_id.startswith(RESERVED_ID_PREFIX):
        raise ctx.fail(line, f"{where}.id", "ids starting with '__' are reserved")
    return step_id


def _environment(ctx: _Ctx, value: Any, line: int | None, where: str) -> str | None:
    """``environment: name`` or ``environment: {name: ..., url: ...}`` (the url is ignored); an
    empty one means none, as on GitHub."""
    if isinstance(value, _Map):
        for k in value:
            if k not in ("name", "url"):
                raise ctx.fail(value.key_lines.get(k), f"{where}.{k}", "supported: name, url")
        value = value.get("name")
    if value is None or value == "":
        return None
    name = _scalar_text(ctx, value, line, where) if isinstance(value, str) else None
    if name is None or not ENVIRONMENT_NAME.match(name):
        raise ctx.fail(line, where, "must be an environment name (letters, digits, '_', '-', '.'; no expressions)")
    return name


# Job environment: defaults.run and shells ------------------------------------------------------


def _shell(ctx: _Ctx, value: Any, line: int | None, key: str) -> str:
    """A shell the sandbox can run: ``bash``, ``sh``, ``python`` or ``command [args] {0}``."""
    text = _scalar_text(ctx, value, line, key).strip()
    if "${{" in text:
        raise ctx.fail(line, key, "expressions are not allowed in 'shell'")
    if text in SHELLS:
        return text
    if text.lower() in UNAVAILABLE_SHELLS:
        raise ctx.fail(line, key, f"shell {text!r} cannot run on this deployment's Linux runners")
    words = text.split()
    if (
        "{0}" not in text
        or len(text) > MAX_SHELL_LENGTH
        or any(c in text for c in "\0\n\r")
        or not CUSTOM_SHELL_COMMAND.match(words[0])
    ):
        raise ctx.fail(
            line,
            key,
            f"unsupported shell {text!r} (supported: bash, sh, python, or a custom 'command [options] {{0}}')",
        )
    # Kept as written: quoted arguments are split when the step runs (``job.split_arguments``).
    return text


class _RunDefaults:
    """``defaults.run`` in force for a job's ``run:`` steps (the job's over the workflow's)."""

    def __init__(self, shell: str | None = None, working_directory: str | None = None) -> None:
        self.shell = shell
        self.working_directory = working_directory

    def over(self, outer: _RunDefaults) -> _RunDefaults:
        return _RunDefaults(self.shell or outer.shell, self.working_directory or outer.working_directory)


def _defaults(
    ctx: _Ctx, raw: Any, line: int | None, where: str, contexts: set[str], needs: list[str] | None
) -> _RunDefaults:
    if raw is None:
        return _RunDefaults()
    if not isinstance(raw, _Map):
        raise ctx.fail(line, where, "must be a mapping with 'run'")
    _check_keys(ctx, raw, {"run"}, f"{where}.")
    run = raw.get("run")
    rline = raw.key_lines.get("run", line)
    if run is None:
        return _RunDefaults()
    if not isinstance(run, _Map):
        raise ctx.fail(rline, f"{where}.run", "must be a mapping (shell, working-directory)")
    _check_keys(ctx, run, {"shell", "working-directory"}, f"{where}.run.")
    shell = _shell(ctx, run["shell"], run.key_lines.get("shell"), f"{where}.run.shell") if "shell" in run else None
    wd = None
    if "working-directory" in run:
        wline = run.key_lines.get("working-directory")
        wd = _scalar_text(ctx, run["working-directory"], wline, f"{where}.run.working-directory")
        _check_text(ctx, wd, wline, f"{where}.run.working-directory", contexts, needs)
    return _RunDefaults(shell, wd or None)


# Parsed now, run later: strategy, concurrency, permissions ----------------------------------------


def _plain(ctx: _Ctx, value: Any, line: int | None, key: str) -> Any:
    """A matrix value as JSON holds it (mappings with string keys, lists, finite numbers)."""
    if isinstance(value, dict):
        return {_scalar_text(ctx, k, line, key): _plain(ctx, v, line, key) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(ctx, v, line, key) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = _finite(value)
        if number is None:
            return _number_text(value)
        return value if isinstance(value, int) and abs(value) < 2**53 else number
    return value


def _has_expression(value: Any) -> bool:
    if isinstance(value, str):
        return "${{" in value
    if isinstance(value, dict):
        return any(_has_expression(k) or _has_expression(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_expression(v) for v in value)
    return False


def _check_values(ctx: _Ctx, value: Any, line: int | None, key: str, needs: list[str]) -> None:
    """Every ``${{ }}`` inside a matrix value is valid where a strategy is evaluated."""
    if isinstance(value, str):
        _check_text(ctx, value, line, key, STRATEGY_CONTEXTS, needs)
    elif isinstance(value, dict):
        for v in value.values():
            _check_values(ctx, v, line, key, needs)
    elif isinstance(value, list):
        for v in value:
            _check_values(ctx, v, line, key, needs)


def _whole_expression(ctx: _Ctx, value: Any, line: int | None, key: str, needs: list[str], what: str) -> str:
    """A value that must be one ``${{ }}`` expression (``fromJSON(...)``) standing for ``what``."""
    text = value.strip() if isinstance(value, str) else ""
    found = find_interpolations(text)
    if len(found) != 1 or found[0][0] != 0 or found[0][1] != len(text):
        raise ctx.fail(line, key, f"must be {what} or a single ${{{{ }}}} expression such as fromJSON(...)")
    _check_text(ctx, text, line, key, STRATEGY_CONTEXTS, needs)
    return text


def _entries(ctx: _Ctx, value: Any, line: int | None, key: str, needs: list[str]) -> list[dict[str, Any]] | str:
    """``include`` or ``exclude``: a list of mappings, or one expression."""
    if isinstance(value, str):
        return _whole_expression(ctx, value, line, key, needs, "a list of mappings")
    if not isinstance(value, _List) or not all(isinstance(e, _Map) for e in value):
        raise ctx.fail(line, key, "must be a list of mappings")
    _check_values(ctx, value, line, key, needs)
    return [_plain(ctx, e, line, key) for e in value]


def _strategy(ctx: _Ctx, raw: Any, line: int | None, where: str, needs: list[str]) -> StrategySpec | None:
    """The job's strategy; ``None`` for one without a matrix (``fail-fast``/``max-parallel``
    alone, which GitHub accepts and which mean nothing for a single job: they are checked all
    the same)."""
    if not isinstance(raw, _Map):
        raise ctx.fail(line, where, "must be a mapping (matrix, fail-fast, max-parallel)")
    _check_keys(ctx, raw, {"matrix", "fail-fast", "max-parallel"}, f"{where}.")
    spec = StrategySpec(line=line)
    if "matrix" not in raw:
        _strategy_options(ctx, raw, spec, where, needs)
        return None
    matrix, mline, mkey = raw["matrix"], raw.key_lines.get("matrix"), f"{where}.matrix"
    if isinstance(matrix, str):
        spec.matrix_expression = _whole_expression(ctx, matrix, mline, mkey, needs, "a mapping")
    elif isinstance(matrix, _Map):
        for k, v in matrix.items():
            kline = matrix.key_lines.get(k, mline)
            name = _scalar_text(ctx, k, kline, mkey)
            if name in ("include", "exclude"):
                setattr(spec, name, _entries(ctx, v, kline, f"{mkey}.{name}", needs))
            elif isinstance(v, str):
                spec.axes[name] = _whole_expression(ctx, v, kline, f"{mkey}.{name}", needs, "a list of values")
            elif isinstance(v, _List):
                if not v:
                    raise ctx.fail(kline, f"{mkey}.{name}", "a matrix axis needs at least one value")
                _check_values(ctx, v, kline, f"{mkey}.{name}", needs)
                spec.axes[name] = _plain(ctx, v, kline, f"{mkey}.{name}")
            else:
                raise ctx.fail(kline, f"{mkey}.{name}", "must be a list of values or a single ${{ }} expression")
        if not spec.axes and not spec.include:
            raise ctx.fail(mline, mkey, "a matrix needs at least one axis or 'include'")
    else:
        raise ctx.fail(mline, mkey, "must be a mapping of axes or a single ${{ }} expression")
    _strategy_options(ctx, raw, spec, where, needs)
    _expand_static(ctx, spec, mline, mkey)
    return spec


def _strategy_options(ctx: _Ctx, raw: _Map, spec: StrategySpec, where: str, needs: list[str]) -> None:
    if "fail-fast" in raw:
        value, fline = raw["fail-fast"], raw.key_lines.get("fail-fast")
        spec.fail_fast = (
            value
            if isinstance(value, bool)
            else _whole_expression(ctx, value, fline, f"{where}.fail-fast", needs, "true or false")
        )
    if "max-parallel" in raw:
        value, pline = raw["max-parallel"], raw.key_lines.get("max-parallel")
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 1:
                raise ctx.fail(pline, f"{where}.max-parallel", "must be a positive integer")
            spec.max_parallel = min(value, MAX_MATRIX_JOBS)
        else:
            spec.max_parallel = _whole_expression(
                ctx, value, pline, f"{where}.max-parallel", needs, "a positive integer"
            )


def _expand_static(ctx: _Ctx, spec: StrategySpec, line: int | None, key: str) -> None:
    """Expand a matrix that holds no expression now: an empty or oversized one, or an exclude
    naming no axis, is refused at push time rather than when the run starts."""
    if spec.matrix_expression is not None or _has_expression(spec.model_dump(include={"axes", "include", "exclude"})):
        return
    assert not isinstance(spec.include, str) and not isinstance(spec.exclude, str)
    axes = {k: v for k, v in spec.axes.items() if isinstance(v, list)}
    for entry in spec.exclude:
        for name in entry:
            if name not in axes:
                raise ctx.fail(line, f"{key}.exclude", f"exclude names {name!r}, which is not an axis of the matrix")
    try:
        expand_matrix(axes, spec.include, spec.exclude, MAX_MATRIX_JOBS)
    except MatrixError as exc:
        raise ctx.fail(line, key, str(exc)) from None


def _concurrency(
    ctx: _Ctx, raw: Any, line: int | None, where: str, contexts: set[str], needs: list[str] | None
) -> ConcurrencySpec:
    """``concurrency: group`` or ``{group, cancel-in-progress}``."""
    cancel: bool | str = False
    if isinstance(raw, _Map):
        _check_keys(ctx, raw, {"group", "cancel-in-progress"}, f"{where}.")
        if "group" not in raw:
            raise ctx.fail(line, f"{where}.group", "a concurrency mapping needs 'group'")
        gline = raw.key_lines.get("group")
        group = _scalar_text(ctx, raw["group"], gline, f"{where}.group")
        if "cancel-in-progress" in raw:
            value, cline = raw["cancel-in-progress"], raw.key_lines.get("cancel-in-progress")
            if isinstance(value, bool):
                cancel = value
            else:
                text = _scalar_text(ctx, value, cline, f"{where}.cancel-in-progress")
                if not text.strip().startswith("${{"):
                    raise ctx.fail(cline, f"{where}.cancel-in-progress", "must be true, false or an expression")
                _check_text(ctx, text, cline, f"{where}.cancel-in-progress", contexts, needs)
                cancel = text
    elif isinstance(raw, (str, int, float)) and not isinstance(raw, bool):
        gline, group = line, _scalar_text(ctx, raw, line, where)
    else:
        raise ctx.fail(line, where, "must be a group name or a mapping (group, cancel-in-progress)")
    if not group.strip():
        raise ctx.fail(gline, where, "the concurrency group must not be empty")
    _check_text(ctx, group, gline, where, contexts, needs)
    return ConcurrencySpec(group=group, cancel_in_progress=cancel, line=line)


def _permissions(ctx: _Ctx, raw: Any, line: int | None, where: str) -> str | dict[str, str]:
    """``read-all``, ``write-all`` or scope -> read/write/none. Informational: no token is issued."""
    if raw in ("read-all", "write-all"):
        return str(raw)
    if not isinstance(raw, _Map):
        raise ctx.fail(line, where, "must be read-all, write-all or a mapping of scopes to read, write or none")
    kept: dict[str, str] = {}
    for scope, level in raw.items():
        sline = raw.key_lines.get(scope)
        name = _scalar_text(ctx, scope, sline, where)
        if name not in PERMISSION_SCOPES:
            raise ctx.fail(
                sline, f"{where}.{name}", f"unknown permission scope (known: {', '.join(sorted(PERMISSION_SCOPES))})"
            )
        allowed = PERMISSION_LIMITS.get(name, PERMISSION_LEVELS)
        if level not in allowed:
            raise ctx.fail(sline, f"{where}.{name}", f"must be one of: {', '.join(sorted(allowed))}")
        kept[name] = str(level)
    return kept


def _start_expression(
    ctx: _Ctx, value: Any, line: int | None, key: str, needs: list[str], contexts: set[str] = JOB_START_CONTEXTS
) -> str | None:
    """``timeout-minutes``/``continue-on-error`` written as one ``${{ }}`` (``${{ matrix.x }}``):
    checked now over ``contexts``, evaluated when the job (or, for a step's, the step) starts.
    ``None`` for any other value."""
    if not isinstance(value, str) or "${{" not in value:
        return None
    found = find_interpolations(value.strip())
    if len(found) != 1 or found[0][0] != 0 or found[0][1] != len(value.strip()):
        raise ctx.fail(line, key, "must be a value or a single ${{ }} expression")
    _check_text(ctx, value, line, key, contexts, needs)
    return value.strip()


def _job(ctx: _Ctx, job_id: str, raw: Any, line: int | None, defaults: _RunDefaults) -> JobSpec:
    where = f"jobs.{job_id}"
    if not JOB_ID.match(job_id):
        raise ctx.fail(line, where, "job ids start with a letter or '_' and hold letters, digits, '_', '-'")
    if job_id.startswith(RESERVED_ID_PREFIX):
        raise ctx.fail(line, where, "job ids starting with '__' are reserved")
    if not isinstance(raw, _Map):
        raise ctx.fail(line, where, "must be a mapping")
    _check_keys(ctx, raw, JOB_KEYS, f"{where}.")

    def ln(key: str) -> int | None:
        return raw.key_lines.get(key, raw.line)

    needs = _string_list(ctx, raw["needs"], ln("needs"), f"{where}.needs") if "needs" in raw else []
    runs_on = _string_list(ctx, raw.get("runs-on"), ln("runs-on"), f"{where}.runs-on") if "runs-on" in raw else None
    if runs_on is None:
        raise ctx.fail(raw.line, where, "a job needs 'runs-on'")
    if not runs_on or any(not label.strip() for label in runs_on):
        raise ctx.fail(ln("runs-on"), f"{where}.runs-on", "labels must be non-empty strings")
    for label in runs_on:
        _check_text(ctx, label, ln("runs-on"), f"{where}.runs-on", JOB_START_CONTEXTS, needs)
    steps_raw = raw.get("steps")
    if not isinstance(steps_raw, _List) or not steps_raw:
        raise ctx.fail(ln("steps"), f"{where}.steps", "a job needs a non-empty list of steps")
    if len(steps_raw) > MAX_STEPS_PER_JOB:
        raise ctx.fail(ln("steps"), f"{where}.steps", f"at most {MAX_STEPS_PER_JOB} steps per job")
    run_defaults = (
        _defaults(ctx, raw["defaults"], ln("defaults"), f"{where}.defaults", JOB_DEFAULTS_CONTEXTS, needs)
        if "defaults" in raw
        else _RunDefaults()
    ).over(defaults)
    steps = [_step(ctx, job_id, i, s, _line_of(steps_raw, i), needs, run_defaults) for i, s in enumerate(steps_raw)]
    seen: dict[str, str] = {}
    for step in steps:
        if step.id:
            if step.id.lower() in seen:
                raise ctx.fail(
                    _line_of(steps_raw, step.index),
                    f"{where}.steps[{step.index}].id",
                    f"duplicate step id {step.id!r} (ids are case-insensitive: {seen[step.id.lower()]!r})",
                )
            seen[step.id.lower()] = step.id
    outputs: dict[str, str] = {}
    if "outputs" in raw:
        out = raw["outputs"]
        if not isinstance(out, _Map):
            raise ctx.fail(ln("outputs"), f"{where}.outputs", "must be a mapping of names to expressions")
        for k, v in out.items():
            kline = out.key_lines.get(k)
            text = _scalar_text(ctx, v, kline, f"{where}.outputs.{k}")
            _check_text(ctx, text, kline, f"{where}.outputs.{k}", OUTPUT_CONTEXTS, needs)
            outputs[str(k)] = text
    name = _scalar_text(ctx, raw["name"], ln("name"), f"{where}.name") if "name" in raw else job_id
    _check_text(ctx, name, ln("name"), f"{where}.name", JOB_START_CONTEXTS, needs)
    timeout_expr = _start_expression(
        ctx, raw.get("timeout-minutes"), ln("timeout-minutes"), f"{where}.timeout-minutes", needs
    )
    continue_expr = _start_expression(
        ctx, raw.get("continue-on-error"), ln("continue-on-error"), f"{where}.continue-on-error", needs
    )
    return JobSpec(
        id=job_id,
        name=name,
        needs=needs,
        runs_on=runs_on,
        env=_env(ctx, raw.get("env"), ln("env"), f"{where}.env", JOB_ENV_CONTEXTS, needs),
        if_expr=_if(ctx, raw["if"], ln("if"), f"{where}.if", JOB_IF_CONTEXTS, needs) if "if" in raw else None,
        timeout_minutes=_positive_number(ctx, raw["timeout-minutes"], ln("timeout-minutes"), f"{where}.timeout-minutes")
        if "timeout-minutes" in raw and timeout_expr is None
        else 360.0,
        timeout_minutes_expr=timeout_expr,
        continue_on_error=_bool(ctx, raw["continue-on-error"], ln("continue-on-error"), f"{where}.continue-on-error")
        if "continue-on-error" in raw and continue_expr is None
        else False,
        continue_on_error_expr=continue_expr,
        outputs=outputs,
        steps=steps,
        network=_bool(ctx, raw["network"], ln("network"), f"{where}.network") if "network" in raw else False,
        line=line,
        environment=_environment(ctx, raw["environment"], ln("environment"), f"{where}.environment")
        if "environment" in raw
        else None,
        strategy=_strategy(ctx, raw["strategy"], ln("strategy"), f"{where}.strategy", needs)
        if "strategy" in raw
        else None,
        concurrency=_concurrency(
            ctx, raw["concurrency"], ln("concurrency"), f"{where}.concurrency", JOB_CONCURRENCY_CONTEXTS, needs
        )
        if "concurrency" in raw
        else None,
        permissions=_permissions(ctx, raw["permissions"], ln("permissions"), f"{where}.permissions")
        if "permissions" in raw
        else None,
    )


def _check_graph(ctx: _Ctx, jobs: list[JobSpec], lines: dict[str, int | None]) -> None:
    # Job ids are case-insensitive: 'needs: Build' names job 'build' (the declared spelling is kept).
    declared = {j.id.lower(): j.id for j in jobs}
    ids = {j.id for j in jobs}
    by_id = {j.id: j for j in jobs}
    for job in jobs:
        job.needs = [declared.get(need.lower(), need) for need in job.needs]
        for need in job.needs:
            if need not in ids:
                raise ctx.fail(lines.get(job.id), f"jobs.{job.id}.needs", f"unknown job {need!r}")
            if need == job.id:
                raise ctx.fail(lines.get(job.id), f"jobs.{job.id}.needs", "a job cannot need itself")
    # Depth-first search; grey = on the current path, so a grey hit closes a cycle.
    colour: dict[str, int] = {}
    path: list[str] = []

    def visit(job_id: str) -> None:
        colour[job_id] = 1
        path.append(job_id)
        for need in by_id[job_id].needs:
            if colour.get(need) == 1:
                cycle = [*path[path.index(need) :], need]
                raise ctx.fail(lines.get(job_id), f"jobs.{job_id}.needs", "dependency cycle: " + " -> ".join(cycle))
            if colour.get(need) is None:
                visit(need)
        path.pop()
        colour[job_id] = 2

    for job in jobs:
        if colour.get(job.id) is None:
            visit(job.id)


def parse_workflow(path: str, text: str | bytes) -> WorkflowSpec:
    """Parse and validate one workflow file; raises ``WorkflowSpecError`` and nothing else,
    whatever the bytes: one bad file must fail its own run, never the push's listing."""
    try:
        return _parse_workflow(path, text)
    except WorkflowSpecError:
        raise
    except RecursionError:
        raise _Ctx(path).fail(None, None, "the file nests too deeply") from None
    except Exception as exc:  # a parser bug must still fail only this file, with a message
        log.exception("parsing %s failed unexpectedly", path)
        raise _Ctx(path).fail(None, None, f"the file could not be parsed ({type(exc).__name__})") from None


def _parse_workflow(path: str, text: str | bytes) -> WorkflowSpec:
    ctx = _Ctx(path)
    if isinstance(text, bytes):
        if len(text) > MAX_WORKFLOW_BYTES:
            raise ctx.fail(None, None, f"file is larger than {MAX_WORKFLOW_BYTES} bytes")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ctx.fail(None, None, "file is not UTF-8 text") from None
    try:
        doc = yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ctx.fail(line, None, f"invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ctx.fail(None, None, f"invalid YAML: {exc}") from None
    if not isinstance(doc, _Map):
        raise ctx.fail(1, None, "a workflow file must be a mapping")
    _check_keys(ctx, doc, WORKFLOW_KEYS, "")
    if "on" not in doc:
        raise ctx.fail(doc.line, "on", "missing 'on'")
    on_push = _push_filter(ctx, doc["on"], doc.key_lines.get("on"))
    on_pull_request = _pull_request_filter(ctx, doc["on"])
    on_dispatch = _dispatch(ctx, doc["on"])
    env = _env(ctx, doc.get("env"), doc.key_lines.get("env"), "env", WORKFLOW_ENV_CONTEXTS, None)
    defaults = _defaults(
        ctx, doc.get("defaults"), doc.key_lines.get("defaults"), "defaults", WORKFLOW_DEFAULTS_CONTEXTS, None
    )
    concurrency = (
        _concurrency(
            ctx,
            doc["concurrency"],
            doc.key_lines.get("concurrency"),
            "concurrency",
            WORKFLOW_CONCURRENCY_CONTEXTS,
            None,
        )
        if "concurrency" in doc
        else None
    )
    permissions = (
        _permissions(ctx, doc["permissions"], doc.key_lines.get("permissions"), "permissions")
        if "permissions" in doc
        else None
    )
    jobs_raw = doc.get("jobs")
    if not isinstance(jobs_raw, _Map) or not jobs_raw:
        raise ctx.fail(doc.key_lines.get("jobs", doc.line), "jobs", "a workflow needs a non-empty 'jobs' mapping")
    if len(jobs_raw) > MAX_JOBS_PER_WORKFLOW:
        raise ctx.fail(doc.key_lines.get("jobs"), "jobs", f"at most {MAX_JOBS_PER_WORKFLOW} jobs per workflow")
    # Graph errors point at each job's 'needs' line (or the job's own line without one).
    lines = {
        str(k): (v.key_lines.get("needs", v.line) if isinstance(v, _Map) else jobs_raw.key_lines.get(k))
        for k, v in jobs_raw.items()
    }
    seen: dict[str, str] = {}
    for k in jobs_raw:
        job_id = _scalar_text(ctx, k, jobs_raw.key_lines.get(k), "jobs")
        if job_id.lower() in seen:
            raise ctx.fail(
                jobs_raw.key_lines.get(k),
                f"jobs.{job_id}",
                f"duplicate job id {job_id!r} (ids are case-insensitive: {seen[job_id.lower()]!r})",
            )
        seen[job_id.lower()] = job_id
    jobs = [
        _job(ctx, _scalar_text(ctx, k, None, "jobs"), v, jobs_raw.key_lines.get(k), defaults)
        for k, v in jobs_raw.items()
    ]
    _check_graph(ctx, jobs, lines)
    name = _scalar_text(ctx, doc["name"], doc.key_lines.get("name"), "name") if "name" in doc else path
    run_name = None
    if "run-name" in doc:
        rline = doc.key_lines.get("run-name")
        run_name = _scalar_text(ctx, doc["run-name"], rline, "run-name")[:MAX_RUN_NAME_CHARS]
        _check_text(ctx, run_name, rline, "run-name", RUN_NAME_CONTEXTS, None)
    for job in jobs:
        job.secrets = job_secret_names(env, job)
    return WorkflowSpec(
        path=path,
        name=name,
        run_name=run_name or None,
        on_push=on_push,
        on_pull_request=on_pull_request,
        on_dispatch=on_dispatch,
        env=env,
        concurrency=concurrency,
        permissions=permissions,
        jobs=jobs,
    )


def _names_in(expr: str) -> set[str]:
    return {p[1].upper() for p in context_paths(parse(expr)) if p[0] == "secrets" and len(p) > 1}


def job_secret_names(workflow_env: dict[str, str], job: JobSpec) -> list[str]:
    """The secrets a job references (upper-case, sorted): all its worker will ever fetch."""
    texts = [*workflow_env.values(), *job.env.values()]
    names: set[str] = set()
    for step in job.steps:
        texts += [step.run, *step.env.values(), step.working_directory or "", *step.with_inputs.values()]
        if step.if_expr:
            names |= _names_in(step.if_expr)
    for text in texts:
        for expr in expressions_in(text):
            names |= _names_in(expr)
    return sorted(names)


# on.push filters ----------------------------------------------------------------------------


def _matches_any(patterns: list[str], name: str) -> bool:
    return matches_any(patterns, name)


def push_triggers(push: PushFilter, ref: str) -> bool:
    """Whether a push of ``ref`` (``refs/heads/x`` or ``refs/tags/x``) triggers the workflow."""
    if not push.enabled:
        return False
    if ref.startswith("refs/heads/"):
        name, include, ignore = ref[len("refs/heads/") :], push.branches, push.branches_ignore
        other_defined = push.tags is not None or push.tags_ignore is not None
    elif ref.startswith("refs/tags/"):
        name, include, ignore = ref[len("refs/tags/") :], push.tags, push.tags_ignore
        other_defined = push.branches is not None or push.branches_ignore is not None
    else:
        return False
    if include is not None:
        return _matches_any(include, name)
    if ignore is not None:
        return not _matches_any(ignore, name)
    # Filters only for the other ref kind: this kind does not trigger.
    return not other_defined


# on.<event>.paths ---------------------------------------------------------------------------

# GitHub compares at most this many changed files; a larger diff counts as matching any path
# filter here (the workflow runs), so a big push never silently skips the checks it needs.
MAX_DIFF_FILES = 300


def has_path_filter(event: PushFilter) -> bool:
    """Whether ``on.push`` / ``on.pull_request`` filters by changed paths."""
    return event.paths is not None or event.paths_ignore is not None


def paths_match(event: PushFilter, changed: list[str] | None) -> bool:
    """Whether the changed files satisfy ``paths`` / ``paths-ignore`` (GitHub's rules).

    ``paths``: some file matches (a later ``!pattern`` excludes it again); ``paths-ignore``: some
    file is not ignored. No changed file matches neither. ``changed`` is ``None`` when the diff
    is unknown or longer than ``MAX_DIFF_FILES``: then the filter counts as matching."""
    if changed is None:
        return True
    if event.paths is not None:
        return any(_matches_any(event.paths, name) for name in changed)
    if event.paths_ignore is not None:
        return any(not _matches_any(event.paths_ignore, name) for name in changed)
    return True
