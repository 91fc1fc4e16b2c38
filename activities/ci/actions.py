"""Where ``owner/repo@ref`` actions come from, and resolving a workflow's actions at listing time.

The operator names the actions source (``LEASEHOLD_CI_ACTIONS_SOURCE``): a git URL template
(default ``https://github.com/{owner}/{repo}``, as github.com serves them) or a directory of
mirrors ``<dir>/<owner>/<repo>`` for offline and air-gapped deployments, as GitHub Enterprise
Server does. A template's URLs go through the same ``ClonePolicy`` as repositories' clone URLs,
so a tenant's ``uses:`` can never make the worker fetch from loopback, private addresses or
local paths the operator did not configure; the tenant only picks names, and those follow a
strict grammar (``actions_language.action_refs``).

Actions are resolved when the push is listed, not when a job starts: every ref becomes a
commit sha stored on the step (``StepSpec.uses_sha``), so every attempt of the run runs the
same code, and a bad action (no ``action.yml``, a Docker action, a shell we lack, a cycle)
fails that workflow file at push time with its file, line and ``uses`` key. Local ``./path``
actions are read from the pushed commit in the repository's mirror (not from a workspace:
none exists yet, and git objects hold no links to follow). Each action repository is a bare
mirror under the data dir, which is the per-ref cache; the least recently used mirrors beyond
``MAX_ACTION_MIRRORS`` are removed. Other repositories' reusable workflows
(``owner/repo/.github/workflows/f.yml@ref``) come from the same source and mirrors
(``activities.ci.called_workflows``).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from actions_language.action_refs import ActionRef, is_builtin, parse_uses
from actions_language.actions import ACTION_FILES, MAX_ACTION_BYTES, parse_action
from actions_language.loader import MAX_WORKFLOW_BYTES
from actions_language.schema import WorkflowSpecError
from activities.ci.git import GitError, GitMirror, InvalidRequest
from leasehold.clone_urls import ClonePolicy
from leasehold.settings import Settings
from workflows.ci.types.spec import ActionSpec, SpecError, StepSpec, WorkflowSpec

log = logging.getLogger(__name__)

DEFAULT_ACTIONS_SOURCE = "https://github.com/{owner}/{repo}"
# How deep composite actions may nest (GitHub's own limit is 10).
MAX_ACTION_DEPTH = 10
# Distinct actions one workflow file may use, nested ones included.
MAX_ACTIONS_PER_WORKFLOW = 100
# The resolved workflow travels in the run's payloads: keep it well under Temporal's limits.
MAX_RESOLVED_BYTES = 2 * MAX_WORKFLOW_BYTES
MAX_ACTION_MIRRORS = 256


class ActionNotUsable(Exception):
    """Why an action cannot run here (safe to show the tenant)."""


class ActionSource:
    """The operator's actions source: how ``owner/repo`` becomes a clone URL, and the mirrors."""

    def __init__(self, template: str, mirrors: GitMirror) -> None:
        self.template = template
        self.mirrors = mirrors

    @classmethod
    def from_settings(cls, settings: Settings, mirrors_dir: Path) -> ActionSource:
        template = settings.ci_actions_source.strip()
        policy = ClonePolicy.from_settings(settings)
        if "{" not in template:
            # A directory of mirrors: local paths below it, and nothing else, are allowed.
            if not template.startswith("/"):
                raise ValueError("ci_actions_source: a directory of mirrors must be an absolute path")
            template = template.rstrip("/") + "/{owner}/{repo}"
            policy = replace(policy, schemes=frozenset(), hosts=(), local_root=Path(template.split("{", 1)[0]))
        elif template.startswith(("/", "file://")):
            local = template.removeprefix("file://").split("{", 1)[0]
            policy = replace(policy, schemes=frozenset(), hosts=(), local_root=Path(os.path.dirname(local) or "/"))
        else:
            # Remote: exactly the repositories' URL policy, and never a local path.
            policy = replace(policy, local_root=None)
        if "{owner}" not in template or "{repo}" not in template:
            raise ValueError("ci_actions_source: a URL template needs {owner} and {repo}")
        return cls(template, GitMirror(mirrors_dir, policy))

    def clone_url(self, owner: str, repo: str) -> str:
        return self.template.replace("{owner}", owner).replace("{repo}", repo)

    @staticmethod
    def mirror_id(repository: str) -> str:
        return "action:" + repository.lower()

    def resolve(self, ref: ActionRef, heartbeat: Callable[[], None] | None) -> tuple[Path, str]:
        """Fetch the action's repository and resolve its ref to a commit sha."""
        try:
            mirror, sha = self.mirrors.resolve_ref(
                self.mirror_id(ref.repository), self.clone_url(ref.owner, ref.repo), ref.ref, heartbeat
            )
        except InvalidRequest as exc:
            raise ActionNotUsable(f"the actions source refuses {ref.repository}: {exc}") from None
        except GitError:
            raise ActionNotUsable(f"{ref.repository} could not be fetched from the actions source") from None
        self._evict()
        if sha is None:
            raise ActionNotUsable(f"{ref.repository} has no tag, branch or commit {ref.ref!r}")
        return mirror, sha

    def mirror_of(self, repository: str, sha: str, heartbeat: Callable[[], None] | None) -> Path:
        """The mirror holding the action's commit ``sha`` (fetched if needed); the job's
        attempt streams ``GitMirror.archive_stream`` of it into its own ``actions/`` directory,
        unpacked as the job (``activities.ci.jobroot``), never by the worker."""
        owner, repo = repository.split("/", 1)
        return self.mirrors.ensure_commit(self.mirror_id(repository), self.clone_url(owner, repo), sha, heartbeat)

    def _evict(self) -> None:
        """Remove the least recently resolved mirrors beyond ``MAX_ACTION_MIRRORS`` (skipping any
        another thread holds)."""
        try:
            found = sorted(self.mirrors.root.glob("*.git"), key=lambda p: p.stat().st_mtime)
        except OSError:
            return
        for path in found[: max(0, len(found) - MAX_ACTION_MIRRORS)]:
            lock = path.with_suffix(".lock")
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(path, ignore_errors=True)
            except OSError:
                pass
            finally:
                os.close(fd)


