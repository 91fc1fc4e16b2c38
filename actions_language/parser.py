"""Parsing ``.github/workflows/*.yml`` into a ``WorkflowSpec``: the ``run:`` subset of GitHub Actions.

Anything outside the subset is rejected with the file, 1-based line and key, so a run can fail
with a message a user can act on. The parts live beside this entry point: YAML loading
(``loader``), structural checks (``schema``), expressions and contexts (``contexts``), triggers and
their filters (``triggers``), steps (``steps``) and jobs (``jobs``). ``uses:`` is checked as a
reference only (``actions_language.action_refs``); the action itself is read when the push is
listed (``activities.ci.actions``). Light: PyYAML and pydantic only.
"""

from __future__ import annotations

import logging

from actions_language.contexts import (
    RUN_NAME_CONTEXTS,
    WORKFLOW_CONCURRENCY_CONTEXTS,
    WORKFLOW_DEFAULTS_CONTEXTS,
    WORKFLOW_ENV_CONTEXTS,
    check_text,
    env_mapping,
)
from actions_language.expansion import Expansion, WorkflowReader, load_document, uses_workflows
from actions_language.jobs import check_graph, concurrency_spec, parse_job, permissions_spec
from actions_language.loader import YamlMap
from actions_language.reusable import call_declaration
from actions_language.schema import FileContext, WorkflowSpecError, check_keys, scalar_text
from actions_language.steps import RunDefaults, parse_run_defaults
from actions_language.triggers import (
    dispatch_spec,
    pull_request_filter,
    push_filter,
    schedule_crons,
    typed_event_filter,
    workflow_run_filter,
)
from workflows.ci.expressions import (
    context_paths,
    expressions_in,
    parse,
)
from workflows.ci.types.spec import (
    MAX_JOBS_PER_WORKFLOW,
    JobSpec,
    WorkflowSpec,
)

log = logging.getLogger(__name__)

WORKFLOW_KEYS = {"name", "run-name", "on", "env", "jobs", "defaults", "concurrency", "permissions"}
# The longest run title kept (GitHub cuts run names too).
MAX_RUN_NAME_CHARS = 1024


def parse_workflow(path: str, text: str | bytes, read_workflow: WorkflowReader | None = None) -> WorkflowSpec:
    """Parse and validate one workflow file; raises ``WorkflowSpecError`` and nothing else,
    whatever the bytes: one bad file must fail its own run, never the push's listing.
    ``read_workflow`` reads the other workflow files of the same commit (from git): a job that
    calls one (``uses: ./.github/workflows/x.yml``) becomes its jobs (``actions_language.expansion``);
    without it, such a job is refused."""
    try:
        return _parse_workflow(path, text, read_workflow)
    except WorkflowSpecError:
        raise
    except RecursionError:
        raise FileContext(path).fail(None, None, "the file nests too deeply") from None
    except Exception as exc:  # a parser bug must still fail only this file, with a message
        log.exception("parsing %s failed unexpectedly", path)
        raise FileContext(path).fail(None, None, f"the file could not be parsed ({type(exc).__name__})") from None


