"""A job's steps in a workflow file: ``run:`` and ``uses:`` steps, their ids, limits and shells,
and ``defaults.run``."""

from __future__ import annotations

import re
from typing import Any

from actions_language.action_refs import ActionRefError, is_builtin, parse_uses
from actions_language.contexts import (
    STEP_CONTEXTS,
    STEP_LIMIT_CONTEXTS,
    check_text,
    env_mapping,
    if_condition,
    start_expression,
)
from actions_language.loader import YamlMap
from actions_language.schema import (
    JOB_ID,
    RESERVED_ID_PREFIX,
    FileContext,
    boolean,
    check_keys,
    positive_minutes,
    scalar_text,
)
from workflows.ci.types.spec import (
    ACTION_CACHE,
    StepSpec,
)

# Workflow commands GitHub disabled; a step that prints them would silently do nothing.
# (``::set-output`` and ``::save-state`` are deprecated but still work: ``actions_language.commands``.)
DISABLED_COMMANDS = re.compile(r"::(set-env|add-path)\b")
# Shells GitHub names that the sandbox runs (``python`` runs python3); a custom shell is a
# ``command [args] {0}`` template. GitHub's Windows shells cannot run here.
SHELLS = ("bash", "sh", "python")
UNAVAILABLE_SHELLS = ("pwsh", "powershell", "cmd")
CUSTOM_SHELL_COMMAND = re.compile(r"^[A-Za-z0-9_./+-]+$")
MAX_SHELL_LENGTH = 1024

STEP_KEYS = {"id", "name", "run", "env", "working-directory", "shell", "if", "continue-on-error", "timeout-minutes"}
USES_STEP_KEYS = {"id", "name", "uses", "with", "env", "if", "continue-on-error", "timeout-minutes"}
# ``with:`` inputs of actions/cache leasehold implements (key and path are required).
CACHE_INPUTS = {"key", "path", "restore-keys"}


def run_script(ctx: FileContext, value: Any, line: int | None, key: str) -> str:
    """A step's ``run:`` text (a workflow's or a composite action's): not empty, and none of the
    workflow commands GitHub disabled (printing one would silently do nothing)."""
    run = scalar_text(ctx, value, line, key)
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


def parse_step(
    ctx: FileContext, job_id: str, index: int, raw: Any, line: int | None, needs: list[str], defaults: RunDefaults
) -> StepSpec:
    where = f"jobs.{job_id}.steps[{index}]"
    if not isinstance(raw, YamlMap):
        raise ctx.fail(line, where, "must be a mapping")
    if "uses" in raw:
        return _uses_step(ctx, where, index, raw, needs)
    check_keys(ctx, raw, STEP_KEYS, f"{where}.")

    def ln(key: str) -> int | None:
        return raw.key_lines.get(key, raw.line)

    if "run" not in raw:
        raise ctx.fail(raw.line, where, "a step needs 'run:' or 'uses:'")
    run = run_script(ctx, raw["run"], ln("run"), f"{where}.run")
    check_text(ctx, run, ln("run"), f"{where}.run", STEP_CONTEXTS, needs)
    step_id = parse_step_id(ctx, raw, where, ln("id")) if "id" in raw else None
    # A step's own shell and working-directory win over defaults.run (the job's, then the workflow's).
    shell = _shell(ctx, raw["shell"], ln("shell"), f"{where}.shell") if "shell" in raw else defaults.shell or "bash"
    wd = defaults.working_directory
    if "working-directory" in raw:
        wd = scalar_text(ctx, raw["working-directory"], ln("working-directory"), f"{where}.working-directory")
        check_text(ctx, wd, ln("working-directory"), f"{where}.working-directory", STEP_CONTEXTS, needs)
    first_line = run.strip().splitlines()[0]
    return StepSpec(
        index=index,
        id=step_id,
        name=scalar_text(ctx, raw["name"], ln("name"), f"{where}.name") if "name" in raw else f"Run {first_line}",
        run=run,
        env=env_mapping(ctx, raw.get("env"), ln("env"), f"{where}.env", STEP_CONTEXTS, needs),
        working_directory=wd,
        shell=shell,
        if_expr=if_condition(ctx, raw["if"], ln("if"), f"{where}.if", STEP_CONTEXTS, needs) if "if" in raw else None,
        line=raw.line,
        **_step_limits(ctx, raw, where, needs),
    )


