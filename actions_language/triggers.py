"""Triggers: ``on.push``, ``on.pull_request`` and ``on.workflow_dispatch`` as written in a workflow
file, and whether a push, pull request or changed-path list triggers the workflow."""

from __future__ import annotations

import re
from typing import Any

from actions_language.cron import CronError, parse_cron
from actions_language.filters import MAX_PATTERNS, check_pattern, matches_any
from actions_language.loader import YamlList, YamlMap
from actions_language.schema import (
    FileContext,
    boolean,
    check_keys,
    finite_number,
    named_entries,
    scalar_text,
    string_list,
)
from workflows.ci.types.spec import (
    DispatchInput,
    DispatchSpec,
    PushFilter,
    WorkflowRunFilter,
)

PUSH_KEYS = {"branches", "branches-ignore", "tags", "tags-ignore", "paths", "paths-ignore"}
DISPATCH_INPUT_KEYS = {"description", "required", "default", "type", "options", "deprecationMessage"}
DISPATCH_INPUT_TYPES = ("string", "boolean", "choice", "number", "environment")
# GitHub's cap on workflow_dispatch inputs.
MAX_DISPATCH_INPUTS = 25
INPUT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
# Cron entries one file may list under on.schedule (each is a Temporal Schedule of its own).
MAX_SCHEDULES = 20


def schedule_crons(ctx: FileContext, on: Any, line: int | None) -> list[str]:
    """``on.schedule``'s cron expressions, as written (checked by ``actions_language.cron``)."""
    named = on == "schedule" or (isinstance(on, list) and "schedule" in on)
    if named:
        raise ctx.fail(line, "on.schedule", "needs its times: 'schedule:' with a list of '- cron: ...' entries")
    if not isinstance(on, YamlMap) or "schedule" not in on:
        return []
    raw, line = on["schedule"], on.key_lines.get("schedule", line)
    if not isinstance(raw, YamlList) or not raw:
        raise ctx.fail(line, "on.schedule", "must be a list of '- cron: ...' entries")
    if len(raw) > MAX_SCHEDULES:
        raise ctx.fail(line, "on.schedule", f"at most {MAX_SCHEDULES} cron entries")
    crons: list[str] = []
    for index, entry in enumerate(raw):
        where = raw.item_lines[index] if index < len(raw.item_lines) else line
        if not isinstance(entry, YamlMap):
            raise ctx.fail(where, "on.schedule", "each entry must be a mapping with 'cron'")
        check_keys(ctx, entry, {"cron"}, "on.schedule.")
        cron = entry.get("cron")
        if not isinstance(cron, str):
            raise ctx.fail(where, "on.schedule.cron", "must be a cron expression in quotes, e.g. '30 5 * * 1'")
        try:
            parse_cron(cron)
        except CronError as exc:
            raise ctx.fail(entry.key_lines.get("cron", where), "on.schedule.cron", f"{cron!r}: {exc}") from None
        crons.append(" ".join(cron.split()))
    return crons


def push_filter(ctx: FileContext, on: Any, line: int | None) -> PushFilter:
    if isinstance(on, str):
        return PushFilter(enabled=on == "push")
    if isinstance(on, list):
        events = string_list(ctx, on, line, "on")
        return PushFilter(enabled="push" in events)
    if not isinstance(on, YamlMap):
        raise ctx.fail(line, "on", "must be an event name, a list of event names or a mapping")
    if "push" not in on:
        return PushFilter(enabled=False)
    exclusive = (("branches", "branches-ignore"), ("tags", "tags-ignore"), ("paths", "paths-ignore"))
    return _event_filter(ctx, on, "push", PUSH_KEYS, exclusive)


def _patterns(ctx: FileContext, value: Any, line: int | None, key: str) -> list[str]:
    """A filter's glob patterns (``actions_language.filters``), bounded in number and length."""
    patterns = string_list(ctx, value, line, key)
    if len(patterns) > MAX_PATTERNS:
        raise ctx.fail(line, key, f"at most {MAX_PATTERNS} patterns")
    for pattern in patterns:
        why = check_pattern(pattern)
        if why is not None:
            raise ctx.fail(line, key, why)
    return patterns


