"""Running a resolved action inside the job's sandbox: composite steps and JavaScript actions.

Nothing of an action runs on the worker: a composite action's ``run:`` steps and a JavaScript
action's ``pre``/``main``/``post`` (with the machine's ``node``, found in the sandbox's read-only
``/usr``) are sandboxed processes of the job, as its uid, exactly like its own ``run:`` steps.
An action's files are the job's workspace (``./path``) or a root-owned copy of the action's
commit that the job can read but not change.

GitHub's action environment: ``INPUT_<NAME>`` (upper-case, spaces to ``_``) for every input
given or defaulted, ``GITHUB_ACTION_PATH``, the step files ``$GITHUB_OUTPUT``/``$GITHUB_ENV``/
``$GITHUB_PATH``/``$GITHUB_STATE``, and ``STATE_<name>`` for what ``pre``/``main`` saved. ``pre``
runs just before ``main`` (not at job set-up: its inputs may use earlier steps' outputs);
``post`` runs when the job's steps are done, in reverse order, when ``post-if`` holds (default
``always()``, so after a failure too).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from activities.ci.git import GitError
from workflows.ci.expressions import ExpressionError, StatusFunctions, evaluate_condition, interpolate
from workflows.ci.types.job import StepStatus
from workflows.ci.types.spec import ActionSpec, StepSpec

log = logging.getLogger(__name__)

# How deep composite actions may nest (the listing refuses deeper ones; this guards old payloads).
MAX_ACTION_DEPTH = 10
# All post steps of a job together may run this long, even after the job's own timeout.
POST_SECONDS = 300.0
NODE = "node"


@dataclass
class SandboxRun:
    """How one sandboxed process (or a whole action) ended, and what it wrote to its step files."""

    outcome: StepStatus
    exit_code: int | None
    outputs: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    state: dict[str, str] = field(default_factory=dict)


class StepHost(Protocol):
    """What the job attempt offers an action: its sandbox, contexts and log."""

    mount: str
    cancelled: bool
    shutdown: bool

    def run_script(
        self, label: str, script: str, shell: str, workdir: str | None, step_env: dict[str, str], deadline: float
    ) -> SandboxRun: ...

    def run_in_sandbox(
        self,
        label: str,
        argv: list[str],
        step_env: dict[str, str],
        cwd: str,
        deadline: float,
        state: dict[str, str] | None = None,
    ) -> SandboxRun: ...

    def context(self, env: dict[str, str], steps_ctx: dict[str, Any], job_status: str) -> dict[str, Any]: ...

    def status_functions(self, failed: bool) -> StatusFunctions: ...

    def action_dir(self, spec: ActionSpec) -> str: ...

    def say(self, text: str) -> None: ...


@dataclass
class _Post:
    label: str
    spec: ActionSpec
    action_dir: str
    env: dict[str, str]
    state: dict[str, str]


@dataclass(frozen=True)
class _Call:
    """One run of an action by a step: its log label, the action and where its files are, the
    step's environment with the action's own variables, its deadline, whether the job has
    failed so far, and how deep in composite actions it runs."""

    label: str
    spec: ActionSpec
    action_dir: str
    env: dict[str, str]
    deadline: float
    job_failed: bool
    depth: int


def input_variable(name: str) -> str:
    """GitHub's variable for input ``name``: ``INPUT_`` + upper-case, spaces to ``_``."""
    return "INPUT_" + name.replace(" ", "_").upper()


