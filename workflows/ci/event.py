"""The ``github.event`` a job sees: the webhook payload, bounded, or a minimal one built from the push.

Pure (no I/O). The payload is the tenant's own (its webhook secret signed it), but it travels in
every run and job input of the push, so it is cut to a size Temporal payloads carry easily:
strings, lists, mappings and depth are capped, then whole keys are dropped (largest first)
until the JSON fits ``MAX_EVENT_BYTES``. A push recorded without a payload (the reconciler's)
gets the fields GitHub documents for its event, built from the push itself.
"""

from __future__ import annotations

import json
from typing import Any

from workflows.ci.expressions import github_context, to_text
from workflows.ci.types.push import PushContext

MAX_EVENT_BYTES = 16 * 1024
MAX_TEXT = 1024
MAX_ITEMS = 20
MAX_KEYS = 64
MAX_DEPTH = 6


def _cap(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**53 else str(value)
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if depth >= MAX_DEPTH:
        return None
    if isinstance(value, dict):
        return {str(k)[:MAX_TEXT]: _cap(v, depth + 1) for k, v in list(value.items())[:MAX_KEYS]}
    if isinstance(value, list):
        return [_cap(v, depth + 1) for v in value[:MAX_ITEMS]]
    return None


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def bounded_event(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` cut to at most ``MAX_EVENT_BYTES`` of JSON (see the module docstring)."""
    event = _cap(payload, 0)
    assert isinstance(event, dict)
    while event and _size(event) > MAX_EVENT_BYTES:
        # The largest key goes first: usually 'commits', never the small ones jobs read.
        del event[max(event, key=lambda k: _size(event[k]))]
    return event


def event_actor(payload: dict[str, Any]) -> str:
    """Who caused the event: the sender's login, else the pusher's name ("" when neither)."""
    for outer, inner in (("sender", "login"), ("pusher", "name")):
        holder = payload.get(outer)
        if isinstance(holder, dict) and isinstance(holder.get(inner), str):
            return str(holder[inner])[:256]
    return ""


def minimal_event(
    event_name: str, ref: str, sha: str, repository: str, actor: str, pull_request: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The documented core of a ``push`` or ``pull_request`` payload, for a push without one."""
    owner, _, name = repository.partition("/")
    repo = {"full_name": repository, "name": name, "owner": {"login": owner}}
    if event_name == "pull_request" and pull_request is not None:
        return {
            "action": pull_request.get("action", "opened"),
            "number": pull_request.get("number"),
            "pull_request": {
                "number": pull_request.get("number"),
                "head": {
                    "ref": pull_request.get("head_ref"),
                    "sha": sha,
                    "repo": {"full_name": pull_request.get("head_repo")},
                },
                "base": {"ref": pull_request.get("base_ref"), "repo": {"full_name": pull_request.get("base_repo")}},
            },
            "repository": repo,
            "sender": {"login": actor},
        }
    return {"ref": ref, "after": sha, "repository": repo, "pusher": {"name": actor}, "sender": {"login": actor}}


def push_actor(push: PushContext) -> str:
    """``github.actor``: who pushed; the repository owner when the push came without a webhook."""
    return push.actor or push.repo_full_name.split("/", 1)[0]


def push_event(push: PushContext) -> dict[str, Any]:
    """``github.event``: the bounded webhook payload, or a minimal one built from the push."""
    if push.event_payload is not None:
        return push.event_payload
    pr = push.pull_request.model_dump() if push.pull_request is not None else None
    event = minimal_event(push.event, push.ref, push.commit_sha, push.repo_full_name, push_actor(push), pr)
    if push.inputs:
        # As on GitHub: ``github.event.inputs`` holds text; the ``inputs`` context keeps types.
        event["inputs"] = {k: to_text(v) for k, v in push.inputs.items()}
    return event


def push_github_context(push: PushContext, run_id: str, workflow_name: str) -> dict[str, Any]:
    """The ``github`` context of a push's run, as far as it is known before a job runs (the job
    adds its workspace, attempt and job id): the one source for job ``if:`` and the job itself."""
    github = github_context(push.commit_sha, push.ref, push.repo_full_name, run_id, workflow_name)
    actor = push_actor(push)
    github.update(
        event_name=push.event,
        event=push_event(push),
        actor=actor,
        triggering_actor=actor,
        head_ref=push.pull_request.head_ref if push.pull_request else "",
        base_ref=push.pull_request.base_ref if push.pull_request else "",
    )
    return github