def dispatch_spec(ctx: FileContext, on: Any) -> DispatchSpec | None:
    """``on.workflow_dispatch`` and its inputs; ``None`` when the file cannot be run by hand."""
    if isinstance(on, str):
        return DispatchSpec() if on == "workflow_dispatch" else None
    if isinstance(on, list):
        return DispatchSpec() if "workflow_dispatch" in on else None
    if not isinstance(on, YamlMap) or "workflow_dispatch" not in on:
        return None
    raw = on["workflow_dispatch"]
    line = on.key_lines.get("workflow_dispatch")
    if raw is None:
        return DispatchSpec()
    if not isinstance(raw, YamlMap):
        raise ctx.fail(line, "on.workflow_dispatch", "must be a mapping (with 'inputs') or empty")
    check_keys(ctx, raw, {"inputs"}, "on.workflow_dispatch.")
    inputs_raw = raw.get("inputs")
    iline = raw.key_lines.get("inputs")
    if inputs_raw is None:
        return DispatchSpec()
    if not isinstance(inputs_raw, YamlMap):
        raise ctx.fail(iline, "on.workflow_dispatch.inputs", "must be a mapping of input names to definitions")
    if len(inputs_raw) > MAX_DISPATCH_INPUTS:
        raise ctx.fail(iline, "on.workflow_dispatch.inputs", f"at most {MAX_DISPATCH_INPUTS} inputs")
    inputs: dict[str, DispatchInput] = {}
    for name, v, kline in named_entries(ctx, inputs_raw, "on.workflow_dispatch.inputs"):
        where = f"on.workflow_dispatch.inputs.{name}"
        if not INPUT_NAME.match(name):
            raise ctx.fail(kline, where, "input names start with a letter or '_' and hold letters, digits, '_', '-'")
        if name.lower() in {n.lower() for n in inputs}:
            raise ctx.fail(kline, where, "duplicate input name (names are case-insensitive)")
        inputs[name] = _dispatch_input(ctx, v, kline, where)
    return DispatchSpec(inputs=inputs)


def _dispatch_input(ctx: FileContext, raw: Any, line: int | None, where: str) -> DispatchInput:
    if raw is None:
        return DispatchInput()
    if not isinstance(raw, YamlMap):
        raise ctx.fail(line, where, "must be a mapping (description, required, default, type, options)")
    check_keys(ctx, raw, DISPATCH_INPUT_KEYS, f"{where}.")

    def ln(key: str) -> int | None:
        return raw.key_lines.get(key, raw.line)

    kind = scalar_text(ctx, raw["type"], ln("type"), f"{where}.type") if "type" in raw else "string"
    if kind not in DISPATCH_INPUT_TYPES:
        raise ctx.fail(ln("type"), f"{where}.type", f"supported types: {', '.join(DISPATCH_INPUT_TYPES)}")
    options: list[str] = []
    if "options" in raw:
        if kind != "choice":
            raise ctx.fail(ln("options"), f"{where}.options", "only a 'choice' input has options")
        if not isinstance(raw["options"], YamlList):
            raise ctx.fail(ln("options"), f"{where}.options", "must be a list of strings")
        options = [scalar_text(ctx, o, ln("options"), f"{where}.options") for o in raw["options"]]
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
            number = finite_number(value)
            if number is None:
                raise ctx.fail(dline, f"{where}.default", "a number input's default must be a finite number")
            default = number
        else:
            if not isinstance(value, (str, int, float)):
                raise ctx.fail(dline, f"{where}.default", "must be a string")
            default = scalar_text(ctx, value, dline, f"{where}.default")
            if kind == "choice" and default not in options:
                raise ctx.fail(dline, f"{where}.default", f"{default!r} is not one of the options")
    return DispatchInput(
        type=kind,
        description=scalar_text(ctx, raw["description"], ln("description"), f"{where}.description")
        if "description" in raw
        else "",
        required=boolean(ctx, raw["required"], ln("required"), f"{where}.required") if "required" in raw else False,
        default=default,
        options=options,
    )


