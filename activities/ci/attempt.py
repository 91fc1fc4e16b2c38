"""One attempt of a CI job: fetch the mirror and extract the commit into a new workspace, run
each step as its own sandboxed process (``activities.ci.step_runner``) while shipping output in
numbered chunks and heartbeating, then return a ``JobResult``. Cancellation arrives through
heartbeats; the step's process tree gets SIGTERM, then SIGKILL after the grace period.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from actions_language.commands import WorkflowCommands
from actions_language.masking import StreamMasker
from activities.ci.action_steps import ActionRunner
from activities.ci.artifact_runtime import attach_artifacts
from activities.ci.artifact_service import ArtifactScope, ArtifactService
from activities.ci.builtin_actions import BuiltinActions
from activities.ci.git import CommitNotFound, GitError, InvalidRequest
from activities.ci.job_context import JobContext, resolve_step_limits, shown_name
from activities.ci.jobroot import JobRoot, JobTreeError, remove_layout
from activities.ci.logs import LogShipper
from activities.ci.run_records import TrustedRun
from activities.ci.sandbox import (
    JobOwner,
    SandboxError,
)
from activities.ci.secrets import SecretRequest, SecretsRefused
from activities.ci.step_runner import StepRunner
from leasehold.retry import retry_within
from workflows.ci.expressions import (
    ExpressionError,
    StatusFunctions,
    evaluate_condition,
    interpolate,
)
from workflows.ci.ids import attempt_log_prefix, step_summary_key
from workflows.ci.types.job import (
    JOB_FATAL_ERROR,
    AttemptGrant,
    AttemptStatus,
    JobActivityInput,
    JobHeartbeat,
    JobResult,
    StepResult,
    StepStatus,
)
from workflows.ci.types.spec import ActionSpec, StepSpec

if TYPE_CHECKING:
    from activities.ci.job import CIJobActivities

log = logging.getLogger(__name__)

# The supervisor's timer: it heartbeats at this share of the heartbeat timeout (the SDK sends
# at most one per 0.8 x timeout anyway), never more often than HEARTBEAT_MIN_SECONDS.
HEARTBEAT_SHARE = 0.25
HEARTBEAT_MIN_SECONDS = 1.0
SUMMARY_STORE_SECONDS = 30.0


class JobAttempt:
    """State of one running attempt (one thread)."""

    def __init__(self, owner: CIJobActivities, inp: JobActivityInput, grant: AttemptGrant, trusted: TrustedRun) -> None:
        attempt = grant.attempt
        self.o = owner
        self.inp = inp
        # Traded at the API for this attempt's secrets (valid while the attempt holds the lease).
        self.secrets_token = grant.secrets_token
        # Tenant, repository and clone URL as the records say them (``inp`` only proposed them).
        self.trusted = trusted
        # The host user the job's files belong to (set by the sandbox in ``_prepare``).
        self.owner: JobOwner | None = None
        self.job = inp.job
        self.attempt = attempt
        self.prefix = attempt_log_prefix(trusted.tenant_id, inp.run_id, inp.job.id, attempt)
        # A name that says nothing of the run: the sandbox's mount table shows it to the job.
        self.root = owner._config.workspaces / uuid.uuid4().hex
        self.mount = owner._sandbox.mount_point(self.root)
        # Everything done inside the job's tree goes through here, as the job (the root rule).
        self.tree = JobRoot(self.root, owner._sandbox, owner._config.limits, self.heartbeat)
        self.step_index = 0
        self.cancelled = False
        self.shutdown = False
        # The activity's start counts as its first sign of life: a job shorter than one heartbeat
        # interval sends none (the server needs one only within the heartbeat timeout).
        self.last_heartbeat = time.monotonic()
        self.heartbeat_seconds = max(HEARTBEAT_MIN_SECONDS, inp.push.heartbeat_timeout_seconds * HEARTBEAT_SHARE)
        # Values of the secrets the job references (missing ones empty); they exist only in
        # this attempt's memory and sandbox, and the masker hides them from its log.
        self.secrets: dict[str, str] = {}
        # Workflow commands (annotations, groups, stop-commands) are read from the same
        # stream the masker sees; annotations are masked with every value it knows.
        self.commands = WorkflowCommands(lambda text: self.masker.mask_text(text))
        self.masker = StreamMasker(commands=self.commands)
        self.actions = ActionRunner(self)
        # Where each remote action's files were put for this attempt: (repository, sha) -> dir.
        self.action_dirs: dict[tuple[str, str], str] = {}
        # The attempt's artifact service, when its job has action steps (``_attach_artifacts``).
        self.artifacts: ArtifactService | None = None
        self.log = LogShipper(
            owner._store,
            self.prefix,
            attempt,
            flush_seconds=owner._config.log_flush_seconds,
            max_bytes=owner._config.log_max_bytes,
            masker=self.masker,
            retry_seconds=owner._config.log_retry_seconds,
        )
        self.builtins = BuiltinActions(owner._cache, trusted, inp.push, self.mount, self.tree, self.log, self.heartbeat)
        self.job_context = JobContext(inp, attempt, self.mount, owner._config.identity)
        self.runner = StepRunner(
            self,
            self.job_context,
            owner._sandbox,
            self.tree,
            self.log,
            self.commands,
            root=self.root,
            name_prefix=f"{inp.run_id}-{inp.job.id}",
            network=inp.job.network,
            limits=owner._config.limits,
            disk_bytes=owner._config.disk_bytes,
            grace_seconds=inp.push.cancel_grace_seconds,
        )
        # The ``StepHost`` calls that start processes (``run:`` scripts, actions) are the runner's.
        self.run_script = self.runner.run_script
        self.run_in_sandbox = self.runner.run_in_sandbox

    def heartbeat(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last_heartbeat >= self.heartbeat_seconds:
            self.last_heartbeat = now
            activity.heartbeat(
                JobHeartbeat(attempt=self.attempt, step=self.step_index, log_next_seq=self.log.summary.next_seq)
            )
        if activity.is_cancelled():
            self.cancelled = True
        if activity.is_worker_shutdown():
            self.shutdown = True

    def run(self) -> JobResult:
        started = datetime.now(UTC)
        status = AttemptStatus.ERROR
        exit_code: int | None = None
        error: str | None = None
        steps: list[StepResult] = []
        outputs: dict[str, str] = {}
        try:
            self.log.line(f"[leasehold] job {self.job.id} attempt {self.attempt} on {self.o._config.identity}")
            refusal = self._isolation_refusal() or self._network_refusal() or self._container_refusal()
            if refusal is not None:
                self.log.line(f"[leasehold] {refusal}")
                status, error = AttemptStatus.FAILURE, refusal
            else:
                self._load_secrets()
                self._prepare()
                self._begin_containers()
                self._attach_artifacts()
                status, exit_code, error, steps, outputs = self._run_steps()
            if status == AttemptStatus.SUCCESS and not self.shutdown:
                self.builtins.save_caches()
        except (InvalidRequest, CommitNotFound) as exc:
            self.log.line(f"[leasehold] checkout failed: {exc}")
            self.log.close(AttemptStatus.ERROR, None, self.heartbeat)
            raise ApplicationError(str(exc), type=JOB_FATAL_ERROR, non_retryable=True) from exc
        except (GitError, SandboxError) as exc:
            self.log.line(f"[leasehold] infrastructure error: {exc}")
            self.log.close(AttemptStatus.ERROR, None, self.heartbeat)
            raise ApplicationError(str(exc), type=type(exc).__name__) from exc
        finally:
            if self.artifacts is not None:
                self.artifacts.stop()
            end_job = getattr(self.o._sandbox, "end_job", None)
            if end_job is not None and self.owner is not None:
                # The job's services: their logs into its log, then removed with their network.
                end_job(self.root, self.log.line)
            if self.owner is not None:
                # No process of the job runs any more: the reaper empties the root as the job
                # and then frees its uid, while the result goes back to the run.
                self.o.reaper.dispose(self.tree.detached())
            else:
                remove_layout(self.root)
        if self.shutdown and status != AttemptStatus.SUCCESS:
            self.log.line("[leasehold] worker shutting down; the job will run again as a new attempt")
            self.log.close(AttemptStatus.LOST, exit_code, self.heartbeat)
            raise ApplicationError("CI worker shut down during the job", type="CIWorkerShutdown")
        if error is not None:
            error = self.masker.mask_text(error)
        summary_key = self._store_summary()
        self.log.line(f"[leasehold] job {self.job.id} finished: {status.value}" + (f" ({error})" if error else ""))
        summary = self.log.close(status, exit_code, self.heartbeat)
        if summary_key is not None:
            summary = summary.model_copy(update={"summary_key": summary_key})
        return JobResult(
            job_id=self.job.id,
            attempt=self.attempt,
            round=self.inp.round,
            status=status,
            exit_code=exit_code,
            error=error,
            outputs=outputs,
            steps=steps,
            started_at=started,
            finished_at=datetime.now(UTC),
            log=summary,
            worker=self.o._config.identity,
        )

    def _load_secrets(self) -> None:
        """Fetch exactly the secrets the job names, for its own tenant and repository."""
        names = list(self.job.secrets)
        if not names:
            return
        inp = self.inp
        if not inp.secrets_allowed:
            self.secrets = dict.fromkeys(names, "")
            self.log.line(
                "[leasehold] notice: this run builds code from a fork; secrets are not available and "
                f"these are empty: {', '.join(names)}"
            )
            return
        if self.secrets_token is None:
            # An attempt granted by a run started before secrets tokens existed.
            raise ApplicationError("this run predates secrets tokens: retry the job", type=JOB_FATAL_ERROR)
        request = SecretRequest(inp.run_id, self.job.id, self.attempt, self.secrets_token, names)
        try:
            found = self.o._secrets.fetch(request)
        except SecretsRefused as exc:
            # The lease moved on (a newer attempt, a cancel): this attempt must not run.
            log.warning("secrets for %s/%s refused: %s", inp.run_id, self.job.id, exc)
            raise ApplicationError("the job's secrets were refused to this attempt", type="CISecretsRefused") from None
        except Exception as exc:
            # The database or the keys are unavailable: infrastructure, so a new attempt may work.
            log.warning("fetching secrets for %s/%s failed: %s", inp.run_id, self.job.id, exc)
            raise ApplicationError("could not read the job's secrets", type="CISecretsUnavailable") from None
        for value in found.values():
            self.masker.add(value)
        missing = [n for n in names if n not in found]
        if missing:
            self.log.line(f"[leasehold] notice: secrets not set (empty): {', '.join(missing)}")
        self.secrets = {n: found.get(n, "") for n in names}

    def _isolation_refusal(self) -> str | None:
        """Why this worker may not run the job: its tenant's plan asks for a sandbox backend
        this worker does not run (decided from the records; the queue normally routes it)."""
        wanted = self.trusted.isolation
        if wanted == "bubblewrap" or wanted == self.o._sandbox.name:
            return None
        return (
            f"tenant {self.trusted.tenant_id}'s plan runs CI jobs in {wanted}; this worker runs "
            f"{self.o._sandbox.name} (the job is never run with weaker isolation than its plan's)"
        )

    def _network_refusal(self) -> str | None:
        """Why this job may not have the network it asks for (``None``: it may, or it did
        not ask). Decided here from the records, whatever the input says."""
        if not self.job.network:
            return None
        if not self.trusted.network_allowed:
            return (
                f"network: true is not allowed for tenant {self.trusted.tenant_id}: an operator grants it "
                f"with `leasehold plans network --tenant {self.trusted.tenant_id} on`"
            )
        if not self.inp.secrets_allowed:
            return "network: true is never allowed for code from a fork"
        if not self.o._sandbox.supports_network:
            return "network: true: this CI worker cannot give jobs a filtered network (see its log)"
        return None

    def _container_refusal(self) -> str | None:
        """Why this worker cannot run the job's ``container:``/``services:`` (its backend has none)."""
        if (self.job.container is not None or self.job.services) and not hasattr(self.o._sandbox, "begin_job"):
            return (
                f"container: and services: need the OCI backend; this worker runs {self.o._sandbox.name} "
                "(LEASEHOLD_CI_SANDBOX=oci)"
            )
        return None

    def _begin_containers(self) -> None:
        """The job's image and services (OCI backend), healthy before the first step."""
        begin = getattr(self.o._sandbox, "begin_job", None)
        if begin is None or (self.job.container is None and not self.job.services):
            return
        self.job_context.containers.update(begin(self.root, self.job, self.log.line))

    def _attach_artifacts(self) -> None:
        """Start this attempt's artifact service and hand its binding to the step runner."""
        config = self.o._config
        scope = ArtifactScope(
            tenant_id=self.trusted.tenant_id,
            repo_id=self.trusted.repo_id,
            run_id=self.inp.run_id,
            job_id=self.job.id,
            attempt=self.attempt,
            retention_days=config.artifact_retention_days,
            max_bytes=config.artifact_max_bytes,
        )
        found = attach_artifacts(
            config.runtime_dir, self.o._sandbox.name, self.o._artifacts, self.o._store, scope, self.job
        )
        if found is not None:
            self.artifacts, self.runner.runtime = found

    def _prepare(self) -> None:
        self.root.parent.mkdir(parents=True, exist_ok=True)
        self.owner = self.o._sandbox.prepare(self.root)
        self.heartbeat()
        inp = self.inp
        mirror = self.o._mirror.ensure_commit(
            self.trusted.repo_id, self.trusted.clone_url, inp.push.commit_sha, self.heartbeat
        )
        # git archive's stream goes straight to the job-side helper, unpacked as the job.
        self._unpack(mirror, inp.push.commit_sha, "work")
        # $GITHUB_EVENT_PATH: root's file in the read-only runner dir (the job reads it only).
        self.tree.write_runner("event.json", json.dumps(self.job_context.event()).encode())
        self.log.line(f"[leasehold] checked out {inp.push.repo_full_name}@{inp.push.commit_sha}")

    def _unpack(self, mirror: Path, sha: str, into: str) -> None:
        """The tree of ``sha`` into the job's directory ``into``, unpacked by the job-side
        helper from git archive's stream (the worker never sees a file of it)."""
        proc = self.o._mirror.archive_stream(mirror, sha)
        assert proc.stdout is not None
        try:
            result = self.tree.extract(into, proc.stdout.fileno())
        except JobTreeError as exc:
            proc.kill()
            raise GitError(f"checkout of {sha} failed: {exc}") from exc
        finally:
            with contextlib.suppress(GitError):
                self.o._mirror.finish_archive(proc, mirror, sha)
        if proc.returncode != 0:
            raise GitError("git archive failed")
        skipped = result.get("skipped")
        if isinstance(skipped, int) and skipped > 0:
            self.log.line(
                f"[leasehold] warning: {skipped} entries of {sha[:12]} were not checked out "
                "(names leaving the tree, devices, or entries in the way of a directory)"
            )

    def _store_summary(self) -> str | None:
        """Store the steps' summaries as one markdown object beside the log (masked with every
        value known by now); its key, or None when no step wrote one or it could not be stored."""
        if not self.runner.summaries:
            return None
        key = step_summary_key(self.prefix)
        data = self.masker.mask_text(b"".join(self.runner.summaries).decode(errors="replace")).encode()

        def put() -> None:
            self.o._store.put(key, data, "text/markdown")

        if retry_within(put, SUMMARY_STORE_SECONDS, f"step summary {key}", log) is not None:
            self.log.line("[leasehold] warning: the step summary could not be stored")
            return None
        return key

    def _run_steps(self) -> tuple[AttemptStatus, int | None, str | None, list[StepResult], dict[str, str]]:
        job = self.job
        env_ctx: dict[str, str] = {}
        steps_ctx: dict[str, Any] = {}
        results: list[StepResult] = []
        step_outputs: dict[str, str] = {}
        failed = False
        timed_out = False
        exit_code: int | None = 0
        error: str | None = None
        job_deadline = time.monotonic() + job.timeout_minutes * 60
        try:
            self._job_env(env_ctx, steps_ctx)
        except ExpressionError as exc:
            return AttemptStatus.FAILURE, None, f"env: {exc}", results, {}
        extra_env: dict[str, str] = {}
        for step in job.steps:
            self.step_index = step.index
            self.commands.begin_step(step.index)
            self.heartbeat()
            job_status = "cancelled" if self.cancelled else "failure" if failed else "success"
            status_fns = StatusFunctions(
                success=not failed and not self.cancelled and not timed_out,
                failure=failed or timed_out,
                cancelled=self.cancelled,
                hash_files=self._hash_files,
            )
            step_env = dict(env_ctx)
            step_env.update(extra_env)
            try:
                for k, v in step.env.items():
                    step_env[k] = interpolate(v, self.context(step_env, steps_ctx, job_status), status_fns)
                ctx = self.context(step_env, steps_ctx, job_status)
                run_it = not timed_out and not self.shutdown and evaluate_condition(step.if_expr, status_fns, ctx)
                script = interpolate(step.run, ctx, status_fns) if run_it else ""
                workdir = interpolate(step.working_directory, ctx, status_fns) if step.working_directory else None
                inputs = {k: interpolate(v, ctx, status_fns) for k, v in step.with_inputs.items()} if run_it else {}
                step = resolve_step_limits(step, ctx) if run_it else step
            except ExpressionError as exc:
                self.log.line(f"[leasehold] step {step.index + 1} ({step.name}): {exc}")
                results.append(StepResult(index=step.index, name=step.name, status=StepStatus.FAILURE))
                failed = True
                error = f"steps[{step.index}]: {exc}"
                exit_code = None
                continue
            if not run_it:
                results.append(StepResult(index=step.index, name=step.name, status=StepStatus.SKIPPED))
                if step.id:
                    steps_ctx[step.id] = {"outputs": {}, "outcome": "skipped", "conclusion": "skipped"}
                continue
            step_started = datetime.now(UTC)
            outcome, code, values, env_file = self._execute(
                step, script, workdir, inputs, step_env, job_deadline, failed
            )
            # ``::set-output`` (deprecated, still honoured); $GITHUB_OUTPUT wins a clash.
            values = {**self.commands.step_outputs(step.index), **values}
            extra_env.update(env_file)
            if step.uses is None:
                step_outputs.update(values)
            conclusion = StepStatus.SUCCESS if outcome != StepStatus.SUCCESS and step.continue_on_error else outcome
            if outcome == StepStatus.TIMED_OUT and time.monotonic() >= job_deadline:
                timed_out = True
            results.append(self._finished(step, conclusion, outcome, code, step_started))
            if step.id:
                steps_ctx[step.id] = {"outputs": values, "outcome": outcome.value, "conclusion": conclusion.value}
            if conclusion != StepStatus.SUCCESS:
                if not failed:
                    exit_code = code
                    error = f"step {step.index + 1} ({step.name}) {outcome.value}" + (
                        f" with exit code {code}" if code is not None else ""
                    )
                failed = True
        post = self.actions.run_posts(failed or timed_out)
        if post is not None and not failed:
            failed, exit_code, error = True, post.exit_code, f"a post step failed ({post.outcome.value})"
        outputs = self._job_outputs(step_outputs, steps_ctx, env_ctx)
        status, exit_code, error = self._verdict(failed, timed_out, exit_code, error)
        return status, exit_code, error, results, outputs

    def _finished(
        self, step: StepSpec, conclusion: StepStatus, outcome: StepStatus, code: int | None, started: datetime
    ) -> StepResult:
        """The result of a step that ran, with the annotations its commands made."""
        return StepResult(
            index=step.index,
            name=step.name,
            status=conclusion,
            exit_code=code,
            outcome=outcome,
            started_at=started,
            finished_at=datetime.now(UTC),
            annotations=self.commands.step_annotations(step.index),
        )

    def _job_env(self, env_ctx: dict[str, str], steps_ctx: dict[str, Any]) -> None:
        """The workflow's then the job's ``env``, interpolated into ``env_ctx`` (each sees the
        ones before it)."""
        ctx = self.context(env_ctx, steps_ctx, "success")
        # A called workflow's job has that file's env instead of the run's file's.
        workflow_env = self.inp.workflow_env if self.job.workflow_env is None else self.job.workflow_env
        for k, v in workflow_env.items():
            env_ctx[k] = interpolate(v, ctx)
        for k, v in self.job.env.items():
            env_ctx[k] = interpolate(v, self.context(env_ctx, steps_ctx, "success"))

    def _execute(
        self,
        step: StepSpec,
        script: str,
        workdir: str | None,
        inputs: dict[str, str],
        step_env: dict[str, str],
        job_deadline: float,
        failed: bool,
    ) -> tuple[StepStatus, int | None, dict[str, str], dict[str, str]]:
        """Run one step that is to run: a built-in action, an action, or a ``run:`` script."""
        if step.uses is not None and step.builtin:
            return self.builtins.run(step, inputs)
        if step.uses is None:
            return self._run_step(step, script, workdir, step_env, job_deadline)
        self.log.line(f"[leasehold] step {step.index + 1}: {shown_name(step.name)}")
        if step.uses_sha:
            self.log.line(f"[leasehold] {step.uses} is commit {step.uses_sha} (pinned when the push was listed)")
        deadline = job_deadline
        if step.timeout_minutes is not None:
            deadline = min(deadline, time.monotonic() + step.timeout_minutes * 60)
        run = self.actions.run(f"step {step.index + 1}", step, inputs, step_env, deadline, failed)
        return run.outcome, run.exit_code, run.outputs, run.env

    def _verdict(
        self, failed: bool, timed_out: bool, exit_code: int | None, error: str | None
    ) -> tuple[AttemptStatus, int | None, str | None]:
        """The attempt's status, exit code and error once its steps (and post steps) are done."""
        if self.cancelled:
            return AttemptStatus.CANCELLED, exit_code, error or "cancelled"
        if timed_out:
            return AttemptStatus.TIMED_OUT, exit_code, f"job exceeded timeout-minutes ({self.job.timeout_minutes})"
        if failed:
            return AttemptStatus.FAILURE, exit_code, error
        return AttemptStatus.SUCCESS, 0, None

    # What actions need of the attempt (``activities.ci.action_steps.StepHost``) -------------

    def context(self, env: dict[str, str], steps_ctx: dict[str, Any], job_status: str) -> dict[str, Any]:
        return self.job_context.context(env, steps_ctx, job_status, self.secrets)

    def status_functions(self, failed: bool) -> StatusFunctions:
        return StatusFunctions(
            success=not failed and not self.cancelled,
            failure=failed,
            cancelled=self.cancelled,
            hash_files=self._hash_files,
        )

    def say(self, text: str) -> None:
        self.log.line(text)

    def action_dir(self, spec: ActionSpec) -> str:
        """Where the action's files are inside the sandbox: the workspace for ``./path``, else a
        root-owned copy of its commit under ``actions/`` that the job reads but cannot change."""
        if spec.repository is None or spec.sha is None:
            return f"{self.mount}/work/{spec.path}".rstrip("/")
        key = (spec.repository, spec.sha)
        if key not in self.action_dirs:
            if self.o._actions is None:
                raise SandboxError("this worker has no actions source configured")
            name = str(len(self.action_dirs))
            mirror = self.o._actions.mirror_of(spec.repository, spec.sha, self.heartbeat)
            # The job's own copy (as on GitHub, where _actions/ is the job's): unpacked as the job.
            self._unpack(mirror, spec.sha, f"actions/{name}")
            self.action_dirs[key] = f"{self.mount}/actions/{name}"
        return f"{self.action_dirs[key]}/{spec.path}".rstrip("/")

    def _hash_files(self, patterns: list[str]) -> str:
        try:
            return self.tree.hash_files(patterns)
        except (JobTreeError, SandboxError) as exc:
            raise ExpressionError(f"hashFiles: {exc}") from None

    def _job_outputs(
        self, step_outputs: dict[str, str], steps_ctx: dict[str, Any], env: dict[str, str]
    ) -> dict[str, str]:
        # Outputs go into the run's history and the API: one holding a secret is dropped.
        kept: dict[str, str] = {}
        for name, value in self._raw_outputs(step_outputs, steps_ctx, env).items():
            if self.masker.reveals_secret(value):
                self.log.line(f"[leasehold] output {name} skipped: it may contain a secret")
            else:
                kept[name] = value
        return kept

    def _raw_outputs(
        self, step_outputs: dict[str, str], steps_ctx: dict[str, Any], env: dict[str, str]
    ) -> dict[str, str]:
        if not self.job.outputs:
            return step_outputs
        outputs = {}
        ctx = self.context(env, steps_ctx, "success")
        for name, expr in self.job.outputs.items():
            try:
                outputs[name] = interpolate(expr, ctx)
            except ExpressionError as exc:
                self.log.line(f"[leasehold] output {name}: {exc}")
        return outputs

    def _run_step(
        self,
        step: StepSpec,
        script: str,
        workdir: str | None,
        step_env: dict[str, str],
        job_deadline: float,
    ) -> tuple[StepStatus, int | None, dict[str, str], dict[str, str]]:
        self.log.line(f"[leasehold] step {step.index + 1}: {shown_name(step.name)}")
        deadline = job_deadline
        if step.timeout_minutes is not None:
            deadline = min(deadline, time.monotonic() + step.timeout_minutes * 60)
        run = self.run_script(f"step {step.index + 1}", script, step.shell, workdir, step_env, deadline)
        return run.outcome, run.exit_code, run.outputs, run.env
