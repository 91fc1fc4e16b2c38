"""Parsing an action's ``action.yml`` into an ``ActionSpec``: composite and JavaScript actions.

An action is as hostile as a workflow file (anyone may publish one, and a tenant picks it), so
it is read with the workflow parser's YAML loader (no anchors, bounded depth, line numbers)
and refused with the line and key at fault. Docker actions are refused: there is no container
backend here. Nested ``uses:`` of a composite action are only parsed as references here; the
listing resolves them (``activities.ci.actions``). Raises ``WorkflowSpecError`` and nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import yaml

from actions_language.action_refs import DOCKER_REFUSED, ActionRefError, is_builtin, parse_uses, safe_parts
from actions_language.contexts import check_text, env_mapping, if_condition
from actions_language.loader import MAX_WORKFLOW_BYTES, WorkflowLoader, YamlList, YamlMap
from actions_language.schema import FileContext, WorkflowSpecError, boolean, check_keys, scalar_text
from actions_language.steps import SHELLS, parse_step_id, run_script
from workflows.ci.types.spec import (
    ACTION_COMPOSITE,
    MAX_STEPS_PER_JOB,
    NODE_RUNTIMES,
    ActionInput,
    ActionSpec,
    StepSpec,
)

log = logging.getLogger(__name__)

ACTION_FILES = ("action.yml", "action.yaml")
MAX_ACTION_BYTES = MAX_WORKFLOW_BYTES
ACTION_KEYS = {"name", "description", "author", "inputs", "outputs", "runs", "branding"}
INPUT_KEYS = {"description", "required", "default", "deprecationMessage"}
COMPOSITE_RUNS_KEYS = {"using", "steps"}
NODE_RUNS_KEYS = {"using", "main", "pre", "pre-if", "post", "post-if"}
COMPOSITE_STEP_KEYS = {
    "id",
    "name",
    "run",
    "shell",
    "env",
    "working-directory",
    "if",
    "uses",
    "with",
    "continue-on-error",
}
# What a composite action's expressions may read (GitHub: no secrets, no needs).
ACTION_CONTEXTS = {"github", "env", "inputs", "steps", "runner", "job"}
DEFAULT_CONTEXTS = {"github", "env", "runner", "job"}


def parse_action(path: str, text: bytes, repository: str | None, sha: str | None, directory: str) -> ActionSpec:
    """Parse one ``action.yml`` (``path`` names it in errors); raises ``WorkflowSpecError`` only."""
    try:
        return _parse_action(FileContext(path), text, repository, sha, directory)
    except WorkflowSpecError:
        raise
    except RecursionError:
        raise FileContext(path).fail(None, None, "the file nests too deeply") from None
    except Exception as exc:  # a parser bug must still fail only this workflow file
        log.exception("parsing action %s failed unexpectedly", path)
        raise FileContext(path).fail(None, None, f"the file could not be parsed ({type(exc).__name__})") from None


def _parse_action(ctx: FileContext, data: bytes, repository: str | None, sha: str | None, directory: str) -> ActionSpec:
    if len(data) > MAX_ACTION_BYTES:
        raise ctx.fail(None, None, f"file is larger than {MAX_ACTION_BYTES} bytes")
    try:
        doc = yaml.load(data.decode("utf-8"), Loader=WorkflowLoader)
    except UnicodeDecodeError:
        raise ctx.fail(None, None, "file is not UTF-8 text") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise ctx.fail(mark.line + 1 if mark else None, None, f"invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ctx.fail(None, None, f"invalid YAML: {exc}") from None
    if not isinstance(doc, YamlMap):
        raise ctx.fail(1, None, "an action file must be a mapping")
    check_keys(ctx, doc, ACTION_KEYS, "")
    runs = doc.get("runs")
    if not isinstance(runs, YamlMap):
        raise ctx.fail(doc.key_lines.get("runs", doc.line), "runs", "an action needs a 'runs' mapping")
    using = scalar_text(ctx, runs.get("using"), runs.key_lines.get("using", runs.line), "runs.using")
    uline = runs.key_lines.get("using", runs.line)
    if using == "docker":
        raise ctx.fail(uline, "runs.using", DOCKER_REFUSED)
    if using != ACTION_COMPOSITE and using not in NODE_RUNTIMES:
        supported = ", ".join((ACTION_COMPOSITE, *NODE_RUNTIMES))
        raise ctx.fail(
            uline,
            "runs.using",
            f"unsupported runtime {using!r}: not supported by this deployment (supported: {supported})",
        )
    spec = ActionSpec(
        name=scalar_text(ctx, doc.get("name"), doc.key_lines.get("name"), "name"),
        using=using,
        repository=repository,
        sha=sha,
        path=directory,
        inputs=_inputs(ctx, doc.get("inputs"), doc.key_lines.get("inputs")),
    )
    if using == ACTION_COMPOSITE:
        check_keys(ctx, runs, COMPOSITE_RUNS_KEYS, "runs.")
        spec.steps = _steps(ctx, runs.get("steps"), runs.key_lines.get("steps", runs.line))
        spec.outputs = _outputs(ctx, doc.get("outputs"), doc.key_lines.get("outputs"), composite=True)
        return spec
    check_keys(ctx, runs, NODE_RUNS_KEYS, "runs.")
    if "main" not in runs:
        raise ctx.fail(runs.line, "runs.main", "a JavaScript action needs 'main'")
    spec.main = _script(ctx, runs, "main")
    spec.pre = _script(ctx, runs, "pre") if "pre" in runs else None
    spec.post = _script(ctx, runs, "post") if "post" in runs else None
    for key in ("pre-if", "post-if"):
        if key in runs:
            cond = if_condition(ctx, runs[key], runs.key_lines.get(key), f"runs.{key}", DEFAULT_CONTEXTS, None)
            setattr(spec, key.replace("-", "_"), cond)
    spec.outputs = _outputs(ctx, doc.get("outputs"), doc.key_lines.get("outputs"), composite=False)
    return spec


def _script(ctx: FileContext, runs: YamlMap, key: str) -> str:
    line = runs.key_lines.get(key)
    text = scalar_text(ctx, runs[key], line, f"runs.{key}")
    try:
        parts = safe_parts(text.removeprefix("./"))
    except ActionRefError as exc:
        raise ctx.fail(line, f"runs.{key}", f"must be a file in the action's directory: {exc}") from None
    if not parts or text.startswith("/"):
        raise ctx.fail(line, f"runs.{key}", "must be a file in the action's directory")
    return "/".join(parts)


def _entries(
    ctx: FileContext, raw: Any, line: int | None, section: str, noun: str
) -> Iterator[tuple[str, Any, int | None, str]]:
    """The entries of the ``inputs`` or ``outputs`` mapping (none where it is absent): each
    name as text, its value, its line and its key path."""
    if raw is None:
        return
    if not isinstance(raw, YamlMap):
        raise ctx.fail(line, section, f"must be a mapping of {noun} names")
    for name, value in raw.items():
        kline = raw.key_lines.get(name)
        key = f"{section}.{name}"
        yield scalar_text(ctx, name, kline, section), value, kline, key


def _inputs(ctx: FileContext, raw: Any, line: int | None) -> dict[str, ActionInput]:
    inputs: dict[str, ActionInput] = {}
    for text_name, value, kline, key in _entries(ctx, raw, line, "inputs", "input"):
        if not text_name or "=" in text_name or "\0" in text_name or text_name.lower() in inputs:
            raise ctx.fail(kline, key, "input names must be unique (case-insensitive) and hold no '=' or NUL")
        if value is None:
            value = YamlMap()
        if not isinstance(value, YamlMap):
            raise ctx.fail(kline, key, "must be a mapping (description, required, default)")
        check_keys(ctx, value, INPUT_KEYS, f"{key}.")
        default = None
        if "default" in value:
            default = scalar_text(ctx, value["default"], value.key_lines.get("default"), f"{key}.default")
            check_text(ctx, default, value.key_lines.get("default"), f"{key}.default", DEFAULT_CONTEXTS, None)
        required = value.get("required", False)
        # GitHub reads 'required' loosely; a string 'true' is common in published actions.
        if isinstance(required, str) and required.lower() in ("true", "false"):
            required = required.lower() == "true"
        required = boolean(ctx, required, value.key_lines.get("required"), f"{key}.required")
        inputs[text_name.lower()] = ActionInput(default=default, required=required)
    return inputs


def _outputs(ctx: FileContext, raw: Any, line: int | None, composite: bool) -> dict[str, str]:
    outputs: dict[str, str] = {}
    for text_name, value, kline, key in _entries(ctx, raw, line, "outputs", "output"):
        if value is not None and not isinstance(value, YamlMap):
            raise ctx.fail(kline, key, "must be a mapping (description, value)")
        if composite:
            if value is None or "value" not in value:
                raise ctx.fail(kline, key, "a composite action's output needs 'value'")
            check_keys(ctx, value, {"description", "value"}, f"{key}.")
            vline = value.key_lines.get("value")
            text = scalar_text(ctx, value["value"], vline, f"{key}.value")
            check_text(ctx, text, vline, f"{key}.value", ACTION_CONTEXTS, None)
            outputs[text_name] = text
        else:
            if value is not None:
                check_keys(ctx, value, {"description"}, f"{key}.")
            outputs[text_name] = ""
    return outputs


def _steps(ctx: FileContext, raw: Any, line: int | None) -> list[StepSpec]:
    if not isinstance(raw, YamlList) or not raw:
        raise ctx.fail(line, "runs.steps", "a composite action needs a non-empty list of steps")
    if len(raw) > MAX_STEPS_PER_JOB:
        raise ctx.fail(line, "runs.steps", f"at most {MAX_STEPS_PER_JOB} steps")
    steps = [parse_step(ctx, i, s, raw.item_lines[i]) for i, s in enumerate(raw)]
    seen: set[str] = set()
    for step in steps:
        if step.id:
            if step.id.lower() in seen:
                raise ctx.fail(step.line, f"runs.steps[{step.index}].id", f"duplicate step id {step.id!r}")
            seen.add(step.id.lower())
    return steps


def parse_step(ctx: FileContext, index: int, raw: Any, line: int | None) -> StepSpec:
    where = f"runs.steps[{index}]"
    if not isinstance(raw, YamlMap):
        raise ctx.fail(line, where, "must be a mapping")
    check_keys(ctx, raw, COMPOSITE_STEP_KEYS, f"{where}.")

    def ln(key: str) -> int | None:
        return raw.key_lines.get(key, raw.line)

    common: dict[str, Any] = {
        "index": index,
        "id": parse_step_id(ctx, raw, where, ln("id")) if "id" in raw else None,
        "env": env_mapping(ctx, raw.get("env"), ln("env"), f"{where}.env", ACTION_CONTEXTS, None),
        "if_expr": if_condition(ctx, raw["if"], ln("if"), f"{where}.if", ACTION_CONTEXTS, None)
        if "if" in raw
        else None,
        "continue_on_error": boolean(
            ctx, raw["continue-on-error"], ln("continue-on-error"), f"{where}.continue-on-error"
        )
        if "continue-on-error" in raw
        else False,
        "line": raw.line,
    }
    if "uses" in raw:
        for key in ("run", "shell", "working-directory"):
            if key in raw:
                raise ctx.fail(ln(key), f"{where}.{key}", "a step has either 'run:' or 'uses:', not both")
        uses = scalar_text(ctx, raw["uses"], ln("uses"), f"{where}.uses").strip()
        if not is_builtin(uses):
            try:
                parse_uses(uses)
            except ActionRefError as exc:
                raise ctx.fail(ln("uses"), f"{where}.uses", f"action {uses!r}: {exc}") from None
        else:
            raise ctx.fail(
                ln("uses"),
                f"{where}.uses",
                "actions/checkout and actions/cache in a composite action are not supported here: "
                "they are job steps only",
            )
        inputs: dict[str, str] = {}
        given = raw.get("with")
        if given is not None and not isinstance(given, YamlMap):
            raise ctx.fail(ln("with"), f"{where}.with", "must be a mapping of inputs")
        for k, v in (given or {}).items():
            kline = given.key_lines.get(k) if isinstance(given, YamlMap) else None
            text = scalar_text(ctx, v, kline, f"{where}.with.{k}")
            check_text(ctx, text, kline, f"{where}.with.{k}", ACTION_CONTEXTS, None)
            inputs[str(k)] = text
        name = scalar_text(ctx, raw["name"], ln("name"), f"{where}.name") if "name" in raw else f"Run {uses}"
        return StepSpec(name=name, uses=uses, with_inputs=inputs, **common)
    if "with" in raw:
        raise ctx.fail(ln("with"), f"{where}.with", "'with' belongs to 'uses:' steps")
    if "run" not in raw:
        raise ctx.fail(raw.line, where, "a step needs 'run:' or 'uses:'")
    run = run_script(ctx, raw["run"], ln("run"), f"{where}.run")
    check_text(ctx, run, ln("run"), f"{where}.run", ACTION_CONTEXTS, None)
    if "shell" not in raw:
        raise ctx.fail(raw.line, f"{where}.shell", "a composite action's 'run:' step needs 'shell' (as on GitHub)")
    shell = scalar_text(ctx, raw["shell"], ln("shell"), f"{where}.shell")
    if shell not in SHELLS:
        raise ctx.fail(ln("shell"), f"{where}.shell", f"unsupported shell {shell!r} (supported: {', '.join(SHELLS)})")
    wd = None
    if "working-directory" in raw:
        wd = scalar_text(ctx, raw["working-directory"], ln("working-directory"), f"{where}.working-directory")
        check_text(ctx, wd, ln("working-directory"), f"{where}.working-directory", ACTION_CONTEXTS, None)
    first_line = run.strip().splitlines()[0]
    name = scalar_text(ctx, raw["name"], ln("name"), f"{where}.name") if "name" in raw else f"Run {first_line}"
    return StepSpec(name=name, run=run, shell=shell, working_directory=wd, **common)
