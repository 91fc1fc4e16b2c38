"""Expressions in a workflow file, checked against the contexts each place may use (GitHub's
context availability, reduced to the subset): ``${{ }}`` text, ``env:`` mappings, ``if:`` and
values evaluated when a job or step starts."""

from __future__ import annotations

import re
from typing import Any

from actions_language.loader import YamlMap
from actions_language.schema import FileContext, named_entries, scalar_text
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

SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


# Which contexts each place may use (GitHub's context availability, reduced to the subset).
WORKFLOW_ENV_CONTEXTS = {"github", "vars", "secrets", "inputs"}
JOB_IF_CONTEXTS = {"github", "vars", "needs", "env", "inputs"}
JOB_ENV_CONTEXTS = {"github", "vars", "needs", "env", "secrets", "inputs", "strategy", "matrix"}
STEP_CONTEXTS = {"github", "vars", "needs", "env", "steps", "job", "runner", "secrets", "inputs", "strategy", "matrix"}
# A step's timeout-minutes and continue-on-error (GitHub's list: no secrets).
STEP_LIMIT_CONTEXTS = STEP_CONTEXTS - {"secrets"}
OUTPUT_CONTEXTS = {"github", "vars", "needs", "env", "steps", "job", "runner", "inputs", "strategy", "matrix"}
# A job's environment.url (GitHub's list: the job's outputs' contexts; read once the job has run).
ENVIRONMENT_URL_CONTEXTS = OUTPUT_CONTEXTS
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


def _check_expression(
    ctx: FileContext, expr: str, line: int | None, key: str, contexts: set[str], needs: list[str] | None
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


def check_text(
    ctx: FileContext, text: str, line: int | None, key: str, contexts: set[str], needs: list[str] | None
) -> None:
    if unterminated(text):
        raise ctx.fail(line, key, "unterminated '${{' expression")
    for expr in expressions_in(text):
        _check_expression(ctx, expr, line, key, contexts, needs)


def env_mapping(
    ctx: FileContext, value: Any, line: int | None, where: str, contexts: set[str], needs: list[str] | None
) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, YamlMap):
        raise ctx.fail(line, where, "must be a mapping of variable names to values")
    env: dict[str, str] = {}
    for name, v, kline in named_entries(ctx, value, where):
        # GitHub takes any name ('root-env' too); the environment itself cannot hold '=' or NUL.
        if not name or "=" in name or "\0" in name:
            raise ctx.fail(kline, f"{where}.{name}", "invalid environment variable name (empty, or holds '=' or NUL)")
        text = scalar_text(ctx, v, kline, f"{where}.{name}")
        check_text(ctx, text, kline, f"{where}.{name}", contexts, needs)
        env[name] = text
    return env


def if_condition(
    ctx: FileContext, value: Any, line: int | None, key: str, contexts: set[str], needs: list[str] | None
) -> str | None:
    """An ``if:`` as the expression it means; ``None`` for an empty one (GitHub: ``success()``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return None
    if not isinstance(value, (str, int, float)):
        raise ctx.fail(line, key, "must be an expression")
    text = scalar_text(ctx, value, line, key)
    if not text.strip():
        return None
    if unterminated(text):
        raise ctx.fail(line, key, "unterminated '${{' expression")
    expr = condition_expression(text)
    _check_expression(ctx, expr, line, key, contexts, needs)
    return expr


def start_expression(
    ctx: FileContext, value: Any, line: int | None, key: str, needs: list[str], contexts: set[str] = JOB_START_CONTEXTS
) -> str | None:
    """``timeout-minutes``/``continue-on-error`` written as one ``${{ }}`` (``${{ matrix.x }}``):
    checked now over ``contexts``, evaluated when the job (or, for a step's, the step) starts.
    ``None`` for any other value."""
    if not isinstance(value, str) or "${{" not in value:
        return None
    found = find_interpolations(value.strip())
    if len(found) != 1 or found[0][0] != 0 or found[0][1] != len(value.strip()):
        raise ctx.fail(line, key, "must be a value or a single ${{ }} expression")
    check_text(ctx, value, line, key, contexts, needs)
    return value.strip()
