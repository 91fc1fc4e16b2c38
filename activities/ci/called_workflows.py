"""The workflow files a run's file may call (``jobs.<id>.uses``), read when the push is listed.

The run's own repository's come from the listing's read of ``.github/workflows`` at the pushed
commit. Another repository's (``owner/repo/.github/workflows/f.yml@ref``) come from the
operator's actions source, as actions do (``activities.ci.actions.ActionSource``: the same URL
policy, the same bare mirrors under the data dir): the ref is resolved to a commit once per
listing, so every file of the push that names it expands the same commit, and the expanded jobs
travel in the run's payload, so every attempt and retry runs what was listed. The file is read
from git's objects at that commit (``GitMirror.read_file``): a regular file of at most
``MAX_WORKFLOW_BYTES``, never a symbolic link, never through a checkout, so nothing a job or the
source's owner wrote is ever followed or walked by the worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from actions_language.action_refs import ActionRef
from actions_language.expansion import OTHER_REPOSITORIES_UNSUPPORTED, CalledWorkflowUnavailable
from actions_language.loader import MAX_WORKFLOW_BYTES
from activities.ci.actions import ActionNotUsable, ActionSource
from activities.ci.git import GitError

log = logging.getLogger(__name__)


@dataclass(eq=False)
class CalledWorkflowFiles:
    """One listing's reader of called workflows (``actions_language.expansion.CalledWorkflowReader``).

    ``files``: the run's repository's workflow files at the commit (``None``: too large);
    ``source``: the actions source, ``None`` where the deployment has none (another
    repository's workflow is then refused as not supported here)."""

    files: dict[str, bytes | None]
    source: ActionSource | None
    heartbeat: Callable[[], None] | None = None
    # (repository, ref) -> (mirror, commit): a ref means one commit for the whole listing.
    _pinned: dict[tuple[str, str], tuple[Path, str]] = field(default_factory=dict, init=False)
    _read: dict[tuple[str, str, str], bytes] = field(default_factory=dict, init=False)

    def __call__(self, path: str) -> bytes | None:
        return self.files.get(path)

    def other_repository(self, repository: str, ref: str, path: str) -> tuple[str, bytes]:
        """``(commit sha, content)`` of ``path`` in ``repository`` at ``ref``."""
        if self.source is None:
            raise CalledWorkflowUnavailable(OTHER_REPOSITORIES_UNSUPPORTED)
        mirror, sha = self._resolve(self.source, repository, ref)
        key = (repository.lower(), sha, path)
        if key not in self._read:
            try:
                data = self.source.mirrors.read_file(mirror, sha, path, MAX_WORKFLOW_BYTES)
            except GitError:
                raise CalledWorkflowUnavailable(f"{path} could not be read from {repository}@{sha[:12]}") from None
            if data is None:
                raise CalledWorkflowUnavailable(
                    f"{repository} has no {path} at {ref} (commit {sha[:12]}): it must be a regular file "
                    f"of at most {MAX_WORKFLOW_BYTES} bytes (a symbolic link is refused)"
                )
            self._read[key] = data
        return sha, self._read[key]

    def _resolve(self, source: ActionSource, repository: str, ref: str) -> tuple[Path, str]:
        key = (repository.lower(), ref)
        if key not in self._pinned:
            owner, repo = repository.split("/", 1)
            try:
                self._pinned[key] = source.resolve(
                    ActionRef(local=False, path="", owner=owner, repo=repo, ref=ref), self.heartbeat
                )
            except ActionNotUsable as exc:
                raise CalledWorkflowUnavailable(str(exc)) from None
            log.info("called workflows of %s@%s pinned to %s", repository, ref, self._pinned[key][1])
        return self._pinned[key]