def _uses_step(ctx: FileContext, where: str, index: int, raw: YamlMap, needs: list[str]) -> StepSpec:
    """``uses:`` of an action: its reference is checked here, the action itself at listing."""
    if "run" in raw:
        raise ctx.fail(raw.key_lines.get("run"), f"{where}.run", "a step has either 'run:' or 'uses:', not both")
    check_keys(ctx, raw, USES_STEP_KEYS, f"{where}.")

    def ln(key: str) -> int | None:
        return raw.key_lines.get(key, raw.line)

    uses = scalar_text(ctx, raw["uses"], ln("uses"), f"{where}.uses").strip()
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
        if not isinstance(given, YamlMap):
            raise ctx.fail(ln("with"), f"{where}.with", "must be a mapping of inputs")
        for k, v in given.items():
            kline = given.key_lines.get(k)
            name = str(k)
            if action.lower() == ACTION_CACHE and name not in CACHE_INPUTS:
                raise ctx.fail(
                    kline,
                    f"{where}.with.{name}",
                    f"input not supported here (supported: {', '.join(sorted(CACHE_INPUTS))})",
                )
            text = scalar_text(ctx, v, kline, f"{where}.with.{name}")
            check_text(ctx, text, kline, f"{where}.with.{name}", STEP_CONTEXTS, needs)
            inputs[name] = text
    if action.lower() == ACTION_CACHE:
        for required in ("key", "path"):
            if not inputs.get(required, "").strip():
                raise ctx.fail(ln("with"), f"{where}.with.{required}", "actions/cache needs this input")
    return StepSpec(
        index=index,
        id=parse_step_id(ctx, raw, where, ln("id")) if "id" in raw else None,
        name=scalar_text(ctx, raw["name"], ln("name"), f"{where}.name") if "name" in raw else f"Run {uses}",
        uses=uses,
        with_inputs=inputs,
        env=env_mapping(ctx, raw.get("env"), ln("env"), f"{where}.env", STEP_CONTEXTS, needs),
        if_expr=if_condition(ctx, raw["if"], ln("if"), f"{where}.if", STEP_CONTEXTS, needs) if "if" in raw else None,
        line=raw.line,
        **_step_limits(ctx, raw, where, needs),
    )


def _step_limits(ctx: FileContext, raw: YamlMap, where: str, needs: list[str]) -> dict[str, Any]:
    """A step's ``timeout-minutes`` and ``continue-on-error``: values, or each one ``${{ }}``
    (``${{ matrix.experimental }}``) that the job evaluates when the step starts."""
    limits: dict[str, Any] = {}
    for key, field in (("timeout-minutes", "timeout_minutes"), ("continue-on-error", "continue_on_error")):
        if key not in raw:
            continue
        value, line = raw[key], raw.key_lines.get(key, raw.line)
        expr = start_expression(ctx, value, line, f"{where}.{key}", needs, STEP_LIMIT_CONTEXTS)
        if expr is not None:
            limits[f"{field}_expr"] = expr
        elif field == "timeout_minutes":
            limits[field] = positive_minutes(ctx, value, line, f"{where}.{key}")
        else:
            limits[field] = boolean(ctx, value, line, f"{where}.{key}")
    return limits


def parse_step_id(ctx: FileContext, raw: YamlMap, where: str, line: int | None) -> str:
    step_id = scalar_text(ctx, raw["id"], line, f"{where}.id")
    if not JOB_ID.match(step_id):
        raise ctx.fail(line, f"{where}.id", "must start with a letter or '_' and hold letters, digits, '_', '-'")
    if step_id.startswith(RESERVED_ID_PREFIX):
        raise ctx.fail(line, f"{where}.id", "ids starting with '__' are reserved")
    return step_id


# Job environment: defaults.run and shells ------------------------------------------------------


def _shell(ctx: FileContext, value: Any, line: int | None, key: str) -> str:
    """A shell the sandbox can run: ``bash``, ``sh``, ``python`` or ``command [args] {0}``."""
    text = scalar_text(ctx, value, line, key).strip()
    if "${{" in text:
        raise ctx.fail(line, key, "expressions are not allowed in 'shell'")
    if text in SHELLS:
        return text
    if text.lower() in UNAVAILABLE_SHELLS:
        raise ctx.fail(
            line, key, f"shell {text!r} is not supported here: it cannot run on this deployment's Linux runners"
        )
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
    # Kept as written: quoted arguments are split when the step runs (``actions_language.shells.split_arguments``).
    return text


class RunDefaults:
    """``defaults.run`` in force for a job's ``run:`` steps (the job's over the workflow's)."""

    def __init__(self, shell: str | None = None, working_directory: str | None = None) -> None:
        self.shell = shell
        self.working_directory = working_directory

    def over(self, outer: RunDefaults) -> RunDefaults:
        return RunDefaults(self.shell or outer.shell, self.working_directory or outer.working_directory)


def parse_run_defaults(
    ctx: FileContext, raw: Any, line: int | None, where: str, contexts: set[str], needs: list[str] | None
) -> RunDefaults:
    if raw is None:
        return RunDefaults()
    if not isinstance(raw, YamlMap):
        raise ctx.fail(line, where, "must be a mapping with 'run'")
    check_keys(ctx, raw, {"run"}, f"{where}.")
    run = raw.get("run")
    rline = raw.key_lines.get("run", line)
    if run is None:
        return RunDefaults()
    if not isinstance(run, YamlMap):
        raise ctx.fail(rline, f"{where}.run", "must be a mapping (shell, working-directory)")
    check_keys(ctx, run, {"shell", "working-directory"}, f"{where}.run.")
    shell = _shell(ctx, run["shell"], run.key_lines.get("shell"), f"{where}.run.shell") if "shell" in run else None
    wd = None
    if "working-directory" in run:
        wline = run.key_lines.get("working-directory")
        wd = scalar_text(ctx, run["working-directory"], wline, f"{where}.run.working-directory")
        check_text(ctx, wd, wline, f"{where}.run.working-directory", contexts, needs)
    return RunDefaults(shell, wd or None)
