"""GitHub's own webhook payload examples (the npm package ``@octokit/webhooks-examples``,
fetched by ``npm pack`` from the registry into a cache once), for tests that deliver real
payload shapes: ``example(event, action)`` is a copy with the repository, commits and refs a
test names put where GitHub puts them."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import tarfile
from functools import cache
from pathlib import Path
from typing import Any

PACKAGE = "@octokit/webhooks-examples@7.6.1"
CACHE = Path(os.environ.get("LEASEHOLD_TEST_CACHE", Path.home() / ".cache" / "leasehold-tests"))


@cache
def _examples() -> dict[str, list[dict[str, Any]]]:
    target = CACHE / "octokit-webhooks-examples-7.6.1.json"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["npm", "pack", PACKAGE, "--silent", "--pack-destination", str(target.parent)],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        archive = target.parent / done.stdout.strip().splitlines()[-1]
        with tarfile.open(archive) as tar:
            source = tar.extractfile("package/api.github.com/index.json")
            assert source is not None
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(source.read())
            tmp.replace(target)
        archive.unlink()
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
