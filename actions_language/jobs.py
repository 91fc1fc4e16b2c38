"""A job in a workflow file: its keys, environment, strategy (matrix), concurrency and
permissions, and the ``needs`` graph of a workflow's jobs."""

from __future__ import annotations

from typing import Any

from actions_language.containers import container_spec, services_spec
from actions_language.contexts import (
    ENVIRONMENT_URL_CONTEXTS,
    JOB_CONCURRENCY_CONTEXTS,
    JOB_DEFAULTS_CONTEXTS,
    JOB_ENV_CONTEXTS,
    JOB_IF_CONTEXTS,
    JOB_START_CONTEXTS,
    OUTPUT_CONTEXTS,
    STRATEGY_CONTEXTS,
    check_text,
    env_mapping,
    if_condition,
    start_expression,
)
from actions_language.environment_names import check_name, name_expression
from actions_language.loader import YamlList, YamlMap
from actions_language.schema import (
    FileContext,
    boolean,
    check_job_id,
    check_keys,
    finite_number,
    line_of,
    named_entries,
    number_text,
    positive_minutes,
    scalar_text,
    string_list,
)
from actions_language.steps import RunDefaults, parse_run_defaults, parse_step
from workflows.ci.expressions import (
    find_interpolations,
)
from workflows.ci.matrix import MatrixError, expand_matrix
from workflows.ci.types.spec import (
    MAX_STEPS_PER_JOB,
    ConcurrencySpec,
    EnvironmentExpression,
    JobSpec,
    StepSpec,
    StrategySpec,
)

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
    "container",
    "services",
}

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


def _environment(
    ctx: FileContext, value: Any, line: int | None, where: str, needs: list[str]
) -> tuple[str | None, EnvironmentExpression | None]:
    """``environment: name`` or ``environment: {name: ..., url: ...}``; an empty one means none, as
    on GitHub. The url may hold expressions (checked here; it is shown on GitHub's deployment page
    and has no effect here). A name with ``${{ }}`` is checked here and evaluated when the push is
    listed (``actions_language.environment_names``: the run carries the protection rules of the
    environments its jobs name, read by the listing, and decides approvals before it evaluates a
    job's expressions), so it may use only what the listing knows."""
    name_line, name_key = line, where
    if isinstance(value, YamlMap):
        for k in value:
            if k not in ("name", "url"):
                raise ctx.fail(value.key_lines.get(k), f"{where}.{k}", "supported: name, url")
        if "url" in value:
            uline = value.key_lines.get("url")
            url = value["url"]
            if not isinstance(url, str):
                raise ctx.fail(uline, f"{where}.url", "must be a string")
            check_text(ctx, url, uline, f"{where}.url", ENVIRONMENT_URL_CONTEXTS, needs)
        name_line, name_key = value.key_lines.get("name", line), f"{where}.name"
        value = value.get("name")
    if value is None or value == "":
        return None, None
    if not isinstance(value, str):
        raise ctx.fail(name_line, name_key, "must be an environment name")
    if "${{" in value:
        return None, name_expression(ctx, value, name_line, name_key, needs)
    check_name(ctx, value, name_line, name_key)
    return value, None


# Parsed now, run later: strategy, concurrency, permissions ----------------------------------------


