"""The structural checks of a workflow file: where an error is (``FileContext``), known keys,
scalars and string lists, ids, booleans and timeouts."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from actions_language.loader import YamlList, YamlMap
from workflows.ci.types.spec import (
    SpecError,
)

JOB_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
# GitHub keeps ids starting with '__' for itself.
RESERVED_ID_PREFIX = "__"
# Longest timeout a job or step may ask for (GitHub's own cap on a self-hosted job: 5 days);
# a larger number, ``+999...9`` included, means "as long as allowed".
MAX_TIMEOUT_MINUTES = 5 * 24 * 60


class WorkflowSpecError(ValueError):
    """A rejected workflow file; ``error`` says where and why."""

    def __init__(self, error: SpecError) -> None:
        super().__init__(error.render())
        self.error = error


class FileContext:
    """Where we are in the file, to name file, line and key in errors."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, line: int | None, key: str | None, message: str) -> WorkflowSpecError:
        return WorkflowSpecError(SpecError(file=self.path, line=line, key=key, message=message))


def line_of(container: Any, key: Any) -> int | None:
    if isinstance(container, YamlMap):
        return container.key_lines.get(key, container.line)
    if isinstance(container, YamlList) and isinstance(key, int) and key < len(container.item_lines):
        return container.item_lines[key]
    return getattr(container, "line", None)


def number_text(value: int | float) -> str:
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


def scalar_text(ctx: FileContext, value: Any, line: int | None, key: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return number_text(value)
    if value is None:
        return ""
    raise ctx.fail(line, key, "must be a string, number or boolean")


def named_entries(ctx: FileContext, mapping: YamlMap, where: str) -> Iterator[tuple[str, Any, int | None]]:
    """Each entry of ``mapping``: its name (the key as text; ``where`` names it in an error),
    its value and the key's line."""
    for key, value in mapping.items():
        line = mapping.key_lines.get(key)
        yield scalar_text(ctx, key, line, where), value, line


def string_list(ctx: FileContext, value: Any, line: int | None, key: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        return [v if isinstance(v, str) else number_text(v) for v in value]
    raise ctx.fail(line, key, "must be a string or a list of strings")


def check_keys(ctx: FileContext, mapping: YamlMap, allowed: set[str], where: str) -> None:
    for key in mapping:
        if key not in allowed:
            hint = {
                "uses": "'uses:' belongs to a step, or to a job calling a reusable workflow (with no runs-on or steps)",
                "with": "'with' is not supported (it belongs to 'uses:' actions)",
            }.get(str(key), f"unsupported key (supported: {', '.join(sorted(allowed))})")
            raise ctx.fail(mapping.key_lines.get(key, mapping.line), f"{where}{key}", hint)


def check_job_id(ctx: FileContext, job_id: str, line: int | None) -> None:
    """Refuse a job id GitHub refuses: not a letter or '_' then letters, digits, '_', '-', or
    one of the ids it keeps for itself."""
    where = f"jobs.{job_id}"
    if not JOB_ID.match(job_id):
        raise ctx.fail(line, where, "job ids start with a letter or '_' and hold letters, digits, '_', '-'")
    if job_id.startswith(RESERVED_ID_PREFIX):
        raise ctx.fail(line, where, "job ids starting with '__' are reserved")


def positive_minutes(ctx: FileContext, value: Any, line: int | None, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value <= 0:
        raise ctx.fail(line, key, "must be a positive number of minutes")
    # Compared before any conversion: an integer of hundreds of digits does not fit a float.
    return float(MAX_TIMEOUT_MINUTES) if value >= MAX_TIMEOUT_MINUTES else float(value)


def boolean(ctx: FileContext, value: Any, line: int | None, key: str) -> bool:
    """``true`` or ``false``. Where an expression is allowed the caller has taken it already, so
    one that reaches here is one this key does not support."""
    if isinstance(value, str) and "${{" in value:
        raise ctx.fail(line, key, "expressions are not supported here: must be true or false")
    if not isinstance(value, bool):
        raise ctx.fail(line, key, "must be true or false")
    return value


def finite_number(value: Any) -> float | None:
    """``value`` as a finite double (GitHub's numbers), or ``None`` when it is not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
