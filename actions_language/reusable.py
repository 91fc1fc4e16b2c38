"""What a reusable workflow declares (``on.workflow_call``: typed inputs, secrets, outputs) and
what a calling job may write (``jobs.<id>.uses``, ``with``, ``secrets``), checked as GitHub
checks them. The expansion of a call into jobs is ``actions_language.expansion``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from actions_language.action_refs import ActionRefError, parse_uses
from actions_language.loader import YamlMap
from actions_language.schema import (
    FileContext,
    boolean,
    check_keys,
    finite_number,
    named_entries,
    scalar_text,
)
from actions_language.triggers import INPUT_NAME

CALL_INPUT_TYPES = ("string", "boolean", "number")
# A called workflow's file: right under .github/workflows (GitHub reads no subdirectory there),
# named without a path of its own, so it cannot leave that directory.
_FILE = r"\.github/workflows/[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}\.ya?ml"
WORKFLOW_FILE = re.compile(rf"^{_FILE}$")
# One of this repository's (``./.github/workflows/<file>``), at the commit of the calling file.
LOCAL_WORKFLOW = re.compile(rf"^\./({_FILE})$")
CALL_FORMS = "./.github/workflows/<file>.yml or <owner>/<repo>/.github/workflows/<file>.yml@<ref>"
# GitHub's cap on workflow_call inputs (as on workflow_dispatch).
MAX_CALL_INPUTS = 25


@dataclass(frozen=True)
class CalledWorkflow:
    """What ``jobs.<id>.uses`` names: a file under ``.github/workflows`` of the calling file's
    repository (``repository`` None), or of ``owner/repo`` at ``ref`` (resolved to a commit
    through the operator's actions source when the push is listed)."""

    path: str
    repository: str | None = None
    ref: str | None = None

    @property
    def written(self) -> str:
        """As GitHub names it."""
        return self.path if self.repository is None else f"{self.repository}/{self.path}@{self.ref}"


@dataclass(frozen=True)
class CallInput:
    """One ``on.workflow_call.inputs.<name>``; ``default`` is typed (text for a string)."""

    name: str
    type: str
    required: bool = False
    default: str | bool | float | None = None


@dataclass(frozen=True)
class CallOutput:
    name: str
    value: str
    line: int | None


@dataclass
class CallDeclaration:
    """``on.workflow_call`` of a file: what a caller may pass and read. Keys are lower-case
    (inputs and outputs) or upper-case (secrets), as GitHub matches them."""

    inputs: dict[str, CallInput] = field(default_factory=dict)
    secrets: dict[str, bool] = field(default_factory=dict)
    outputs: dict[str, CallOutput] = field(default_factory=dict)


def called_workflow(ctx: FileContext, value: Any, line: int | None, key: str) -> CalledWorkflow:
    """The workflow ``jobs.<id>.uses`` names, checked: owner, repository and ref follow the
    grammar of actions (``actions_language.action_refs``: they become a mirror's directory, a URL
    and a git ref), the file is right under ``.github/workflows``."""
    if not isinstance(value, str) or not value.strip():
        raise ctx.fail(line, key, f"must name a workflow file: {CALL_FORMS}")
    text = value.strip()
    if "${{" in text:
        raise ctx.fail(line, key, "cannot hold expressions (GitHub reads it before the run)")
    found = LOCAL_WORKFLOW.match(text)
    if found is not None:
        return CalledWorkflow(path=found.group(1))
    if text.startswith(("./", "/")) or "@" not in text:
        raise ctx.fail(
            line, key, "must be ./.github/workflows/<file>.yml (a workflow file of this repository, at this commit)"
        )
    try:
        ref = parse_uses(text)
    except ActionRefError as exc:
        raise ctx.fail(line, key, f"must be {CALL_FORMS}: {exc}") from None
    if ref.local or WORKFLOW_FILE.match(ref.path) is None:
        raise ctx.fail(line, key, f"must be {CALL_FORMS} (a file right under .github/workflows of that repository)")
    return CalledWorkflow(path=ref.path, repository=ref.repository, ref=ref.ref)


def _declared_map(ctx: FileContext, raw: YamlMap, name: str, where: str) -> YamlMap:
    value = raw.get(name)
    if value is None:
        return YamlMap()
    if not isinstance(value, YamlMap):
        raise ctx.fail(raw.key_lines.get(name), f"{where}.{name}", "must be a mapping of names to definitions")
    return value


def _typed_default(ctx: FileContext, kind: str, value: Any, line: int | None, key: str) -> str | bool | float:
    if kind == "boolean":
        if isinstance(value, str) and "${{" in value:
            return value
        return boolean(ctx, value, line, key)
    if kind == "number":
        number = finite_number(value)
        if number is None and not (isinstance(value, str) and "${{" in value):
            raise ctx.fail(line, key, "must be a number")
        return value if number is None else number
    return scalar_text(ctx, value, line, key)


def _call_input(ctx: FileContext, raw: Any, line: int | None, where: str, name: str) -> CallInput:
    if not isinstance(raw, YamlMap):
        raise ctx.fail(line, where, "must be a mapping (type, required, default, description)")
    check_keys(ctx, raw, {"type", "required", "default", "description"}, f"{where}.")
    kind = raw.get("type")
    if kind not in CALL_INPUT_TYPES:
        raise ctx.fail(
            raw.key_lines.get("type", line), f"{where}.type", f"must be one of: {', '.join(CALL_INPUT_TYPES)}"
        )
    required = (
        boolean(ctx, raw["required"], raw.key_lines.get("required"), f"{where}.required")
        if "required" in raw
        else False
    )
    default = None
    if "default" in raw and raw["default"] is not None:
        default = _typed_default(ctx, str(kind), raw["default"], raw.key_lines.get("default"), f"{where}.default")
    return CallInput(name=name, type=str(kind), required=required, default=default)


def call_declaration(ctx: FileContext, on: Any, line: int | None) -> CallDeclaration | None:
    """``on.workflow_call``, checked; ``None`` when the file cannot be called."""
    if on == "workflow_call" or (isinstance(on, list) and "workflow_call" in on):
        return CallDeclaration()
    if not isinstance(on, YamlMap) or "workflow_call" not in on:
        return None
    raw, where = on["workflow_call"], "on.workflow_call"
    if raw is None:
        return CallDeclaration()
    if not isinstance(raw, YamlMap):
        raise ctx.fail(on.key_lines.get("workflow_call", line), where, "must be a mapping (inputs, secrets, outputs)")
    check_keys(ctx, raw, {"inputs", "secrets", "outputs"}, f"{where}.")
    decl = CallDeclaration()
    inputs = _declared_map(ctx, raw, "inputs", where)
    if len(inputs) > MAX_CALL_INPUTS:
        raise ctx.fail(raw.key_lines.get("inputs"), f"{where}.inputs", f"at most {MAX_CALL_INPUTS} inputs")
    for name, value, kline in named_entries(ctx, inputs, f"{where}.inputs"):
        key = f"{where}.inputs.{name}"
        if not INPUT_NAME.match(name) or name.lower() in decl.inputs:
            raise ctx.fail(kline, key, "input names are unique (case-insensitively) letters, digits, '_', '-'")
        decl.inputs[name.lower()] = _call_input(ctx, value, kline, key, name)
    for name, value, kline in named_entries(ctx, _declared_map(ctx, raw, "secrets", where), f"{where}.secrets"):
        key = f"{where}.secrets.{name}"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name) or name.upper() in decl.secrets:
            raise ctx.fail(kline, key, "secret names are unique (case-insensitively) letters, digits and '_'")
        if value is not None and not isinstance(value, YamlMap):
            raise ctx.fail(kline, key, "must be a mapping (required, description)")
        required = False
        if isinstance(value, YamlMap):
            check_keys(ctx, value, {"required", "description"}, f"{key}.")
            if "required" in value:
                required = boolean(ctx, value["required"], value.key_lines.get("required"), f"{key}.required")
        decl.secrets[name.upper()] = required
    for name, value, kline in named_entries(ctx, _declared_map(ctx, raw, "outputs", where), f"{where}.outputs"):
        key = f"{where}.outputs.{name}"
        if not isinstance(value, YamlMap) or "value" not in value:
            raise ctx.fail(kline, key, "must be a mapping with 'value' (and 'description')")
        check_keys(ctx, value, {"value", "description"}, f"{key}.")
        text = scalar_text(ctx, value["value"], value.key_lines.get("value"), f"{key}.value")
        decl.outputs[name.lower()] = CallOutput(name=name, value=text, line=value.key_lines.get("value", kline))
    return decl
