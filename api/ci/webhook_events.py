"""The webhook events besides ``push`` that start runs, read as GitHub sends them.

* ``pull_request`` (every activity type): a push of the head commit (``refs/pull/<n>/head``)
  for ``on.pull_request`` files, and a push of the base branch's commit (the payload's
  ``pull_request.base.sha``, ``refs/heads/<base>``) for ``on.pull_request_target`` files: the
  base's workflow, which may use secrets even for a fork's pull request, and whose checkout is
  the base commit (the pull request's code is never checked out by default).
* ``release``: its tag (``refs/tags/<tag_name>``), whose commit the listing resolves.
* ``merge_group`` ``checks_requested``: the queue's head commit on its ``gh-readonly-queue`` ref.

Opened, synchronize and reopened keep the push id of their commit and ref (a redelivery, or
the same head pushed again, is the same push). Every other event is named by what makes it
one event on GitHub (its action and the pull request's ``updated_at``, the release's id):
its own push and runs, the same again on a redelivery.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from api.errors import ApiError
from api.schemas.ci.runs import PushAccepted
from leasehold.records.ci.repos import RepoRecord
from workflows.ci.types.push import PullRequestInfo

SHA = re.compile(r"^[0-9a-fA-F]{40}([0-9a-fA-F]{24})?$")
# Pull-request actions whose run is the push of the head commit itself.
PR_ACTIONS = ("opened", "synchronize", "reopened")
# A tag or branch name as a ref may carry it (no spaces, no control characters, no "..").
REF_NAME = re.compile(r"^(?!.*\.\.)[^\x00-\x20\x7f~^:?*\[\\]{1,255}$")

# (repo, sha, ref, pull request, event name, action, dispatch key) -> the push id.
Record = Callable[[RepoRecord, str, str, PullRequestInfo | None, str, str, str], Awaitable[str]]


def text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _sha(value: Any, param: str) -> str:
    if not isinstance(value, str) or not SHA.match(value):
        raise ApiError(400, "invalid_payload", f"{param} must be a commit sha", param=param)
    return value.lower()


async def pull_request(payload: dict[str, Any], verified: list[RepoRecord], record: Record) -> list[PushAccepted]:
    """The head's ``pull_request`` push and the base's ``pull_request_target`` push."""
    action = text(payload.get("action")) or ""
    pr = payload.get("pull_request")
    number = payload.get("number", pr.get("number") if isinstance(pr, dict) else None)
    if not action or not isinstance(pr, dict) or not isinstance(number, int) or isinstance(number, bool) or number <= 0:
        raise ApiError(400, "invalid_payload", "a pull_request payload needs 'action', 'number' and 'pull_request'")
    head, base = obj(pr.get("head")), obj(pr.get("base"))
    sha = _sha(head.get("sha"), "pull_request.head.sha")
    # GitHub always sends the base's commit; a payload without it gets no pull_request_target push.
    base_sha = _sha(base["sha"], "pull_request.base.sha") if base.get("sha") is not None else None
    head_repo, base_repo, repository = obj(head.get("repo")), obj(base.get("repo")), obj(payload.get("repository"))
    base_name = text(base_repo.get("full_name")) or text(repository.get("full_name")) or ""
    updated = text(pr.get("updated_at")) or ""
    # Not the head's own push: this event is a run of its own (once, however often delivered).
    key = "" if action in PR_ACTIONS else f"pull_request:{number}:{action}:{sha}:{updated}"
    pushes = []
    for repo in verified:
        info = PullRequestInfo(
            number=number,
            head_ref=text(head.get("ref")) or "",
            base_ref=text(base.get("ref")) or repo.default_branch,
            # A deleted fork has no head repository: treat it as foreign code.
            head_repo=text(head_repo.get("full_name")) or "(deleted fork)",
            base_repo=base_name or repo.name,
            action=action,
        )
        ref = f"refs/pull/{number}/head"
        pid = await record(repo, sha, ref, info, "pull_request", action, key)
        pushes.append(PushAccepted(id=pid, repo_id=repo.id, commit_sha=sha, ref=ref))
        if base_sha is None:
            continue
        target_ref = f"refs/heads/{info.base_ref}"
        target_key = f"pull_request_target:{number}:{action}:{sha}:{updated}"
        pid = await record(repo, base_sha, target_ref, info, "pull_request_target", action, target_key)
        pushes.append(PushAccepted(id=pid, repo_id=repo.id, commit_sha=base_sha, ref=target_ref))
    return pushes


async def release(payload: dict[str, Any], verified: list[RepoRecord], record: Record) -> list[PushAccepted]:
    """A release's push: its tag, its commit resolved when the push is listed."""
    action = text(payload.get("action")) or ""
    body = obj(payload.get("release"))
    tag, release_id = text(body.get("tag_name")), body.get("id")
    if not action or tag is None or not REF_NAME.match(tag) or not isinstance(release_id, int | str):
        raise ApiError(400, "invalid_payload", "a release payload needs 'action', release.id and release.tag_name")
    ref = f"refs/tags/{tag}"
    pushes = []
    for repo in verified:
        pid = await record(repo, "", ref, None, "release", action, f"release:{release_id}:{action}")
        pushes.append(PushAccepted(id=pid, repo_id=repo.id, commit_sha="", ref=ref))
    return pushes


async def merge_group(payload: dict[str, Any], verified: list[RepoRecord], record: Record) -> list[PushAccepted]:
    """A merge queue's ``checks_requested``: its head commit on its queue ref."""
    action = text(payload.get("action")) or ""
    group = obj(payload.get("merge_group"))
    sha = _sha(group.get("head_sha"), "merge_group.head_sha")
    ref = text(group.get("head_ref")) or ""
    if not ref.startswith("refs/heads/") or not REF_NAME.match(ref):
        raise ApiError(
            400, "invalid_payload", "merge_group.head_ref must be a branch ref", param="merge_group.head_ref"
        )
    pushes = []
    for repo in verified:
        pid = await record(repo, sha, ref, None, "merge_group", action, f"merge_group:{action}:{sha}")
        pushes.append(PushAccepted(id=pid, repo_id=repo.id, commit_sha=sha, ref=ref))
    return pushes


HANDLERS = {"pull_request": pull_request, "release": release, "merge_group": merge_group}
