"""The inputs of a ``workflow_dispatch``, checked as GitHub checks them.

Two stages, because the API cannot read the workflow file (CI workers hold the mirrors):
``check_shape`` runs in the API before anything starts (names, value kinds, sizes: a 400
naming the field), and ``resolve_inputs`` runs when the dispatch is listed, against the
``on.workflow_dispatch.inputs`` of the file at the dispatched ref (unknown names, required
inputs, types, choices, defaults: the dispatch fails with ``DispatchInputError`` naming the
field, which the API answers as a 422). Light: stdlib and the spec types only.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from workflows.ci.types.spec import DispatchInput, DispatchSpec

# GitHub's caps: at most 25 inputs, and 65,535 characters of inputs in one dispatch.
MAX_INPUTS = 25
MAX_INPUTS_CHARS = 65_535
INPUT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,99}$")
ENVIRONMENT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
# A dispatch's ref: a full branch or tag ref, or a bare name; never a revision expression
# (``..``, ``@{``, ``^``, ``~``, ``:``) or an option. The API checks it, and git.py again.
DISPATCH_REF = re.compile(r"^(?!.*(?:\.\.|@\{|//))(?:refs/(?:heads|tags)/)?[A-Za-z0-9._+-][A-Za-z0-9._/+-]{0,239}$")
# A dispatch's workflow: a file under .github/workflows, by path or by name.
WORKFLOW_FILE = re.compile(r"^(?:\.github/workflows/)?[A-Za-z0-9_.-]{1,200}\.ya?ml$")

InputValue = str | bool | float


class DispatchInputError(ValueError):
    """An input the dispatch cannot take; ``field`` names it (``inputs.<name>``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_shape(inputs: Mapping[str, Any]) -> dict[str, InputValue]:
    """The inputs of a dispatch request, bounded: names as GitHub allows them, values strings,
    booleans or finite numbers, at most ``MAX_INPUTS`` of them and ``MAX_INPUTS_CHARS`` in all."""
    if len(inputs) > MAX_INPUTS:
        raise DispatchInputError("inputs", f"at most {MAX_INPUTS} inputs")
    checked: dict[str, InputValue] = {}
    for name, value in inputs.items():
        if not isinstance(name, str) or not INPUT_NAME.match(name):
            raise DispatchInputError(
                f"inputs.{str(name)[:100]}", "input names start with a letter or '_' and hold letters, digits, '_', '-'"
            )
        if isinstance(value, bool | str):
            checked[name] = value
        elif isinstance(value, int | float) and _finite(value) is not None:
            checked[name] = float(value)
        else:
            raise DispatchInputError(f"inputs.{name}", "must be a string, a boolean or a finite number")
    if len(json.dumps(checked)) > MAX_INPUTS_CHARS:
        raise DispatchInputError("inputs", f"the inputs are longer than {MAX_INPUTS_CHARS} characters in all")
    return checked


def resolve_inputs(spec: DispatchSpec, given: Mapping[str, InputValue]) -> dict[str, InputValue]:
    """Every declared input's value for this dispatch (given, else its default, else the empty
    value of its type), typed as the ``inputs`` context holds it. Names match case-insensitively
    (GitHub's contexts do) and come out as the workflow spells them."""
    declared = {name.lower(): name for name in spec.inputs}
    by_name: dict[str, InputValue] = {}
    for name, value in given.items():
        if name.lower() not in declared:
            known = ", ".join(spec.inputs) or "none"
            raise DispatchInputError(f"inputs.{name}", f"not an input of this workflow (its inputs: {known})")
        by_name[declared[name.lower()]] = value
    values: dict[str, InputValue] = {}
    for name, declared_input in spec.inputs.items():
        if name in by_name:
            values[name] = _typed(f"inputs.{name}", declared_input, by_name[name])
        elif declared_input.default is not None:
            values[name] = declared_input.default
        elif declared_input.required:
            raise DispatchInputError(f"inputs.{name}", "is required")
        else:
            values[name] = False if declared_input.type == "boolean" else ""
    return values


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (OverflowError, ValueError, TypeError):
        return None
    return number if math.isfinite(number) else None


def _text(value: InputValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return value


def _typed(field: str, declared: DispatchInput, value: InputValue) -> InputValue:
    kind = declared.type
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise DispatchInputError(field, "must be true or false")
    if kind == "number":
        number = None if isinstance(value, bool) else _finite(value.strip() if isinstance(value, str) else value)
        if number is None:
            raise DispatchInputError(field, "must be a number")
        return number
    text = _text(value)
    if kind == "choice" and text not in declared.options:
        raise DispatchInputError(field, f"must be one of: {', '.join(declared.options)}")
    if kind == "environment" and not ENVIRONMENT_NAME.match(text):
        raise DispatchInputError(field, "must be an environment name (letters, digits, '_', '-', '.')")
    return text