PULL_REQUEST_KEYS = {"branches", "branches-ignore", "types", "paths", "paths-ignore"}
# GitHub's activity types of the pull_request (and pull_request_target) event; without
# ``types`` a workflow runs for the first three.
PULL_REQUEST_TYPES = ("opened", "synchronize", "reopened")
PULL_REQUEST_ALL_TYPES = (
    *PULL_REQUEST_TYPES,
    "assigned",
    "unassigned",
    "labeled",
    "unlabeled",
    "edited",
    "closed",
    "converted_to_draft",
    "ready_for_review",
    "locked",
    "unlocked",
    "review_requested",
    "review_request_removed",
    "auto_merge_enabled",
    "auto_merge_disabled",
    "milestoned",
    "demilestoned",
    "enqueued",
    "dequeued",
)
RELEASE_TYPES = ("published", "unpublished", "created", "edited", "deleted", "prereleased", "released")
MERGE_GROUP_TYPES = ("checks_requested",)
WORKFLOW_RUN_TYPES = ("completed", "requested", "in_progress")
# Events whose filter is only ``types`` (all of them by default).
_TYPED_EVENTS = {"release": RELEASE_TYPES, "merge_group": MERGE_GROUP_TYPES}


def _named(on: Any, event: str) -> bool | None:
    """True/False when ``on`` is a name or a list (``event`` named or not); None for a mapping."""
    if isinstance(on, str):
        return on == event
    if isinstance(on, list):
        return event in on
    return None


def _check_types(ctx: FileContext, on: YamlMap, event: str, found: PushFilter, allowed: tuple[str, ...]) -> None:
    for t in found.types or []:
        if t not in allowed:
            raise ctx.fail(
                on[event].key_lines.get("types"), f"on.{event}.types", f"{t!r} is not one of: {', '.join(allowed)}"
            )


def pull_request_filter(ctx: FileContext, on: Any, event: str = "pull_request") -> PushFilter:
    """``on.pull_request`` (or ``on.pull_request_target``: same filters, over the base branch)."""
    named = _named(on, event)
    if named is not None:
        return PushFilter(enabled=named)
    if not isinstance(on, YamlMap) or event not in on:
        return PushFilter(enabled=False)
    exclusive = (("branches", "branches-ignore"), ("paths", "paths-ignore"))
    found = _event_filter(ctx, on, event, PULL_REQUEST_KEYS, exclusive)
    _check_types(ctx, on, event, found, PULL_REQUEST_ALL_TYPES)
    return found


def typed_event_filter(ctx: FileContext, on: Any, event: str) -> PushFilter:
    """``on.release`` / ``on.merge_group``: enabled, and which activity types (None: all)."""
    named = _named(on, event)
    if named is not None:
        return PushFilter(enabled=named)
    if not isinstance(on, YamlMap) or event not in on:
        return PushFilter(enabled=False)
    found = _event_filter(ctx, on, event, {"types"}, ())
    _check_types(ctx, on, event, found, _TYPED_EVENTS[event])
    return found


def typed_event_triggers(event: PushFilter, action: str) -> bool:
    return event.enabled and (event.types is None or action in event.types)


