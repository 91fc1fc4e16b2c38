"""The action runner's rules with a recording host instead of a sandbox: GitHub's input
variables, pre/post order and conditions, composite failure and ``continue-on-error``, and the
nesting guard. (``test_actions_end_to_end`` runs the same code in the real sandbox.)"""

from __future__ import annotations

from typing import Any

import pytest

from activities.ci.action_steps import MAX_ACTION_DEPTH, ActionRunner, SandboxRun, input_variable
from workflows.ci.expressions import StatusFunctions
from workflows.ci.types.job import StepStatus
from workflows.ci.types.spec import ActionInput, ActionSpec, StepSpec


class RecordingHost:
    """Records every process the runner starts; ``fail`` names labels whose process fails."""

    mount = "/ci"
    cancelled = False
    shutdown = False

    def __init__(self, fail: tuple[str, ...] = ()) -> None:
        self.ran: list[tuple[str, list[str], dict[str, str]]] = []
        self.fail = fail
        self.said: list[str] = []

    def _result(self, label: str) -> SandboxRun:
        failed = any(label.endswith(f) for f in self.fail)
        return SandboxRun(
            StepStatus.FAILURE if failed else StepStatus.SUCCESS,
            1 if failed else 0,
            outputs={"out": label},
            env={"SEEN": label},
            state={"s": label},
        )

    def run_script(
        self, label: str, script: str, shell: str, workdir: str | None, step_env: dict[str, str], deadline: float
    ) -> SandboxRun:
        self.ran.append((label, [shell, script], dict(step_env)))
        return self._result(label)

    def run_in_sandbox(
        self,
        label: str,
        argv: list[str],
        step_env: dict[str, str],
        cwd: str,
        deadline: float,
        state: dict[str, str] | None = None,
    ) -> SandboxRun:
        self.ran.append((label, argv, {**step_env, **{f"STATE_{k}": v for k, v in (state or {}).items()}}))
        return self._result(label)

    def context(self, env: dict[str, str], steps_ctx: dict[str, Any], job_status: str) -> dict[str, Any]:
        return {"github": {"ref_name": "main"}, "env": env, "steps": steps_ctx, "job": {"status": job_status}}

    def status_functions(self, failed: bool) -> StatusFunctions:
        return StatusFunctions(success=not failed, failure=failed)

    def action_dir(self, spec: ActionSpec) -> str:
        return f"/ci/actions/{spec.name}"

    def say(self, text: str) -> None:
        self.said.append(text)


def _node(name: str, **runs: Any) -> StepSpec:
    spec = ActionSpec(
        name=name,
        using="node20",
        main="main.js",
        inputs={"who name": ActionInput(required=True), "tag": ActionInput(default="t-${{ github.ref_name }}")},
        **runs,
    )
    return StepSpec(index=0, name=name, uses=f"acme/{name}@v1", resolved=spec)


def test_javascript_inputs_state_and_post_order() -> None:
    host = RecordingHost()
    runner = ActionRunner(host)
    first = _node("one", pre="pre.js", post="post.js")
    second = _node("two", post="post.js")
    run = runner.run("step 1", first, {"Who Name": "ann"}, {"A": "1"}, 1e12, job_failed=False)
    assert run.outcome == StepStatus.SUCCESS and run.outputs == {"out": "step 1"}
    runner.run("step 2", second, {"who name": "bob"}, {}, 1e12, job_failed=False)
    assert runner.run_posts(job_failed=True) is None
    labels = [label for label, _, _ in host.ran]
    assert labels == ["step 1 (pre)", "step 1", "step 2", "post step 2", "post step 1"]
    pre_env, main_env = host.ran[0][2], host.ran[1][2]
    assert pre_env["INPUT_WHO_NAME"] == "ann" and pre_env["INPUT_TAG"] == "t-main" and pre_env["A"] == "1"
    assert pre_env["GITHUB_ACTION_PATH"] == "/ci/actions/one" and host.ran[1][1] == ["node", "/ci/actions/one/main.js"]
    # main sees what pre saved and wrote to $GITHUB_ENV; post sees what main saved.
    assert main_env["STATE_s"] == "step 1 (pre)" and main_env["SEEN"] == "step 1 (pre)"
    assert host.ran[4][2]["STATE_s"] == "step 1"