def _plain(ctx: FileContext, value: Any, line: int | None, key: str) -> Any:
    """A matrix value as JSON holds it (mappings with string keys, lists, finite numbers)."""
    if isinstance(value, dict):
        return {scalar_text(ctx, k, line, key): _plain(ctx, v, line, key) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(ctx, v, line, key) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = finite_number(value)
        if number is None:
            return number_text(value)
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


def _check_values(ctx: FileContext, value: Any, line: int | None, key: str, needs: list[str]) -> None:
    """Every ``${{ }}`` inside a matrix value is valid where a strategy is evaluated."""
    if isinstance(value, str):
        check_text(ctx, value, line, key, STRATEGY_CONTEXTS, needs)
    elif isinstance(value, dict):
        for v in value.values():
            _check_values(ctx, v, line, key, needs)
    elif isinstance(value, list):
        for v in value:
            _check_values(ctx, v, line, key, needs)


def _whole_expression(ctx: FileContext, value: Any, line: int | None, key: str, needs: list[str], what: str) -> str:
    """A value that must be one ``${{ }}`` expression (``fromJSON(...)``) standing for ``what``."""
    text = value.strip() if isinstance(value, str) else ""
    found = find_interpolations(text)
    if len(found) != 1 or found[0][0] != 0 or found[0][1] != len(text):
        raise ctx.fail(line, key, f"must be {what} or a single ${{{{ }}}} expression such as fromJSON(...)")
    check_text(ctx, text, line, key, STRATEGY_CONTEXTS, needs)
    return text


def _entries(ctx: FileContext, value: Any, line: int | None, key: str, needs: list[str]) -> list[dict[str, Any]] | str:
    """``include`` or ``exclude``: a list of mappings, or one expression."""
    if isinstance(value, str):
        return _whole_expression(ctx, value, line, key, needs, "a list of mappings")
    if not isinstance(value, YamlList) or not all(isinstance(e, YamlMap) for e in value):
        raise ctx.fail(line, key, "must be a list of mappings")
    _check_values(ctx, value, line, key, needs)
    return [_plain(ctx, e, line, key) for e in value]


def _strategy(ctx: FileContext, raw: Any, line: int | None, where: str, needs: list[str]) -> StrategySpec | None:
    """The job's strategy; ``None`` for one without a matrix (``fail-fast``/``max-parallel``
    alone, which GitHub accepts and which mean nothing for a single job: they are checked all
    the same)."""
    if not isinstance(raw, YamlMap):
        raise ctx.fail(line, where, "must be a mapping (matrix, fail-fast, max-parallel)")
    check_keys(ctx, raw, {"matrix", "fail-fast", "max-parallel"}, f"{where}.")
    spec = StrategySpec(line=line)
    if "matrix" not in raw:
        _strategy_options(ctx, raw, spec, where, needs)
        return None
    matrix, mline, mkey = raw["matrix"], raw.key_lines.get("matrix"), f"{where}.matrix"
    if isinstance(matrix, str):
        spec.matrix_expression = _whole_expression(ctx, matrix, mline, mkey, needs, "a mapping")
    elif isinstance(matrix, YamlMap):
        for k, v in matrix.items():
            kline = matrix.key_lines.get(k, mline)
            name = scalar_text(ctx, k, kline, mkey)
            if name in ("include", "exclude"):
                setattr(spec, name, _entries(ctx, v, kline, f"{mkey}.{name}", needs))
            elif isinstance(v, str):
                spec.axes[name] = _whole_expression(ctx, v, kline, f"{mkey}.{name}", needs, "a list of values")
            elif isinstance(v, YamlList):
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


def _strategy_options(ctx: FileContext, raw: YamlMap, spec: StrategySpec, where: str, needs: list[str]) -> None:
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


def _expand_static(ctx: FileContext, spec: StrategySpec, line: int | None, key: str) -> None:
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


def concurrency_spec(
    ctx: FileContext, raw: Any, line: int | None, where: str, contexts: set[str], needs: list[str] | None
) -> ConcurrencySpec:
    """``concurrency: group`` or ``{group, cancel-in-progress}``."""
    cancel: bool | str = False
    if isinstance(raw, YamlMap):
        check_keys(ctx, raw, {"group", "cancel-in-progress"}, f"{where}.")
        if "group" not in raw:
            raise ctx.fail(line, f"{where}.group", "a concurrency mapping needs 'group'")
        gline = raw.key_lines.get("group")
        group = scalar_text(ctx, raw["group"], gline, f"{where}.group")
        if "cancel-in-progress" in raw:
            value, cline = raw["cancel-in-progress"], raw.key_lines.get("cancel-in-progress")
            if isinstance(value, bool):
                cancel = value
            else:
                text = scalar_text(ctx, value, cline, f"{where}.cancel-in-progress")
                if not text.strip().startswith("${{"):
                    raise ctx.fail(cline, f"{where}.cancel-in-progress", "must be true, false or an expression")
                check_text(ctx, text, cline, f"{where}.cancel-in-progress", contexts, needs)
                cancel = text
    elif isinstance(raw, (str, int, float)) and not isinstance(raw, bool):
        gline, group = line, scalar_text(ctx, raw, line, where)
    else:
        raise ctx.fail(line, where, "must be a group name or a mapping (group, cancel-in-progress)")
    if not group.strip():
        raise ctx.fail(gline, where, "the concurrency group must not be empty")
    check_text(ctx, group, gline, where, contexts, needs)
    return ConcurrencySpec(group=group, cancel_in_progress=cancel, line=line)


def permissions_spec(ctx: FileContext, raw: Any, line: int | None, where: str) -> str | dict[str, str]:
    """``read-all``, ``write-all`` or scope -> read/write/none. Informational: no token is issued."""
    if raw in ("read-all", "write-all"):
        return str(raw)
    if not isinstance(raw, YamlMap):
        raise ctx.fail(line, where, "must be read-all, write-all or a mapping of scopes to read, write or none")
    kept: dict[str, str] = {}
    for name, level, sline in named_entries(ctx, raw, where):
        if name not in PERMISSION_SCOPES:
            raise ctx.fail(
                sline, f"{where}.{name}", f"unknown permission scope (known: {', '.join(sorted(PERMISSION_SCOPES))})"
            )
        allowed = PERMISSION_LIMITS.get(name, PERMISSION_LEVELS)
        if level not in allowed:
            raise ctx.fail(sline, f"{where}.{name}", f"must be one of: {', '.join(sorted(allowed))}")
        kept[name] = str(level)
    return kept


def _job_steps(ctx: FileContext, job_id: str, raw: YamlMap, needs: list[str], defaults: RunDefaults) -> list[StepSpec]:
    """A job's ``steps`` under its ``defaults.run`` (over the workflow's), step ids unique."""
    where = f"jobs.{job_id}"

    def ln(key: str) -> int | None:
        return raw.key_lines.get(key, raw.line)

    steps_raw = raw.get("steps")
    if not isinstance(steps_raw, YamlList) or not steps_raw:
        raise ctx.fail(ln("steps"), f"{where}.steps", "a job needs a non-empty list of steps")
    if len(steps_raw) > MAX_STEPS_PER_JOB:
        raise ctx.fail(ln("steps"), f"{where}.steps", f"at most {MAX_STEPS_PER_JOB} steps per job")
    run_defaults = (
        parse_run_defaults(ctx, raw["defaults"], ln("defaults"), f"{where}.defaults", JOB_DEFAULTS_CONTEXTS, needs)
        if "defaults" in raw
        else RunDefaults()
    ).over(defaults)
    steps = [parse_step(ctx, job_id, i, s, line_of(steps_raw, i), needs, run_defaults) for i, s in enumerate(steps_raw)]
    seen: dict[str, str] = {}
    for step in steps:
        if step.id:
            if step.id.lower() in seen:
                raise ctx.fail(
                    line_of(steps_raw, step.index),
                    f"{where}.steps[{step.index}].id",
                    f"duplicate step id {step.id!r} (ids are case-insensitive: {seen[step.id.lower()]!r})",
                )
            seen[step.id.lower()] = step.id
    return steps


def _job_outputs(ctx: FileContext, where: str, raw: YamlMap, needs: list[str]) -> dict[str, str]:
    """A job's ``outputs``: names to the expressions that give them."""
    outputs: dict[str, str] = {}
    if "outputs" in raw:
        out = raw["outputs"]
        if not isinstance(out, YamlMap):
            raise ctx.fail(
                raw.key_lines.get("outputs", raw.line), f"{where}.outputs", "must be a mapping of names to expressions"
            )
        for k, v in out.items():
            kline = out.key_lines.get(k)
            text = scalar_text(ctx, v, kline, f"{where}.outputs.{k}")
            check_text(ctx, text, kline, f"{where}.outputs.{k}", OUTPUT_CONTEXTS, needs)
            outputs[str(k)] = text
    return outputs


def parse_job(ctx: FileContext, job_id: str, raw: Any, line: int | None, defaults: RunDefaults) -> JobSpec:
    where = f"jobs.{job_id}"
    check_job_id(ctx, job_id, line)
    if not isinstance(raw, YamlMap):
        raise ctx.fail(line, where, "must be a mapping")
    check_keys(ctx, raw, JOB_KEYS, f"{where}.")

    def ln(key: str) -> int | None:
        return raw.key_lines.get(key, raw.line)

    needs = string_list(ctx, raw["needs"], ln("needs"), f"{where}.needs") if "needs" in raw else []
    runs_on = string_list(ctx, raw.get("runs-on"), ln("runs-on"), f"{where}.runs-on") if "runs-on" in raw else None
    if runs_on is None:
        raise ctx.fail(raw.line, where, "a job needs 'runs-on'")
    if not runs_on or any(not label.strip() for label in runs_on):
        raise ctx.fail(ln("runs-on"), f"{where}.runs-on", "labels must be non-empty strings")
    for label in runs_on:
        check_text(ctx, label, ln("runs-on"), f"{where}.runs-on", JOB_START_CONTEXTS, needs)
    steps = _job_steps(ctx, job_id, raw, needs, defaults)
    outputs = _job_outputs(ctx, where, raw, needs)
    name = scalar_text(ctx, raw["name"], ln("name"), f"{where}.name") if "name" in raw else job_id
    check_text(ctx, name, ln("name"), f"{where}.name", JOB_START_CONTEXTS, needs)
    timeout_expr = start_expression(
        ctx, raw.get("timeout-minutes"), ln("timeout-minutes"), f"{where}.timeout-minutes", needs
    )
    continue_expr = start_expression(
        ctx, raw.get("continue-on-error"), ln("continue-on-error"), f"{where}.continue-on-error", needs
    )
    environment, environment_expression = (
        _environment(ctx, raw["environment"], ln("environment"), f"{where}.environment", needs)
        if "environment" in raw
        else (None, None)
    )
    return JobSpec(
        id=job_id,
        name=name,
        needs=needs,
        runs_on=runs_on,
        env=env_mapping(ctx, raw.get("env"), ln("env"), f"{where}.env", JOB_ENV_CONTEXTS, needs),
        if_expr=if_condition(ctx, raw["if"], ln("if"), f"{where}.if", JOB_IF_CONTEXTS, needs) if "if" in raw else None,
        timeout_minutes=positive_minutes(ctx, raw["timeout-minutes"], ln("timeout-minutes"), f"{where}.timeout-minutes")
        if "timeout-minutes" in raw and timeout_expr is None
        else 360.0,
        timeout_minutes_expr=timeout_expr,
        continue_on_error=boolean(ctx, raw["continue-on-error"], ln("continue-on-error"), f"{where}.continue-on-error")
        if "continue-on-error" in raw and continue_expr is None
        else False,
        continue_on_error_expr=continue_expr,
        outputs=outputs,
        steps=steps,
        network=boolean(ctx, raw["network"], ln("network"), f"{where}.network") if "network" in raw else False,
        line=line,
        environment=environment,
        environment_expression=environment_expression,
        strategy=_strategy(ctx, raw["strategy"], ln("strategy"), f"{where}.strategy", needs)
        if "strategy" in raw
        else None,
        concurrency=concurrency_spec(
            ctx, raw["concurrency"], ln("concurrency"), f"{where}.concurrency", JOB_CONCURRENCY_CONTEXTS, needs
        )
        if "concurrency" in raw
        else None,
        permissions=permissions_spec(ctx, raw["permissions"], ln("permissions"), f"{where}.permissions")
        if "permissions" in raw
        else None,
        container=container_spec(ctx, raw["container"], ln("container"), f"{where}.container")
        if "container" in raw
        else None,
        services=services_spec(ctx, raw["services"], ln("services"), f"{where}.services") if "services" in raw else {},
    )


def check_graph(ctx: FileContext, jobs: list[JobSpec], lines: dict[str, int | None]) -> None:
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