def _check_inputs(step: StepSpec, spec: ActionSpec) -> None:
    given = {name.lower() for name in step.with_inputs}
    for name, declared in spec.inputs.items():
        if declared.required and declared.default is None and name not in given:
            raise ActionNotUsable(f"input {name!r} is required and has no default: give it in 'with:'")


@dataclass(eq=False)
class ActionResolver:
    """Resolves every action of one workflow file at one commit (``resolve_workflow``)."""

    source: ActionSource | None
    repo_mirror: GitMirror
    mirror: Path
    commit_sha: str
    heartbeat: Callable[[], None] | None = None
    _done: dict[tuple[str, ...], ActionSpec] = field(default_factory=dict, init=False)
    _count: int = field(default=0, init=False)

    def resolve_workflow(self, spec: WorkflowSpec) -> WorkflowSpec:
        """Attach each action's definition and commit to its steps; raises ``WorkflowSpecError``
        naming the workflow step's line and ``uses`` key, and what in the action was wrong."""
        self._count = 0
        for job in spec.jobs:
            for step in job.steps:
                if step.uses is None or is_builtin(step.uses):
                    continue
                try:
                    self._resolve_step(step, ())
                except ActionNotUsable as exc:
                    raise WorkflowSpecError(
                        SpecError(
                            file=spec.path,
                            line=step.line,
                            key=f"jobs.{job.id}.steps[{step.index}].uses",
                            message=f"action {step.uses!r}: {exc}",
                        )
                    ) from None
        size = len(spec.model_dump_json())
        if size > MAX_RESOLVED_BYTES:
            raise WorkflowSpecError(
                SpecError(
                    file=spec.path,
                    key="jobs",
                    message=f"with its actions the workflow exceeds {MAX_RESOLVED_BYTES} bytes",
                )
            )
        return spec

    def _resolve_step(self, step: StepSpec, chain: tuple[tuple[str, ...], ...]) -> None:
        assert step.uses is not None
        try:
            ref = parse_uses(step.uses)
        except ValueError as exc:
            raise ActionNotUsable(str(exc)) from None
        key: tuple[str, ...]
        if ref.local:
            mirror, sha, key = self.mirror, self.commit_sha, ("local", ref.path)
        else:
            if self.source is None:
                raise ActionNotUsable("no actions source is configured on this deployment")
            mirror, sha = self.source.resolve(ref, self.heartbeat)
            key = ("remote", ref.repository.lower(), sha, ref.path)
        if key in chain:
            raise ActionNotUsable("actions use each other in a cycle")
        if len(chain) >= MAX_ACTION_DEPTH:
            raise ActionNotUsable(f"actions nest deeper than {MAX_ACTION_DEPTH}")
        step.uses_sha = sha
        if key in self._done:
            _check_inputs(step, self._done[key])
            step.resolved = self._done[key]
            return
        self._count += 1
        if self._count > MAX_ACTIONS_PER_WORKFLOW:
            raise ActionNotUsable(
                f"a workflow may use at most {MAX_ACTIONS_PER_WORKFLOW} actions, nested ones included"
            )
        spec = self._read(ref, mirror, sha)
        for sub in spec.steps:
            if sub.uses is None:
                continue
            try:
                self._resolve_step(sub, (*chain, key))
            except ActionNotUsable as exc:
                raise ActionNotUsable(f"its step {sub.index + 1} uses {sub.uses!r}: {exc}") from None
        self._done[key] = spec
        _check_inputs(step, spec)
        step.resolved = spec

    def _read(self, ref: ActionRef, mirror: Path, sha: str) -> ActionSpec:
        where = "./" + ref.path if ref.local else f"{ref.repository}@{sha[:12]}" + (f"/{ref.path}" if ref.path else "")
        for name in ACTION_FILES:
            path = f"{ref.path}/{name}" if ref.path else name
            try:
                data = self.repo_mirror.read_file(mirror, sha, path, MAX_ACTION_BYTES)
            except GitError:
                raise ActionNotUsable(f"could not read {where}") from None
            if data is None:
                continue
            try:
                return parse_action(
                    name, data, None if ref.local else ref.repository, None if ref.local else sha, ref.path
                )
            except WorkflowSpecError as exc:
                raise ActionNotUsable(f"{where}: {exc.error.render()}") from None
        raise ActionNotUsable(
            f"no action.yml or action.yaml (a regular file, at most {MAX_ACTION_BYTES} bytes) in {where}"
        )
