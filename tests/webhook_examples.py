"""GitHub's own webhook payload examples (the npm package ``@octokit/webhooks-examples``,
fetched by ``npm pack`` from the registry into a cache once), for tests that deliver real
payload shapes: ``example(event, action)`` is a copy with the repository, commits and refs a
test names put where GitHub puts them."""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

from tests.npm_cache import CACHE, packed_file

PACKAGE = "@octokit/webhooks-examples@7.6.1"


@cache
def _examples() -> dict[str, list[dict[str, Any]]]:
    target = packed_file(PACKAGE, "api.github.com/index.json", CACHE / "octokit-webhooks-examples-7.6.1.json")
    return {entry["name"]: entry["examples"] for entry in json.loads(target.read_text())}


def example(event: str, action: str | None = None) -> dict[str, Any]:
    """The first example GitHub documents for ``event`` (with ``action``), a deep copy."""
    for found in _examples()[event]:
        if action is None or found.get("action") == action:
            return copy.deepcopy(found)
    raise KeyError(f"no {event} example with action {action!r}")


def for_repository(payload: dict[str, Any], full_name: str) -> dict[str, Any]:
    """``payload`` about ``full_name``: its ``repository`` (and a pull request's base repo)."""
    owner = full_name.split("/")[0]
    payload["repository"]["full_name"] = full_name
    payload["repository"]["name"] = full_name.split("/")[1]
    payload["repository"]["owner"]["login"] = owner
    pr = payload.get("pull_request")
    if isinstance(pr, dict):
        pr["base"]["repo"]["full_name"] = full_name
    return payload