def _jobs(ctx: FileContext, doc: YamlMap, defaults: RunDefaults, read_workflow: WorkflowReader | None) -> list[JobSpec]:
    """The workflow's ``jobs``: ids unique (case-insensitively), ``needs`` a graph without cycles;
    a job that calls a reusable workflow expanded into that workflow's jobs."""
    jobs_raw = doc.get("jobs")
    if not isinstance(jobs_raw, YamlMap) or not jobs_raw:
        raise ctx.fail(doc.key_lines.get("jobs", doc.line), "jobs", "a workflow needs a non-empty 'jobs' mapping")
    if len(jobs_raw) > MAX_JOBS_PER_WORKFLOW:
        raise ctx.fail(doc.key_lines.get("jobs"), "jobs", f"at most {MAX_JOBS_PER_WORKFLOW} jobs per workflow")
    if uses_workflows(doc):
        expanded = Expansion(read_workflow).expand(ctx, doc, defaults)
        check_graph(ctx, expanded, {j.id: j.line for j in expanded})
        return expanded
    # Graph errors point at each job's 'needs' line (or the job's own line without one).
    lines = {
        str(k): (v.key_lines.get("needs", v.line) if isinstance(v, YamlMap) else jobs_raw.key_lines.get(k))
        for k, v in jobs_raw.items()
    }
    seen: dict[str, str] = {}
    for k in jobs_raw:
        job_id = scalar_text(ctx, k, jobs_raw.key_lines.get(k), "jobs")
        if job_id.lower() in seen:
            raise ctx.fail(
                jobs_raw.key_lines.get(k),
                f"jobs.{job_id}",
                f"duplicate job id {job_id!r} (ids are case-insensitive: {seen[job_id.lower()]!r})",
            )
        seen[job_id.lower()] = job_id
    jobs = [
        parse_job(ctx, scalar_text(ctx, k, None, "jobs"), v, jobs_raw.key_lines.get(k), defaults)
        for k, v in jobs_raw.items()
    ]
    check_graph(ctx, jobs, lines)
    return jobs


def _parse_workflow(path: str, text: str | bytes, read_workflow: WorkflowReader | None) -> WorkflowSpec:
    ctx = FileContext(path)
    doc = load_document(ctx, text)
    check_keys(ctx, doc, WORKFLOW_KEYS, "")
    if "on" not in doc:
        raise ctx.fail(doc.line, "on", "missing 'on'")
    on_push = push_filter(ctx, doc["on"], doc.key_lines.get("on"))
    on_pull_request = pull_request_filter(ctx, doc["on"])
    on_pull_request_target = pull_request_filter(ctx, doc["on"], "pull_request_target")
    on_release = typed_event_filter(ctx, doc["on"], "release")
    on_merge_group = typed_event_filter(ctx, doc["on"], "merge_group")
    on_workflow_run = workflow_run_filter(ctx, doc["on"])
    on_dispatch = dispatch_spec(ctx, doc["on"])
    on_schedule = schedule_crons(ctx, doc["on"], doc.key_lines.get("on"))
    env = env_mapping(ctx, doc.get("env"), doc.key_lines.get("env"), "env", WORKFLOW_ENV_CONTEXTS, None)
    defaults = parse_run_defaults(
        ctx, doc.get("defaults"), doc.key_lines.get("defaults"), "defaults", WORKFLOW_DEFAULTS_CONTEXTS, None
    )
    concurrency = (
        concurrency_spec(
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
        permissions_spec(ctx, doc["permissions"], doc.key_lines.get("permissions"), "permissions")
        if "permissions" in doc
        else None
    )
    call_declaration(ctx, doc["on"], doc.key_lines.get("on"))
    jobs = _jobs(ctx, doc, defaults, read_workflow)
    name = scalar_text(ctx, doc["name"], doc.key_lines.get("name"), "name") if "name" in doc else path
    run_name = None
    if "run-name" in doc:
        rline = doc.key_lines.get("run-name")
        run_name = scalar_text(ctx, doc["run-name"], rline, "run-name")[:MAX_RUN_NAME_CHARS]
        check_text(ctx, run_name, rline, "run-name", RUN_NAME_CONTEXTS, None)
    for job in jobs:
        job.secrets = job_secret_names(env if job.workflow_env is None else job.workflow_env, job)
    return WorkflowSpec(
        path=path,
        name=name,
        run_name=run_name or None,
        on_push=on_push,
        on_pull_request=on_pull_request,
        on_pull_request_target=on_pull_request_target,
        on_release=on_release,
        on_merge_group=on_merge_group,
        on_workflow_run=on_workflow_run,
        on_dispatch=on_dispatch,
        on_schedule=on_schedule,
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