class ActionRunner:
    """Runs the non-built-in ``uses:`` steps of one job attempt, and their post steps at its end."""

    def __init__(self, host: StepHost) -> None:
        self._host = host
        self._posts: list[_Post] = []

    def run(
        self,
        label: str,
        step: StepSpec,
        inputs: dict[str, str],
        step_env: dict[str, str],
        deadline: float,
        job_failed: bool,
        depth: int = 0,
    ) -> SandboxRun:
        """Run ``step``'s action with its evaluated ``with:`` inputs; never raises for the job's
        own errors (a bad expression fails the step)."""
        spec = step.resolved
        if spec is None:
            self._host.say(f"[leasehold] {label}: action {step.uses!r} was not resolved when the push was listed")
            return SandboxRun(StepStatus.FAILURE, None)
        if depth >= MAX_ACTION_DEPTH:
            self._host.say(f"[leasehold] {label}: actions nest deeper than {MAX_ACTION_DEPTH}")
            return SandboxRun(StepStatus.FAILURE, None)
        try:
            action_dir = self._host.action_dir(spec)
        except GitError as exc:
            # A tree that cannot be extracted safely (a link leading out of it) is the action's
            # fault: the step fails, rather than the attempt being retried to the same end.
            self._host.say(f"[leasehold] {label}: the action's files could not be put in place: {exc}")
            return SandboxRun(StepStatus.FAILURE, None)
        try:
            values = self._inputs(spec, inputs, step_env, job_failed)
        except ExpressionError as exc:
            self._host.say(f"[leasehold] {label}: input default: {exc}")
            return SandboxRun(StepStatus.FAILURE, None)
        env = dict(step_env)
        env["GITHUB_ACTION_PATH"] = action_dir
        env["GITHUB_ACTION_REPOSITORY"] = spec.repository or ""
        env["GITHUB_ACTION_REF"] = spec.sha or ""
        call = _Call(label, spec, action_dir, env, deadline, job_failed, depth)
        return self._composite(call, values) if spec.is_composite else self._javascript(call, values)

    def _inputs(self, spec: ActionSpec, given: dict[str, str], env: dict[str, str], job_failed: bool) -> dict[str, str]:
        values = {name.lower(): value for name, value in given.items()}
        ctx = self._host.context(env, {}, "failure" if job_failed else "success")
        for name, declared in spec.inputs.items():
            if name not in values and declared.default is not None:
                values[name] = interpolate(declared.default, ctx, self._host.status_functions(job_failed))
            values.setdefault(name, "")
        return values

    def _javascript(self, call: _Call, inputs: dict[str, str]) -> SandboxRun:
        label, spec, action_dir, deadline = call.label, call.spec, call.action_dir, call.deadline
        env = {**call.env, **{input_variable(name): value for name, value in inputs.items()}}
        cwd = env.get("GITHUB_WORKSPACE") or f"{self._host.mount}/work"
        state: dict[str, str] = {}
        changed_env: dict[str, str] = {}
        if spec.pre and self._holds(spec.pre_if, env, call.job_failed):
            pre = self._host.run_in_sandbox(f"{label} (pre)", [NODE, f"{action_dir}/{spec.pre}"], env, cwd, deadline)
            state.update(pre.state)
            changed_env.update(pre.env)
            env = {**env, **pre.env}
            if pre.outcome != StepStatus.SUCCESS:
                return SandboxRun(pre.outcome, pre.exit_code, env=changed_env)
        assert spec.main is not None
        main = self._host.run_in_sandbox(label, [NODE, f"{action_dir}/{spec.main}"], env, cwd, deadline, state)
        state.update(main.state)
        changed_env.update(main.env)
        if spec.post:
            self._posts.append(_Post(label, spec, action_dir, {**env, **main.env}, state))
        return SandboxRun(main.outcome, main.exit_code, outputs=main.outputs, env=changed_env)

    def _holds(self, condition: str | None, env: dict[str, str], job_failed: bool) -> bool:
        try:
            return evaluate_condition(
                condition or "always()",
                self._host.status_functions(job_failed),
                self._host.context(env, {}, "failure" if job_failed else "success"),
            )
        except ExpressionError as exc:
            self._host.say(f"[leasehold] condition {condition!r}: {exc}")
            return False

    def _composite(self, call: _Call, inputs: dict[str, str]) -> SandboxRun:
        label, spec, action_dir, deadline, env = call.label, call.spec, call.action_dir, call.deadline, call.env
        steps_ctx: dict[str, Any] = {}
        changed_env: dict[str, str] = {}
        failed = False
        exit_code: int | None = 0
        for sub in spec.steps:
            sub_label = f"{label} > {sub.index + 1}"
            if self._host.cancelled or self._host.shutdown:
                failed = True
                break
            status = self._host.status_functions(call.job_failed or failed)
            sub_env = {**env, **changed_env}
            try:
                ctx = self._action_context(sub_env, steps_ctx, call.job_failed or failed, inputs, action_dir)
                for k, v in sub.env.items():
                    sub_env[k] = interpolate(v, ctx, status)
                ctx = self._action_context(sub_env, steps_ctx, call.job_failed or failed, inputs, action_dir)
                if not evaluate_condition(sub.if_expr, status, ctx):
                    if sub.id:
                        steps_ctx[sub.id] = {"outputs": {}, "outcome": "skipped", "conclusion": "skipped"}
                    continue
                self._host.say(f"[leasehold] {sub_label}: {sub.name}")
                if sub.uses is not None:
                    given = {k: interpolate(v, ctx, status) for k, v in sub.with_inputs.items()}
                    run = self.run(sub_label, sub, given, sub_env, deadline, call.job_failed or failed, call.depth + 1)
                else:
                    script = interpolate(sub.run, ctx, status)
                    workdir = interpolate(sub.working_directory, ctx, status) if sub.working_directory else None
                    run = self._host.run_script(sub_label, script, sub.shell, workdir, sub_env, deadline)
            except ExpressionError as exc:
                self._host.say(f"[leasehold] {sub_label}: {exc}")
                run = SandboxRun(StepStatus.FAILURE, None)
            changed_env.update(run.env)
            conclusion = StepStatus.SUCCESS if sub.continue_on_error else run.outcome
            if sub.id:
                steps_ctx[sub.id] = {
                    "outputs": run.outputs,
                    "outcome": run.outcome.value,
                    "conclusion": conclusion.value,
                }
            if conclusion != StepStatus.SUCCESS and not failed:
                failed, exit_code = True, run.exit_code
        outputs: dict[str, str] = {}
        ctx = self._action_context({**env, **changed_env}, steps_ctx, call.job_failed or failed, inputs, action_dir)
        for name, expr in spec.outputs.items():
            try:
                outputs[name] = interpolate(expr, ctx, self._host.status_functions(call.job_failed or failed))
            except ExpressionError as exc:
                self._host.say(f"[leasehold] {label}: output {name}: {exc}")
        outcome = StepStatus.FAILURE if failed else StepStatus.SUCCESS
        return SandboxRun(outcome, exit_code, outputs=outputs, env=changed_env)

    def _action_context(
        self, env: dict[str, str], steps_ctx: dict[str, Any], failed: bool, inputs: dict[str, str], action_dir: str
    ) -> dict[str, Any]:
        ctx = self._host.context(env, steps_ctx, "failure" if failed else "success")
        ctx["inputs"] = dict(inputs)
        ctx["github"] = {**ctx["github"], "action_path": action_dir}
        # A composite action never sees the workflow's secrets (as on GitHub).
        ctx.pop("secrets", None)
        return ctx

    def run_posts(self, job_failed: bool) -> SandboxRun | None:
        """Every registered post step, newest first; the first failing one's result, if any."""
        if self._host.cancelled or self._host.shutdown:
            return None
        deadline = time.monotonic() + POST_SECONDS
        first_failure: SandboxRun | None = None
        for post in reversed(self._posts):
            failed = job_failed or first_failure is not None
            if not self._holds(post.spec.post_if, post.env, failed):
                continue
            assert post.spec.post is not None
            cwd = post.env.get("GITHUB_WORKSPACE") or f"{self._host.mount}/work"
            argv = [NODE, f"{post.action_dir}/{post.spec.post}"]
            self._host.say(f"[leasehold] post {post.label}")
            run = self._host.run_in_sandbox(f"post {post.label}", argv, post.env, cwd, deadline, post.state)
            if run.outcome != StepStatus.SUCCESS and first_failure is None:
                first_failure = run
        self._posts.clear()
        return first_failure
