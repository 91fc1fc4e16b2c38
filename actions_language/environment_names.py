"""A job's ``environment:`` name: written out, or an expression evaluated when the push is listed.

A repository's protection rules (approvals) and an environment's variables travel with the run
from the push's listing (``activities.ci.listing``), and the run decides approvals before it
evaluates any job expression. So a name written with ``${{ }}`` is evaluated by the listing,
over what it knows as the jobs will: ``github`` (the run's, built as the jobs' is), ``vars``
(the push's) and ``inputs`` (a dispatch's, checked). The contexts GitHub also allows there
(``needs``, ``strategy``, ``matrix``: a matrix is expanded by the run) are known only once the
run has started, after approvals are decided: they are refused, naming file, line and key.
A name a call's ``with:`` wrote out (matrix values included) is already text when the called
file is read (``actions_language.expansion``).

The evaluated name is then checked as a written one, and replaces the expression in the spec:
everything after the listing (rules, variables, the API) sees a plain name."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from actions_language.contexts import JOB_START_CONTEXTS, check_text
from actions_language.inputs import ENVIRONMENT_NAME
from actions_language.schema import FileContext, WorkflowSpecError
from workflows.ci.expressions import ExpressionError, context_paths, expressions_in, interpolate, parse
from workflows.ci.types.spec import EnvironmentExpression, JobSpec, SpecError, WorkflowSpec

log = logging.getLogger(__name__)

NAME_REFUSED = "environment names other than letters, digits, '_', '-', '.' (at most 100) are not supported here"
# GitHub's contexts for ``jobs.<id>.environment`` (those of a job's start); the listing knows these.
GITHUB_NAME_CONTEXTS = JOB_START_CONTEXTS
LISTING_CONTEXTS = frozenset({"github", "vars", "inputs"})
# ``github`` properties a job's context adds when it starts (``activities.ci.job_context``): the
# listing's ``github`` is the run's (``workflows.ci.event.push_github_context``) without them.
RUN_TIME_GITHUB = frozenset(
    {"job", "run_attempt", "run_number", "workflow_ref", "workspace", "event_path", "action", "action_path"}
)


def check_name(ctx: FileContext, name: str, line: int | None, key: str) -> None:
    """A written (or evaluated) name: the characters and length GitHub allows (the rule a
    dispatch's ``environment`` input and the environments' records hold too)."""
    if not ENVIRONMENT_NAME.match(name):
        raise ctx.fail(line, key, NAME_REFUSED)


def name_expression(
    ctx: FileContext, text: str, line: int | None, key: str, needs: list[str] | None
) -> EnvironmentExpression:
    """A name written with ``${{ }}``: checked over GitHub's contexts for it, then over what the
    listing knows; the listing evaluates it (``evaluate_names``)."""
    check_text(ctx, text, line, key, set(GITHUB_NAME_CONTEXTS), needs)
    for expr in expressions_in(text):
        for path in context_paths(parse(expr)):
            root = path[0].lower()
            if root not in LISTING_CONTEXTS:
                raise ctx.fail(line, key, _unknown_at_listing(f"context {root!r}"))
            if root == "github" and len(path) > 1 and path[1].lower() in RUN_TIME_GITHUB:
                raise ctx.fail(line, key, _unknown_at_listing(f"github.{path[1].lower()}"))
    return EnvironmentExpression(text=text, file=ctx.path, line=line, key=key)


def _unknown_at_listing(what: str) -> str:
    allowed = ", ".join(sorted(LISTING_CONTEXTS))
    return (
        f"{what} in an environment name is not supported here: it would be known only at run time, "
        f"after approvals are decided (an environment name may use {allowed})"
    )


def evaluate_names(spec: WorkflowSpec, contexts: Mapping[str, Any]) -> None:
    """Replace each job's expression name by its value over ``contexts`` (``github``, ``vars``,
    ``inputs``); an empty value means no environment, as a written ``''`` does. Raises
    ``WorkflowSpecError`` naming the file, line and key written, whatever the expression does."""
    for job in spec.jobs:
        if job.environment_expression is not None:
            _evaluate(job, job.environment_expression, contexts)


def _evaluate(job: JobSpec, written: EnvironmentExpression, contexts: Mapping[str, Any]) -> None:
    ctx = FileContext(written.file)
    try:
        name = interpolate(written.text, dict(contexts))
    except ExpressionError as exc:
        raise ctx.fail(written.line, written.key, f"the environment name could not be evaluated: {exc}") from None
    except RecursionError:
        raise ctx.fail(written.line, written.key, "the environment name nests too deeply") from None
    except Exception as exc:  # an evaluator bug must refuse this file, never fail the listing
        log.exception("evaluating %s of %s failed unexpectedly", written.key, written.file)
        message = f"the environment name could not be evaluated ({type(exc).__name__})"
        raise ctx.fail(written.line, written.key, message) from None
    if name:
        try:
            check_name(ctx, name, written.line, written.key)
        except WorkflowSpecError as exc:
            raise _with_value(exc.error, name) from None
    job.environment = name or None
    job.environment_expression = None


def _with_value(error: SpecError, name: str) -> WorkflowSpecError:
    shown = name if len(name) <= 120 else name[:120] + "..."
    return WorkflowSpecError(error.model_copy(update={"message": f"{error.message} (it evaluated to {shown!r})"}))