def workflow_run_filter(ctx: FileContext, on: Any) -> WorkflowRunFilter:
    """``on.workflow_run``: the workflows (by name) whose runs trigger this one, the activity
    types (default ``requested`` and ``completed``) and the triggering run's branch filters."""
    if _named(on, "workflow_run"):
        raise ctx.fail(None, "on.workflow_run", "needs 'workflows:' naming the workflows whose runs trigger it")
    if not isinstance(on, YamlMap) or "workflow_run" not in on:
        return WorkflowRunFilter()
    raw, line = on["workflow_run"], on.key_lines.get("workflow_run")
    if not isinstance(raw, YamlMap) or "workflows" not in raw:
        raise ctx.fail(line, "on.workflow_run", "needs 'workflows:' naming the workflows whose runs trigger it")
    check_keys(ctx, raw, {"workflows", "types", "branches", "branches-ignore"}, "on.workflow_run.")
    if "branches" in raw and "branches-ignore" in raw:
        raise ctx.fail(
            raw.key_lines["branches-ignore"],
            "on.workflow_run.branches-ignore",
            "cannot be used together with 'branches'",
        )
    workflows = string_list(ctx, raw["workflows"], raw.key_lines.get("workflows"), "on.workflow_run.workflows")
    types = (
        string_list(ctx, raw["types"], raw.key_lines.get("types"), "on.workflow_run.types") if "types" in raw else None
    )
    for t in types or []:
        if t not in WORKFLOW_RUN_TYPES:
            raise ctx.fail(
                raw.key_lines.get("types"),
                "on.workflow_run.types",
                f"{t!r} is not one of: {', '.join(WORKFLOW_RUN_TYPES)}",
            )

    def patterns(key: str) -> list[str] | None:
        return _patterns(ctx, raw[key], raw.key_lines.get(key), f"on.workflow_run.{key}") if key in raw else None

    return WorkflowRunFilter(
        enabled=True,
        workflows=workflows,
        types=types,
        branches=patterns("branches"),
        branches_ignore=patterns("branches-ignore"),
    )


def workflow_run_triggers(event: WorkflowRunFilter, workflow_name: str, action: str, head_branch: str) -> bool:
    """Whether a run of ``workflow_name`` on ``head_branch`` reaching ``action`` triggers this file."""
    if not event.enabled or action not in (event.types or ("requested", "completed")):
        return False
    if not any(matches_any([w], workflow_name) for w in event.workflows):
        return False
    return branch_allowed(event.branches, event.branches_ignore, head_branch)


def branch_allowed(branches: list[str] | None, ignore: list[str] | None, branch: str) -> bool:
    """GitHub's ``branches`` / ``branches-ignore`` (never both) over one branch name."""
    if branches is not None:
        return _matches_any(branches, branch)
    if ignore is not None:
        return not _matches_any(ignore, branch)
    return True


def _paths_line(event: YamlMap) -> int | None:
    """The line of an event's ``paths`` (or ``paths-ignore``) filter, for errors about it."""
    key = "paths" if "paths" in event else "paths-ignore" if "paths-ignore" in event else None
    return event.key_lines.get(key) if key else None


def _event_filter(
    ctx: FileContext, on: YamlMap, event: str, keys: set[str], exclusive: tuple[tuple[str, str], ...]
) -> PushFilter:
    """``on.<event>``'s filters, checked (the keys of each ``exclusive`` pair exclude each
    other); an event named without filters is enabled for everything."""
    filters = on[event]
    if filters is None:
        return PushFilter(enabled=True)
    if not isinstance(filters, YamlMap):
        raise ctx.fail(on.key_lines.get(event), f"on.{event}", "must be a mapping of filters or empty")
    check_keys(ctx, filters, keys, f"on.{event}.")
    for a, b in exclusive:
        if a in filters and b in filters:
            raise ctx.fail(filters.key_lines[b], f"on.{event}.{b}", f"cannot be used together with '{a}'")
    fields = {
        k.replace("-", "_"): (string_list if k == "types" else _patterns)(
            ctx, filters[k], filters.key_lines.get(k), f"on.{event}.{k}"
        )
        if k in filters
        else None
        for k in keys
    }
    # YAML keys name the fields (``branches-ignore``: ``branches_ignore``).
    return PushFilter.model_validate({"enabled": True, "paths_line": _paths_line(filters), **fields})


def pull_request_triggers(pr: PushFilter, base_branch: str, action: str) -> bool:
    """Whether a pull request into ``base_branch`` with ``action`` triggers the workflow."""
    if not pr.enabled or action not in (pr.types or PULL_REQUEST_TYPES):
        return False
    return branch_allowed(pr.branches, pr.branches_ignore, base_branch)


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