@pytest.mark.parametrize(
    ("runs", "job_failed", "expected"),
    [
        ({"pre": "p.js", "pre_if": "false"}, False, ["s", "post s"]),
        ({"post_if": "success()"}, True, ["s"]),
        ({"post_if": "failure()"}, True, ["s", "post s"]),
        ({"post_if": "failure()"}, False, ["s"]),
        ({}, True, ["s", "post s"]),  # post-if defaults to always()
    ],
)
def test_pre_and_post_conditions(runs: dict[str, str], job_failed: bool, expected: list[str]) -> None:
    host = RecordingHost()
    runner = ActionRunner(host)
    runner.run("s", _node("n", post="post.js", **runs), {"who name": "x"}, {}, 1e12, job_failed=False)
    runner.run_posts(job_failed=job_failed)
    assert [label for label, _, _ in host.ran] == expected


def _composite(*steps: StepSpec, outputs: dict[str, str] | None = None) -> StepSpec:
    spec = ActionSpec(name="c", using="composite", steps=list(steps), inputs={"who": ActionInput(default="d")})
    spec.outputs = outputs or {}
    return StepSpec(index=0, name="c", uses="./c", resolved=spec)


def _run_step(index: int, run: str, **kw: Any) -> StepSpec:
    return StepSpec(index=index, name=f"r{index}", run=run, shell="sh", **kw)


def test_composite_failure_stops_later_steps_unless_they_ask() -> None:
    host = RecordingHost(fail=("> 1",))
    step = _composite(
        _run_step(0, "echo ${{ inputs.who }} ${{ github.action_path }}", id="a"),
        _run_step(1, "echo later"),
        _run_step(2, "echo cleanup", if_expr="always()"),
        outputs={"first": "${{ steps.a.outputs.out }}"},
    )
    run = ActionRunner(host).run("step 3", step, {}, {}, 1e12, job_failed=False)
    assert run.outcome == StepStatus.FAILURE and run.exit_code == 1
    assert [label for label, _, _ in host.ran] == ["step 3 > 1", "step 3 > 3"]
    assert host.ran[0][1] == ["sh", "echo d /ci/actions/c"]
    assert run.outputs == {"first": "step 3 > 1"}


def test_composite_continue_on_error_and_env_carry() -> None:
    host = RecordingHost(fail=("> 1",))
    step = _composite(_run_step(0, "false", continue_on_error=True), _run_step(1, "echo $SEEN"))
    run = ActionRunner(host).run("s", step, {"who": "w"}, {}, 1e12, job_failed=False)
    assert run.outcome == StepStatus.SUCCESS
    assert host.ran[1][2]["SEEN"] == "s > 1" and run.env == {"SEEN": "s > 2"}


def test_unresolved_and_too_deep_actions_fail_the_step() -> None:
    host = RecordingHost()
    unresolved = StepSpec(index=0, name="x", uses="acme/x@v1")
    assert ActionRunner(host).run("s", unresolved, {}, {}, 1e12, False).outcome == StepStatus.FAILURE
    deep = ActionRunner(host).run("s", _node("n"), {}, {}, 1e12, False, depth=MAX_ACTION_DEPTH)
    assert deep.outcome == StepStatus.FAILURE and not host.ran


@pytest.mark.parametrize(
    ("name", "variable"), [("who", "INPUT_WHO"), ("who name", "INPUT_WHO_NAME"), ("data-dir", "INPUT_DATA-DIR")]
)
def test_input_variable_names(name: str, variable: str) -> None:
    assert input_variable(name) == variable
