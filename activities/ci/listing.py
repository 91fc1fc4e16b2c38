"""Control activity of CI: read and parse the workflow files at a pushed commit."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from actions_language.environment_names import evaluate_names
from actions_language.filters import matches_any
from actions_language.inputs import DispatchInputError, check_shape, resolve_inputs
from actions_language.loader import MAX_WORKFLOW_BYTES
from actions_language.parser import parse_workflow
from actions_language.schema import FileContext, WorkflowSpecError
from actions_language.triggers import (
    MAX_DIFF_FILES,
    has_path_filter,
    paths_match,
    pull_request_triggers,
    push_triggers,
    typed_event_triggers,
    workflow_run_triggers,
)
from activities.ci.actions import ActionResolver, ActionSource
from activities.ci.called_workflows import CalledWorkflowFiles
from activities.ci.definitions import CIListingDefinition
from activities.ci.git import GitError, GitMirror, InvalidRequest
from activities.ci.image_pins import ImageDigests, pin_images
from leasehold.db_retry import DEFAULT_FAILOVER_SECONDS, in_activity
from leasehold.records.ci.environments import CIEnvironment
from leasehold.records.ci.variables import MAX_VARIABLES_BYTES_PER_RUN
from workflows.ci.event import push_github_context
from workflows.ci.ids import run_id
from workflows.ci.types.push import (
    ACTIVITY_LIST_WORKFLOWS,
    DISPATCH_REJECTED,
    PUSH_GIT_FAILED,
    EnvironmentRule,
    ListWorkflowsInput,
    ListWorkflowsResult,
    PushContext,
)
from workflows.ci.types.spec import PushFilter, SpecError, WorkflowFile, WorkflowSpec

log = logging.getLogger(__name__)

# (tenant, repo, environment names) -> the rules of those that require approval.
EnvironmentRules = Callable[[str, str, Iterable[str]], dict[str, EnvironmentRule]]
# (tenant, repo, environment names, bytes left) -> their configuration variables
# (``leasehold.records.ci.variables.environment_variables_for``).
EnvironmentVariables = Callable[[str, str, Iterable[str], int], dict[str, dict[str, str]]]
# (tenant, repo, workflow path, run id) -> the run's number (``github.run_number``), kept by run id.
RunNumbers = Callable[[str, str, str, str], int]


@dataclass(eq=False)
class CIListingActivities(CIListingDefinition):
    """Runs on CI workers (they hold the git mirrors), on the control queue."""

    mirror: GitMirror
    environments: EnvironmentRules | None = None
    # Where `owner/repo@ref` actions come from; None: only local `./path` actions resolve.
    actions: ActionSource | None = None
    run_numbers: RunNumbers | None = None
    # (tenant, repo) -> whether the repository has a status reporter.
    reporter: Callable[[str, str], bool] | None = None
    # The database reads (environments, run numbers) wait out a failover this long, in place.
    failover_seconds: float = DEFAULT_FAILOVER_SECONDS
    # The registry mirror's digests: ``container:``/``services:`` images pinned here (None: no
    # mirror configured; the OCI worker then resolves them when each attempt starts).
    images: ImageDigests | None = None
    # The named environments' configuration variables (None: none are read, jobs see ``vars``).
    environment_variables: EnvironmentVariables | None = None

    @activity.defn(name=ACTIVITY_LIST_WORKFLOWS)
    def list_workflows(self, inp: ListWorkflowsInput) -> ListWorkflowsResult:
        """Fetch the mirror, then parse each ``.github/workflows/*.yml|yaml`` and match ``on.push``
        (or, for a ``workflow_dispatch``, resolve its ref and check its one file and inputs)."""
        if inp.event == "workflow_dispatch":
            return self._list_dispatch(inp)
        if inp.event == "schedule":
            return self._list_scheduled(inp)
        resolved = False
        if not inp.commit_sha and inp.event in ("release", "workflow_run"):
            # A release names its tag, a workflow_run the default branch: the commit is the
            # one they point at now, read from the repository.
            with git_errors():
                found_tag = self.mirror.resolve_branch_or_tag(inp.repo_id, inp.clone_url, inp.ref, activity.heartbeat)
            if found_tag is None:
                raise ApplicationError(f"the repository has no {inp.ref!r}", type=PUSH_GIT_FAILED, non_retryable=True)
            inp = inp.model_copy(update={"ref": found_tag[1], "commit_sha": found_tag[2]})
            resolved = True
        with git_errors():
            mirror = self.mirror.ensure_commit(inp.repo_id, inp.clone_url, inp.commit_sha, activity.heartbeat)
            found = self.mirror.workflow_files(mirror, inp.commit_sha, MAX_WORKFLOW_BYTES)
        diff: list[list[str] | None] = []

        def changed() -> list[str] | None:
            # Computed once, and only when some triggered file filters on paths.
            if not diff:
                if inp.event == "pull_request":
                    base = f"refs/heads/{inp.base_ref}" if inp.base_ref else None
                    diff.append(self.mirror.changed_files(mirror, inp.commit_sha, base, MAX_DIFF_FILES, True))
                else:
                    diff.append(self.mirror.changed_files(mirror, inp.commit_sha, inp.before, MAX_DIFF_FILES))
            return diff[0]

        files = []
        # Called (reusable) workflows: this repository's from the same listing (git's blobs at
        # the commit), another's through the actions source, one commit per ref for the push.
        read = self._called_workflows(found)
        for path, content in found:
            if content is None:
                error = SpecError(file=path, message=f"file is larger than {MAX_WORKFLOW_BYTES} bytes")
                files.append(WorkflowFile(path=path, error=error))
                continue
            try:
                spec = parse_workflow(path, content, read)
                # Each file's actions on their own: a bad action fails only the file using it.
                ActionResolver(self.actions, self.mirror, mirror, inp.commit_sha, activity.heartbeat).resolve_workflow(
                    spec
                )
                self._pin(spec)
            except WorkflowSpecError as exc:
                # The run is still created, and fails with this message.
                files.append(WorkflowFile(path=path, error=exc.error))
                continue
            event, triggered = event_trigger(spec, inp)
            # Both must match: the branch or tag filters, then the paths (never for tags, as on
            # GitHub). A pull_request_target run builds the base: its paths are not listed here,
            # so its path filters count as matching (the run happens rather than silently not).
            if triggered and has_path_filter(event) and not inp.ref.startswith("refs/tags/"):
                if inp.event != "pull_request_target":
                    triggered = paths_match(event, changed())
            files.append(WorkflowFile(path=path, spec=spec, triggered=triggered))
        files = self._environment_names(inp, inp.commit_sha, inp.ref, {} if resolved else None, files)
        return ListWorkflowsResult(
            files=files,
            environments=self._rules(inp, files),
            environment_variables=self._environment_variables(inp, files),
            run_numbers=self._numbers(inp, inp.commit_sha, files),
            report_status=self._reports(inp, files),
            workflow_run_listened=listened(files),
            # A release's commit and tag, resolved here (the push adopts them).
            commit_sha=inp.commit_sha if resolved else None,
            ref=inp.ref if resolved else None,
            inputs={} if resolved else None,
        )

    def _called_workflows(self, found: Iterable[tuple[str, bytes | None]]) -> CalledWorkflowFiles:
        return CalledWorkflowFiles(dict(found), self.actions, activity.heartbeat)

    def _pin(self, spec: WorkflowSpec) -> None:
        if self.images is not None:
            pin_images(spec, self.images)

    def _numbers(self, inp: ListWorkflowsInput, sha: str, files: list[WorkflowFile]) -> dict[str, int]:
        """Each run's ``github.run_number``, by the run id the push workflow will derive."""
        if self.run_numbers is None or not inp.tenant_id:
            return {}
        numbers, tenant = self.run_numbers, inp.tenant_id

        def read() -> dict[str, int]:
            # Kept by run id: reading them again after a lost connection gives the same numbers.
            return {
                f.path: numbers(
                    tenant, inp.repo_id, f.path, run_id(inp.repo_id, sha, f.path, inp.event, inp.dispatch_key)
                )
                for f in files
                if f.triggered
            }

        return in_activity(read, self.failover_seconds, f"run numbers of {inp.repo_id}", log)

    def _reports(self, inp: ListWorkflowsInput, files: list[WorkflowFile]) -> bool:
        """Whether the runs report to the git host (read with the listing, like the rules)."""
        if self.reporter is None or not inp.tenant_id or not any(f.triggered for f in files):
            return False
        reporter, tenant = self.reporter, inp.tenant_id
        what = f"status reporter of {inp.repo_id}"
        return in_activity(lambda: reporter(tenant, inp.repo_id), self.failover_seconds, what, log)

    def _rules(self, inp: ListWorkflowsInput, files: list[WorkflowFile]) -> dict[str, EnvironmentRule]:
        named = named_environments(files)
        if not named or not inp.tenant_id or self.environments is None:
            return {}
        # Read with the listing, so the run carries its protection rules from the start.
        rules, tenant = self.environments, inp.tenant_id
        what = f"environments of {inp.repo_id}"
        return in_activity(lambda: rules(tenant, inp.repo_id, named), self.failover_seconds, what, log)

    def _environment_variables(self, inp: ListWorkflowsInput, files: list[WorkflowFile]) -> dict[str, dict[str, str]]:
        """The variables of the environments the jobs name, read with the listing like the
        rules (a job's ``vars`` never changes during its run), within what the push's own
        ``vars`` left of the per-run bound."""
        named = named_environments(files)
        if not named or not inp.tenant_id or self.environment_variables is None:
            return {}
        read, tenant = self.environment_variables, inp.tenant_id
        budget = MAX_VARIABLES_BYTES_PER_RUN - inp.variables_bytes
        what = f"environment variables of {inp.repo_id}"
        return in_activity(lambda: read(tenant, inp.repo_id, named, budget), self.failover_seconds, what, log)

    def _environment_names(
        self,
        inp: ListWorkflowsInput,
        sha: str,
        ref: str,
        inputs: dict[str, str | bool | float] | None,
        files: list[WorkflowFile],
    ) -> list[WorkflowFile]:
        """The triggered files with their jobs' ``environment: ${{ }}`` names evaluated, before
        their rules and variables are read (``actions_language.environment_names``): over the
        push as its runs see it, at ``sha`` and ``ref`` (and ``inputs``, None: the push's own),
        as ``CIPushWorkflow`` adopts a resolved commit. A name that cannot be evaluated fails
        its file's run, naming file, line and key, as a parse error does."""
        out: list[WorkflowFile] = []
        for file in files:
            spec = file.spec
            written = [j.environment_expression for j in spec.jobs if j.environment_expression] if spec else []
            if spec is None or not file.triggered or not written:
                out.append(file)
                continue
            try:
                if inp.push is None:
                    # A push started before the listing was given it (its payload predates the field).
                    raise FileContext(written[0].file).fail(
                        written[0].line,
                        written[0].key,
                        "an environment name expression needs the push, which this listing was not given",
                    )
                update: dict[str, object] = {"commit_sha": sha, "ref": ref}
                if inputs is not None:
                    update["inputs"] = inputs
                push = inp.push.model_copy(update=update)
                rid = run_id(inp.repo_id, sha, file.path, inp.event, inp.dispatch_key)
                evaluate_names(spec, listing_contexts(push, rid, spec.name))
            except WorkflowSpecError as exc:
                out.append(WorkflowFile(path=file.path, error=exc.error))
                continue
            out.append(file)
        return out

    def _list_scheduled(self, inp: ListWorkflowsInput) -> ListWorkflowsResult:
        """A tick of an ``on.schedule`` entry: the default branch's head now, and the one file,
        which runs only if it is still there, valid and scheduled (else the tick does nothing:
        the next push to the branch removes the schedule)."""
        with git_errors():
            resolved = self.mirror.resolve_branch_or_tag(inp.repo_id, inp.clone_url, inp.ref, activity.heartbeat)
            if resolved is None:
                return ListWorkflowsResult(inputs={})
            mirror, ref, sha = resolved
            found = dict(self.mirror.workflow_files(mirror, sha, MAX_WORKFLOW_BYTES))
        path = inp.dispatch_workflow or ""
        content = found.get(path)
        files: list[WorkflowFile] = []
        if content is not None:
            try:
                spec = parse_workflow(path, content, self._called_workflows(found.items()))
                ActionResolver(self.actions, self.mirror, mirror, sha, activity.heartbeat).resolve_workflow(spec)
                self._pin(spec)
                files = [WorkflowFile(path=path, spec=spec, triggered=bool(spec.on_schedule))]
            except WorkflowSpecError:
                files = [WorkflowFile(path=path, spec=None, triggered=False)]
            files = self._environment_names(inp, sha, ref, {}, files)
        return self._resolved_result(inp, files, sha, ref, {})

    def _list_dispatch(self, inp: ListWorkflowsInput) -> ListWorkflowsResult:
        """A ``workflow_dispatch``: the ref's commit, the one file asked for, its inputs checked
        against its ``on.workflow_dispatch``. What the caller got wrong fails the dispatch
        (``DISPATCH_REJECTED``, naming the field) instead of creating a run."""
        with git_errors():
            resolved = self.mirror.resolve_branch_or_tag(inp.repo_id, inp.clone_url, inp.ref, activity.heartbeat)
            if resolved is None:
                raise _rejected("ref", f"the repository has no branch or tag {inp.ref!r}")
            mirror, ref, sha = resolved
            found = self.mirror.workflow_files(mirror, sha, MAX_WORKFLOW_BYTES)
        wanted = inp.dispatch_workflow or ""
        matches = [(p, c) for p, c in found if wanted in (p, p.rsplit("/", 1)[-1])]
        if not matches:
            raise _rejected("workflow", f"no workflow file {wanted!r} at {ref}")
        path, content = matches[0]
        if content is None:
            raise _rejected("workflow", f"{path} is larger than {MAX_WORKFLOW_BYTES} bytes")
        try:
            spec = parse_workflow(path, content, self._called_workflows(found))
        except WorkflowSpecError as exc:
            raise _rejected("workflow", str(exc)) from None
        if spec.on_dispatch is None:
            raise _rejected("workflow", f"{path} has no 'workflow_dispatch' trigger")
        try:
            inputs = resolve_inputs(spec.on_dispatch, check_shape(inp.inputs))
        except DispatchInputError as exc:
            raise _rejected(exc.field, exc.message) from None
        try:
            ActionResolver(self.actions, self.mirror, mirror, sha, activity.heartbeat).resolve_workflow(spec)
            self._pin(spec)
            files = [WorkflowFile(path=path, spec=spec)]
        except WorkflowSpecError as exc:
            # As on a push: the run is created, and fails with the action's error.
            files = [WorkflowFile(path=path, error=exc.error)]
        files = self._environment_names(inp, sha, ref, inputs, files)
        return self._resolved_result(inp, files, sha, ref, inputs)

    def _resolved_result(
        self,
        inp: ListWorkflowsInput,
        files: list[WorkflowFile],
        sha: str,
        ref: str,
        inputs: dict[str, str | bool | float],
    ) -> ListWorkflowsResult:
        """A schedule's or a dispatch's listing: the one file with what is read beside it (rules,
        variables, run number, reporting, in that order), and the commit, ref and inputs it
        resolved to, which the push adopts."""
        return ListWorkflowsResult(
            files=files,
            environments=self._rules(inp, files),
            environment_variables=self._environment_variables(inp, files),
            commit_sha=sha,
            ref=ref,
            inputs=inputs,
            run_numbers=self._numbers(inp, sha, files),
            report_status=self._reports(inp, files),
        )


@contextmanager
def git_errors() -> Iterator[None]:
    """Git's failures as the push reads them: a request git refuses (a bad clone URL, an unknown
    commit) fails the push for good; anything else (network, a fetch racing a push) is retried
    by Temporal, then fails the push."""
    try:
        yield
    except InvalidRequest as exc:
        raise ApplicationError(str(exc), type=PUSH_GIT_FAILED, non_retryable=True) from exc
    except GitError as exc:
        raise ApplicationError(str(exc), type=type(exc).__name__) from exc


def listened(files: list[WorkflowFile]) -> list[str]:
    """The files whose workflow (by name) some file's ``on.workflow_run`` names."""
    patterns = [p for f in files if f.spec and f.spec.on_workflow_run.enabled for p in f.spec.on_workflow_run.workflows]
    if not patterns:
        return []
    return [f.path for f in files if f.spec and any(matches_any([p], f.spec.name) for p in patterns)]


def event_trigger(spec: WorkflowSpec, inp: ListWorkflowsInput) -> tuple[PushFilter, bool]:
    """The file's filter for the event being listed, and whether the event matches it."""
    action = inp.action or ""
    if inp.event in ("pull_request", "pull_request_target"):
        event = spec.on_pull_request if inp.event == "pull_request" else spec.on_pull_request_target
        return event, pull_request_triggers(event, inp.base_ref or "", action or "opened")
    if inp.event == "release":
        return spec.on_release, typed_event_triggers(spec.on_release, action)
    if inp.event == "merge_group":
        return spec.on_merge_group, typed_event_triggers(spec.on_merge_group, action or "checks_requested")
    if inp.event == "workflow_run":
        hit = workflow_run_triggers(spec.on_workflow_run, inp.triggering_workflow, action, inp.triggering_branch)
        return PushFilter(enabled=hit), hit
    return spec.on_push, push_triggers(spec.on_push, inp.ref)


def _rejected(field: str, message: str) -> ApplicationError:
    # The field travels as the error's details: the API answers 422 naming it.
    return ApplicationError(f"{field}: {message}", field, type=DISPATCH_REJECTED, non_retryable=True)


def listing_contexts(push: PushContext, run: str, workflow_name: str) -> dict[str, Any]:
    """What an environment name is evaluated over: the run's ``github`` (built as its jobs'
    is), the push's ``vars`` and its ``inputs``."""
    return {
        "github": push_github_context(push, run, workflow_name),
        "vars": dict(push.variables),
        "inputs": dict(push.inputs),
    }


def named_environments(files: list[WorkflowFile]) -> set[str]:
    """The environments (``environment:``) the jobs of the triggered files name."""
    return {j.environment for f in files if f.spec and f.triggered for j in f.spec.jobs if j.environment}


def environment_rules(
    factory: sessionmaker, tenant_id: str, repo_id: str, names: Iterable[str]
) -> dict[str, EnvironmentRule]:
    """The protection rules of the named environments that require approval (lower-case names),
    as the run workflow's payload (the records module knows nothing of workflows)."""
    wanted = {n.lower() for n in names}
    if not wanted:
        return {}
    with factory() as session:
        rows = session.scalars(
            select(CIEnvironment).where(
                CIEnvironment.tenant_id == tenant_id,
                CIEnvironment.repo_id == repo_id,
                CIEnvironment.name.in_(wanted),
                CIEnvironment.required_approval.is_(True),
            )
        ).all()
    return {
        r.name: EnvironmentRule(name=r.display_name, required_approval=True, approvers=list(json.loads(r.approvers)))
        for r in rows
    }
