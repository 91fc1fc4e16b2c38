"""What a CI job attempt's steps see of it: the expression contexts (``github``, ``runner``,
``strategy``...) and the base environment every sandboxed process starts from."""

from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass, field
from typing import Any

from actions_language.masking import ADD_MASK
from workflows.ci.event import push_actor, push_event, push_github_context
from workflows.ci.expressions import github_context, truthy
from workflows.ci.ids import idempotency_key
from workflows.ci.matrix import evaluate_minutes, evaluate_value
from workflows.ci.types.job import JobActivityInput
from workflows.ci.types.spec import StepSpec

# GitHub's runner.arch names for the worker's machine types.
RUNNER_ARCH = {"x86_64": "X64", "amd64": "X64", "aarch64": "ARM64", "arm64": "ARM64", "i686": "X86", "armv7l": "ARM"}
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Last on PATH: ``python``/``pip`` as GitHub's images have them, where the host lacks them
# (``activities.ci.jobroot.TOOL_LINKS``).
TOOLS_PATH = "runner/bin"
# The longest a step's timeout-minutes may be (the parser's cap for a written value).
MAX_STEP_MINUTES = 5 * 24 * 60.0


def resolve_step_limits(step: StepSpec, context: dict[str, Any]) -> StepSpec:
    """The step with its ``timeout-minutes``/``continue-on-error`` expressions evaluated (as
    the run does for a job's); ``ExpressionError`` names a value that is no positive number."""
    update: dict[str, Any] = {}
    if step.timeout_minutes_expr:
        update["timeout_minutes"] = evaluate_minutes(step.timeout_minutes_expr, context, MAX_STEP_MINUTES)
    if step.continue_on_error_expr:
        update["continue_on_error"] = truthy(evaluate_value(step.continue_on_error_expr, dict(context)))
    return step.model_copy(update=update) if update else step


def shown_name(name: str) -> str:
    """A step name for the log: a default name made of an ``::add-mask::`` command line must
    not print the value before the command has run."""
    cut = name.find(ADD_MASK.decode())
    return name if cut == -1 else name[: cut + len(ADD_MASK)] + "***"


@dataclass(frozen=True)
class JobContext:
    """The attempt's input, number, sandbox mount point and worker identity: all its contexts
    and base environment are made of these (and of the secrets, passed in when known)."""

    inp: JobActivityInput
    attempt: int
    mount: str
    identity: str
    # ``job.container`` and ``job.services`` as the OCI backend filled them (``begin_job``).
    containers: dict[str, Any] = field(default_factory=dict)

    def actor(self) -> str:
        """``github.actor``: who pushed."""
        return push_actor(self.inp.push)

    def event(self) -> dict[str, Any]:
        """The webhook-shaped event payload (``$GITHUB_EVENT_PATH``)."""
        return push_event(self.inp.push)

    def runner(self) -> dict[str, str]:
        """The ``runner`` context (also the ``RUNNER_*`` variables)."""
        m = self.mount
        # A stable name per worker that does not reveal its host.
        name = "leasehold-" + hashlib.sha256(self.identity.encode()).hexdigest()[:8]
        return {
            "os": "Linux",
            "arch": RUNNER_ARCH.get(platform.machine().lower(), platform.machine().upper()),
            "name": name,
            "environment": "self-hosted",
            "temp": f"{m}/tmp",
            "tool_cache": f"{m}/home/tool-cache",
            "workspace": f"{m}/work",
        }

    def strategy(self) -> dict[str, Any]:
        strategy = self.inp.job.strategy
        if not self.inp.matrix or strategy is None:
            return {}
        return {
            "fail-fast": strategy.fail_fast,
            "job-index": self.inp.job_index,
            "job-total": self.inp.job_total,
            "max-parallel": strategy.max_parallel or self.inp.job_total,
        }

    def base_env(self) -> dict[str, str]:
        """The variables every sandboxed process of the attempt starts with."""
        inp = self.inp
        gh = github_context(inp.push.commit_sha, inp.push.ref, inp.push.repo_full_name, inp.run_id, inp.workflow_name)
        m = self.mount
        return {
            "PATH": f"{PATH}:{m}/{TOOLS_PATH}",
            "HOME": f"{m}/home",
            "TMPDIR": f"{m}/tmp",
            "LANG": "C.UTF-8",
            "CI": "true",
            "CI_RUN_ID": inp.run_id,
            "CI_JOB": self.inp.job.id,
            "CI_ATTEMPT": str(self.attempt),
            "CI_IDEMPOTENCY_KEY": idempotency_key(inp.run_id, self.inp.job.id),
            "GITHUB_SHA": inp.push.commit_sha,
            "GITHUB_REF": inp.push.ref,
            "GITHUB_REF_NAME": str(gh["ref_name"]),
            "GITHUB_REF_TYPE": str(gh["ref_type"]),
            "GITHUB_REPOSITORY": inp.push.repo_full_name,
            "GITHUB_REPOSITORY_OWNER": str(gh["repository_owner"]),
            "GITHUB_WORKSPACE": f"{m}/work",
            "GITHUB_RUN_ID": inp.run_id,
            "GITHUB_RUN_ATTEMPT": str(self.attempt),
            # A combination's job id is its matrix job's, as on GitHub (``CI_JOB`` is its own).
            "GITHUB_JOB": self.inp.matrix_job_id or self.inp.job.id,
            "GITHUB_WORKFLOW": inp.workflow_name,
            "GITHUB_EVENT_NAME": inp.push.event,
            "GITHUB_EVENT_PATH": f"{m}/runner/event.json",
            "GITHUB_ACTIONS": "true",
            "GITHUB_ACTOR": self.actor(),
            "GITHUB_TRIGGERING_ACTOR": self.actor(),
            "GITHUB_RUN_NUMBER": str(inp.run_number or 1),
            "GITHUB_WORKFLOW_REF": f"{inp.push.repo_full_name}/{inp.workflow_path}@{inp.push.ref}",
            "GITHUB_HEAD_REF": inp.push.pull_request.head_ref if inp.push.pull_request else "",
            "GITHUB_BASE_REF": inp.push.pull_request.base_ref if inp.push.pull_request else "",
            **{f"RUNNER_{k.upper()}": v for k, v in self.runner().items() if k != "workspace"},
        }

    def context(
        self, env: dict[str, str], steps_ctx: dict[str, Any], job_status: str, secrets: dict[str, str]
    ) -> dict[str, Any]:
        """The contexts an expression of a step sees, with ``env``, ``steps`` and the job's status."""
        inp = self.inp
        push = inp.push
        github = push_github_context(push, inp.run_id, inp.workflow_name)
        # What only the worker knows: where the workspace is, and which attempt this is.
        github.update(
            workspace=f"{self.mount}/work",
            event_path=f"{self.mount}/runner/event.json",
            run_number=str(inp.run_number or 1),
            run_attempt=str(self.attempt),
            job=inp.matrix_job_id or self.inp.job.id,
            workflow_ref=f"{push.repo_full_name}/{inp.workflow_path}@{push.ref}",
        )
        return {
            "github": github,
            "env": env,
            "needs": {k: v.model_dump() for k, v in inp.needs.items()},
            "steps": steps_ctx,
            "job": {
                "status": job_status,
                "container": self.containers.get("container", {}),
                "services": self.containers.get("services", {}),
            },
            "runner": self.runner(),
            "secrets": secrets,
            "strategy": self.strategy(),
            "matrix": dict(inp.matrix),
            "vars": inp.vars_context,
            "inputs": dict(push.inputs),
        }
