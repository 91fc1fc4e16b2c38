"""One attempt of a CI job: fetch the mirror and extract the commit into a new workspace, run
each step as its own sandboxed process while shipping output in numbered chunks and
heartbeating, then return a ``JobResult``. Cancellation arrives through heartbeats; the step's
process tree gets SIGTERM, then SIGKILL after the grace period.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import logging
import os
import platform
import select
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from actions_language.commands import WorkflowCommands
from actions_language.environment_files import MAX_PATH_ENTRIES, read_output_file, read_path_file
from actions_language.masking import ADD_MASK, StreamMasker
from actions_language.shells import shell_argv
from activities.ci.action_steps import ActionRunner, SandboxRun
from activities.ci.cache import CacheError, read_scopes, ref_scope, workspace_paths
from activities.ci.git import CommitNotFound, GitError, InvalidRequest
from activities.ci.jobroot import JobRoot, JobTreeError, StepFiles, remove_layout
from activities.ci.logs import LogShipper
from activities.ci.run_records import TrustedRun
from activities.ci.sandbox import (
    JobOwner,
    SandboxError,
    SandboxProcess,
    SandboxRequest,
)
from activities.ci.secrets import SecretRequest, SecretsRefused
from leasehold.retry import retry_within
from workflows.ci.event import push_actor, push_event, push_github_context
from workflows.ci.expressions import (
    ExpressionError,
    StatusFunctions,
    evaluate_condition,
    github_context,
    interpolate,
    truthy,
)
from workflows.ci.ids import attempt_log_prefix, idempotency_key, step_summary_key
from workflows.ci.matrix import evaluate_minutes, evaluate_value
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
from workflows.ci.types.spec import ACTION_CACHE, ACTION_CHECKOUT, ActionSpec, StepSpec

if TYPE_CHECKING:
    from activities.ci.job import CIJobActivities

log = logging.getLogger(__name__)

# The supervisor's timer: it heartbeats at this share of the heartbeat timeout (the SDK sends
# at most one per 0.8 x timeout anyway), never more often than HEARTBEAT_MIN_SECONDS.
HEARTBEAT_SHARE = 0.25
HEARTBEAT_MIN_SECONDS = 1.0
# How long the cancel watcher blocks on the activity's cancel event before it checks whether
# its step is over (it wakes the supervisor at once on a cancel or a worker shutdown).
CANCEL_WATCH_SECONDS = 0.5
DISK_CHECK_SECONDS = 2.0
DISK_MISSES_ALLOWED = 3
MAX_OUTPUT_FILE_BYTES = 1 << 20
# $GITHUB_STEP_SUMMARY: GitHub's cap per step (a larger one is dropped, with a warning), and
# what one attempt may keep in memory and store.
MAX_STEP_SUMMARY_BYTES = 1 << 20
MAX_ATTEMPT_SUMMARY_BYTES = 4 << 20
SUMMARY_STORE_SECONDS = 30.0
# GitHub's runner.arch names for the worker's machine types.
RUNNER_ARCH = {"x86_64": "X64", "amd64": "X64", "aarch64": "ARM64", "arm64": "ARM64", "i686": "X86", "armv7l": "ARM"}
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Last on PATH: ``python``/``pip`` as GitHub's images have them, where the host lacks them
# (``activities.ci.jobroot.TOOL_LINKS``).
TOOLS_PATH = "runner/bin"


class _Stop:
    """Why a step is being stopped, set by the watcher loop."""

    def __init__(self) -> None:
        self.reason: AttemptStatus | None = None
        self.message: str | None = None


def _step_file_text(files: StepFiles, name: str) -> str:
    return files.read(name, MAX_OUTPUT_FILE_BYTES).decode(errors="replace")


def _shown_name(name: str) -> str:
    """A step name for the log: a default name made of an ``::add-mask::`` command line must
    not print the value before the command has run."""
    cut = name.find(ADD_MASK.decode())
    return name if cut == -1 else name[: cut + len(ADD_MASK)] + "***"


def _open_pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (``None`` where pidfds are missing)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _watch_cancel(over: threading.Event, wake: int) -> None:
    """Wake the supervisor (a byte on ``wake``) as soon as the activity is cancelled or the worker
    shuts down; ends once the step is ``over``. Runs in a copy of the activity's context."""
    try:
        while not over.is_set():
            activity.wait_for_cancelled_sync(CANCEL_WATCH_SECONDS)
            if activity.is_cancelled() or activity.is_worker_shutdown():
                with contextlib.suppress(OSError):
                    os.write(wake, b"!")
                return
    finally:
        os.close(wake)


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
        # Consecutive disk measurements that could not be made.
        self.disk_misses = 0
        self.step_index = 0
        # Numbers each sandboxed process of the attempt (its script's name, its sandbox's).
        self.process_seq = 0
        self.cancelled = False
        self.shutdown = False
        # The activity's start counts as its first sign of life: a job shorter than one heartbeat
        # interval sends none (the server needs one only within the heartbeat timeout).
        self.last_heartbeat = time.monotonic()
        self.heartbeat_seconds = max(HEARTBEAT_MIN_SECONDS, inp.push.heartbeat_timeout_seconds * HEARTBEAT_SHARE)
        # Values of the secrets the job references (missing ones empty); they exist only in
        # this attempt's memory and sandbox, and the masker hides them from its log.
        self.secrets: dict[str, str] = {}
        # Directories steps added through $GITHUB_PATH, oldest first (the newest comes first
        # in later steps' PATH, as on GitHub).
        self.path_entries: list[str] = []
        # actions/cache steps whose key missed: saved after the job succeeds (the post step).
        self.cache_saves: list[tuple[str, list[str]]] = []
        # Workflow commands (annotations, groups, stop-commands) are read from the same
        # stream the masker sees; annotations are masked with every value it knows.
        self.commands = WorkflowCommands(lambda text: self.masker.mask_text(text))
        self.masker = StreamMasker(commands=self.commands)
        # Each step's $GITHUB_STEP_SUMMARY (raw; masked when stored), and their total size.
        self.summaries: list[bytes] = []
        self.summary_bytes = 0
        # Whether the last byte of output ended a line (a command must start one).
        self.output_ended_line = True
        self.actions = ActionRunner(self)
        # Where each remote action's files were put for this attempt: (repository, sha) -> dir.
        self.action_dirs: dict[tuple[str, str], str] = {}
        self.log = LogShipper(
            owner._store,
            self.prefix,
            attempt,
            flush_seconds=owner._config.log_flush_seconds,
            max_bytes=owner._config.log_max_bytes,
            masker=self.masker,
            retry_seconds=owner._config.log_retry_seconds,
        )

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
            refusal = self._isolation_refusal() or self._network_refusal()
            if refusal is not None:
                self.log.line(f"[leasehold] {refusal}")
                status, error = AttemptStatus.FAILURE, refusal
            else:
                self._load_secrets()
                self._prepare()
                status, exit_code, error, steps, outputs = self._run_steps()
            if status == AttemptStatus.SUCCESS and not self.shutdown:
                self._save_caches()
        except (InvalidRequest, CommitNotFound) as exc:
            self.log.line(f"[leasehold] checkout failed: {exc}")
            self.log.close(AttemptStatus.ERROR, None, self.heartbeat)
            raise ApplicationError(str(exc), type=JOB_FATAL_ERROR, non_retryable=True) from exc
        except (GitError, SandboxError) as exc:
            self.log.line(f"[leasehold] infrastructure error: {exc}")
            self.log.close(AttemptStatus.ERROR, None, self.heartbeat)
            raise ApplicationError(str(exc), type=type(exc).__name__) from exc
        finally:
            if self.owner is not None:
                self.tree.remove()
                self.o._sandbox.release(self.root)
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
        self.tree.write_runner("event.json", json.dumps(self._event()).encode())
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
        if not self.summaries:
            return None
        key = step_summary_key(self.prefix)
        data = self.masker.mask_text(b"".join(self.summaries).decode(errors="replace")).encode()

        def put() -> None:
            self.o._store.put(key, data, "text/markdown")

        if retry_within(put, SUMMARY_STORE_SECONDS, f"step summary {key}", log) is not None:
            self.log.line("[leasehold] warning: the step summary could not be stored")
            return None
        return key

    def _keep_summary(self, label: str, files: StepFiles) -> None:
        """Keep what a step wrote to $GITHUB_STEP_SUMMARY (GitHub's per-step cap)."""
        data = files.read("summary", MAX_STEP_SUMMARY_BYTES + 1)
        if not data.strip():
            return
        if len(data) > MAX_STEP_SUMMARY_BYTES:
            self.log.line(
                f"[leasehold] warning: {label}: $GITHUB_STEP_SUMMARY is over "
                f"{MAX_STEP_SUMMARY_BYTES} bytes; it was not kept"
            )
            return
        if self.summary_bytes + len(data) > MAX_ATTEMPT_SUMMARY_BYTES:
            self.log.line(f"[leasehold] warning: step summaries over {MAX_ATTEMPT_SUMMARY_BYTES} bytes are not kept")
            return
        if not data.endswith(b"\n"):
            data += b"\n"
        self.summaries.append(data)
        self.summary_bytes += len(data)

    def _actor(self) -> str:
        return push_actor(self.inp.push)

    def _event(self) -> dict[str, Any]:
        return push_event(self.inp.push)

    def _runner(self) -> dict[str, str]:
        m = self.mount
        # A stable name per worker that does not reveal its host.
        name = "leasehold-" + hashlib.sha256(self.o._config.identity.encode()).hexdigest()[:8]
        return {
            "os": "Linux",
            "arch": RUNNER_ARCH.get(platform.machine().lower(), platform.machine().upper()),
            "name": name,
            "environment": "self-hosted",
            "temp": f"{m}/tmp",
            "tool_cache": f"{m}/home/tool-cache",
            "workspace": f"{m}/work",
        }

    def _strategy(self) -> dict[str, Any]:
        strategy = self.job.strategy
        if not self.inp.matrix or strategy is None:
            return {}
        return {
            "fail-fast": strategy.fail_fast,
            "job-index": self.inp.job_index,
            "job-total": self.inp.job_total,
            "max-parallel": strategy.max_parallel or self.inp.job_total,
        }

    def _base_env(self) -> dict[str, str]:
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
            "CI_JOB": self.job.id,
            "CI_ATTEMPT": str(self.attempt),
            "CI_IDEMPOTENCY_KEY": idempotency_key(inp.run_id, self.job.id),
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
            "GITHUB_JOB": self.inp.matrix_job_id or self.job.id,
            "GITHUB_WORKFLOW": inp.workflow_name,
            "GITHUB_EVENT_NAME": inp.push.event,
            "GITHUB_EVENT_PATH": f"{m}/runner/event.json",
            "GITHUB_ACTIONS": "true",
            "GITHUB_ACTOR": self._actor(),
            "GITHUB_TRIGGERING_ACTOR": self._actor(),
            "GITHUB_RUN_NUMBER": str(inp.run_number or 1),
            "GITHUB_WORKFLOW_REF": f"{inp.push.repo_full_name}/{inp.workflow_path}@{inp.push.ref}",
            "GITHUB_HEAD_REF": inp.push.pull_request.head_ref if inp.push.pull_request else "",
            "GITHUB_BASE_REF": inp.push.pull_request.base_ref if inp.push.pull_request else "",
            **{f"RUNNER_{k.upper()}": v for k, v in self._runner().items() if k != "workspace"},
        }

    def _context(self, env: dict[str, str], steps_ctx: dict[str, Any], job_status: str) -> dict[str, Any]:
        inp = self.inp
        push = inp.push
        github = push_github_context(push, inp.run_id, inp.workflow_name)
        # What only the worker knows: where the workspace is, and which attempt this is.
        github.update(
            workspace=f"{self.mount}/work",
            event_path=f"{self.mount}/runner/event.json",
            run_number=str(inp.run_number or 1),
            run_attempt=str(self.attempt),
            job=inp.matrix_job_id or self.job.id,
            workflow_ref=f"{push.repo_full_name}/{inp.workflow_path}@{push.ref}",
        )
        return {
            "github": github,
            "env": env,
            "needs": {k: v.model_dump() for k, v in inp.needs.items()},
            "steps": steps_ctx,
            "job": {"status": job_status, "container": {}, "services": {}},
            "runner": self._runner(),
            "secrets": self.secrets,
            "strategy": self._strategy(),
            "matrix": dict(inp.matrix),
            "vars": dict(push.variables),
            "inputs": dict(push.inputs),
        }

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
                    step_env[k] = interpolate(v, self._context(step_env, steps_ctx, job_status), status_fns)
                ctx = self._context(step_env, steps_ctx, job_status)
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
        ctx = self._context(env_ctx, steps_ctx, "success")
        for k, v in self.inp.workflow_env.items():
            env_ctx[k] = interpolate(v, ctx)
        for k, v in self.job.env.items():
            env_ctx[k] = interpolate(v, self._context(env_ctx, steps_ctx, "success"))

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
            return self._run_action(step, inputs)
        if step.uses is None:
            return self._run_step(step, script, workdir, step_env, job_deadline)
        self.log.line(f"[leasehold] step {step.index + 1}: {_shown_name(step.name)}")
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
        return self._context(env, steps_ctx, job_status)

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

    def _run_action(
        self, step: StepSpec, inputs: dict[str, str]
    ) -> tuple[StepStatus, int | None, dict[str, str], dict[str, str]]:
        """A built-in ``uses:`` action, run by the worker itself (nothing of it is sandboxed:
        it only moves the job's own files between the workspace and the tenant's cache)."""
        self.log.line(f"[leasehold] step {step.index + 1}: {_shown_name(step.name)}")
        if step.action == ACTION_CHECKOUT:
            self.log.line(f"[leasehold] {step.uses}: the workspace already holds {self.inp.push.commit_sha}")
            return StepStatus.SUCCESS, 0, {}, {}
        assert step.action == ACTION_CACHE
        inp = self.inp
        key = inputs.get("key", "").strip()
        restore_keys = [k.strip() for k in inputs.get("restore-keys", "").splitlines() if k.strip()]
        try:
            if not key or len(key) > 512 or "\n" in key:
                raise CacheError("the cache key must be one line of at most 512 characters")
            paths = workspace_paths(inputs.get("path", ""), self.mount)
            found = self.o._cache.lookup(
                self.trusted.tenant_id,
                self.trusted.repo_id,
                read_scopes(inp.push.ref, inp.push.default_branch),
                key,
                restore_keys,
            )
            if found.entry is not None:
                size = self.o._cache.restore(found.entry, self.tree, paths, self.heartbeat)
                how = "hit" if found.exact else f"restored from {found.entry.key!r}"
                self.log.line(f"[leasehold] cache {how}: {size} bytes into {', '.join(paths)}")
            else:
                self.log.line(f"[leasehold] cache miss for key {key!r}")
        except Exception as exc:
            # As on GitHub, a cache problem (a bad path, a broken archive, the store down) is a
            # warning: the job goes on without the cache.
            self.log.line(f"[leasehold] warning: cache not restored: {exc}")
            return StepStatus.SUCCESS, 0, {"cache-hit": "false"}, {}
        if not found.exact:
            self.cache_saves.append((key, paths))
        return StepStatus.SUCCESS, 0, {"cache-hit": "true" if found.exact else "false"}, {}

    def _save_caches(self) -> None:
        """The post step of each missed actions/cache step: save into this ref's own scope."""
        inp = self.inp
        for key, paths in self.cache_saves:
            try:
                size = self.o._cache.save(
                    self.trusted.tenant_id,
                    self.trusted.repo_id,
                    ref_scope(inp.push.ref),
                    key,
                    self.tree,
                    paths,
                    self.heartbeat,
                )
            except Exception as exc:
                self.log.line(f"[leasehold] warning: cache {key!r} not saved: {exc}")
                continue
            if size is None:
                self.log.line(f"[leasehold] cache {key!r} not saved: none of its paths exist")
            else:
                self.log.line(f"[leasehold] cache {key!r} saved ({size} bytes)")

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
        ctx = self._context(env, steps_ctx, "success")
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
        self.log.line(f"[leasehold] step {step.index + 1}: {_shown_name(step.name)}")
        deadline = job_deadline
        if step.timeout_minutes is not None:
            deadline = min(deadline, time.monotonic() + step.timeout_minutes * 60)
        run = self.run_script(f"step {step.index + 1}", script, step.shell, workdir, step_env, deadline)
        return run.outcome, run.exit_code, run.outputs, run.env

    def run_script(
        self, label: str, script: str, shell: str, workdir: str | None, step_env: dict[str, str], deadline: float
    ) -> SandboxRun:
        """A ``run:`` script (of a job's step or of a composite action's) in the sandbox."""
        self.process_seq += 1
        name = f"step-{self.process_seq}.sh"
        self.tree.write_runner(name, script.encode())
        script_path = f"{self.mount}/runner/{name}"
        argv = shell_argv(shell, script_path)
        cwd = f"{self.mount}/work"
        if workdir:
            cwd = workdir if workdir.startswith("/") else f"{cwd}/{workdir}"
        return self.run_in_sandbox(label, argv, step_env, cwd, deadline)

    def run_in_sandbox(
        self,
        label: str,
        argv: list[str],
        step_env: dict[str, str],
        cwd: str,
        deadline: float,
        state: dict[str, str] | None = None,
    ) -> SandboxRun:
        """One process in a fresh sandbox over the workspace, with this step's own
        ``$GITHUB_OUTPUT``/``$GITHUB_ENV``/``$GITHUB_PATH``/``$GITHUB_STATE`` files; ``state`` is
        an action's saved state (``STATE_<name>``). Directories it adds to PATH take effect for
        the processes after it."""
        files = self.tree.step_files(self.owner or JobOwner())
        try:
            return self._run_with_files(label, argv, step_env, cwd, deadline, state, files)
        finally:
            files.close()

    def _run_with_files(
        self,
        label: str,
        argv: list[str],
        step_env: dict[str, str],
        cwd: str,
        deadline: float,
        state: dict[str, str] | None,
        files: StepFiles,
    ) -> SandboxRun:
        base = self._base_env()
        env = dict(step_env)
        env.update(base)
        for key, value in (state or {}).items():
            env[f"STATE_{key}"] = value
        env["GITHUB_OUTPUT"] = f"{self.mount}/io/output"
        env["GITHUB_ENV"] = f"{self.mount}/io/env"
        env["GITHUB_PATH"] = f"{self.mount}/io/path"
        env["GITHUB_STEP_SUMMARY"] = f"{self.mount}/io/summary"
        env["GITHUB_STATE"] = f"{self.mount}/io/state"
        if self.path_entries:
            env["PATH"] = ":".join([*reversed(self.path_entries), base["PATH"]])
        env["GITHUB_STEP"] = str(self.step_index)
        proc = self.o._sandbox.start(
            SandboxRequest(
                argv=argv,
                env=env,
                root=self.root,
                cwd=cwd,
                network=self.job.network,
                limits=self.o._config.limits,
                name=f"{self.inp.run_id}-{self.job.id}-{self.process_seq}",
            )
        )
        self.output_ended_line = True
        stop = self._supervise(proc, deadline)
        code = proc.poll()
        if not self.output_ended_line:
            # The step's last line is complete now: its commands belong to this step.
            self.log.write(b"\n")
        for note in proc.finish():
            self.log.line(f"[leasehold] {label}: {note}")
        self._keep_summary(label, files)
        state = read_output_file(_step_file_text(files, "state"))
        # ``::save-state`` lines printed during this process join its $GITHUB_STATE file.
        state.update(self.commands.state.pop(self.commands.step, {}))
        run = SandboxRun(
            outcome=StepStatus.SUCCESS,
            exit_code=code,
            outputs=read_output_file(_step_file_text(files, "output")),
            env=read_output_file(_step_file_text(files, "env")),
            state=state,
        )
        added = read_path_file(_step_file_text(files, "path"))
        self.path_entries = [*self.path_entries, *added][-MAX_PATH_ENTRIES:]
        if stop.reason == AttemptStatus.CANCELLED:
            self.log.line("[leasehold] step cancelled")
            run.outcome = StepStatus.CANCELLED
        elif stop.reason == AttemptStatus.TIMED_OUT:
            self.log.line(f"[leasehold] step timed out: {stop.message}")
            run.outcome = StepStatus.TIMED_OUT
        elif stop.reason == AttemptStatus.FAILURE:
            self.log.line(f"[leasehold] step stopped: {stop.message}")
            run.outcome = StepStatus.FAILURE
        elif code != 0:
            self.log.line(f"[leasehold] {label} failed with exit code {code}")
            run.outcome = StepStatus.FAILURE
        else:
            run.exit_code = 0
        return run

    def _supervise(self, proc: SandboxProcess, deadline: float) -> _Stop:
        """Pump output, heartbeat, and stop the tree on cancel, timeout, shutdown or disk quota.

        Blocks on the process (a pidfd), a wake pipe (the cancel watcher) and the next timer
        (heartbeat, deadline, disk check, kill after the grace period): the step's end is seen
        the moment it happens, and an idle step costs no wake-ups between timers."""
        stop = _Stop()
        reader = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        reader.start()
        grace = self.inp.push.cancel_grace_seconds
        next_disk_check = time.monotonic() + DISK_CHECK_SECONDS
        terminated_at: float | None = None
        exit_fd = _open_pidfd(proc.pid)
        wake_read, wake_write = os.pipe()
        over = threading.Event()
        # The activity's cancel and shutdown events live in its context: the watcher runs in a copy.
        watcher = threading.Thread(
            target=contextvars.copy_context().run, args=(_watch_cancel, over, wake_write), daemon=True
        )
        watcher.start()
        watching = True
        try:
            while proc.poll() is None:
                now = time.monotonic()
                timers = [self.last_heartbeat + self.heartbeat_seconds]
                if stop.reason is None:
                    timers += [deadline, next_disk_check]
                elif terminated_at is not None:
                    timers.append(terminated_at + grace)
                waiting = ([wake_read] if watching else []) + ([exit_fd] if exit_fd is not None else [])
                # Without a pidfd (an old kernel) the exit is still seen within a short tick.
                cap = None if exit_fd is not None else 0.05
                timeout = max(0.0, min(timers) - now)
                ready, _, _ = select.select(waiting, [], [], timeout if cap is None else min(timeout, cap))
                if wake_read in ready and not os.read(wake_read, 64):
                    # The watcher has said its piece and closed its end.
                    watching = False
                if proc.poll() is not None:
                    break
                self.heartbeat()
                now = time.monotonic()
                if stop.reason is None:
                    if self.cancelled or self.shutdown:
                        stop.reason, stop.message = AttemptStatus.CANCELLED, "cancelled"
                    elif now >= deadline:
                        stop.reason, stop.message = AttemptStatus.TIMED_OUT, "timeout-minutes exceeded"
                    elif now >= next_disk_check:
                        next_disk_check = now + DISK_CHECK_SECONDS
                        message = self._disk_check()
                        if message is not None:
                            stop.reason, stop.message = AttemptStatus.FAILURE, message
                    if stop.reason is not None:
                        proc.terminate_tree()
                        terminated_at = now
                elif terminated_at is not None and now - terminated_at >= grace:
                    proc.kill_tree()
                    terminated_at = None
        finally:
            over.set()
            if exit_fd is not None:
                os.close(exit_fd)
            os.close(wake_read)
            # The watcher owns the write end: it closes it when it sees ``over``.
        # The step's shell is gone: nothing of its tree may outlive it (background jobs).
        proc.kill_tree()
        reader.join(timeout=10)
        return stop

    def _disk_check(self) -> str | None:
        """Why the step must stop for its disk use (``None``: it may go on). Measured as the job
        by the helper; a job that keeps it from measuring (its process limit reached, say) for
        ``DISK_MISSES_ALLOWED`` checks in a row is stopped too, or the quota would not bind."""
        try:
            used = self.tree.disk_usage()
        except (JobTreeError, SandboxError) as exc:
            self.disk_misses += 1
            log.info("disk check of %s failed (%d in a row): %s", self.root, self.disk_misses, exc)
            if self.disk_misses >= DISK_MISSES_ALLOWED:
                return "the workspace's disk use could not be measured"
            return None
        self.disk_misses = 0
        if used > self.o._config.disk_bytes:
            return f"workspace exceeded {self.o._config.disk_bytes} bytes"
        return None

    def _pump(self, proc: SandboxProcess) -> None:
        fd = proc.stdout.fileno()
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return
            if not data:
                return
            self.output_ended_line = data.endswith(b"\n")
            self.log.write(data)
