"""actions/cache, natively: a branch reads its own scope then the default branch's, writes only its
own; restore-keys fall back by prefix; hashFiles keys; and another tenant with the same repository
name, workflow and lockfile finds nothing of tenant A's. actions/checkout is a no-op step."""

from __future__ import annotations

import hashlib
import re

import pytest

from leasehold.storage import open_store
from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import job, log_text, push_workflow, runs_of_push, wait_run

pytestmark = pytest.mark.slow

CACHED = """
name: cached
on: push
jobs:
  build:
    runs-on: linux
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-depth: 0
      - id: deps
        uses: actions/cache@v4
        with:
          path: |
            deps
            ~/.tool
          key: deps-${{ hashFiles('lock.txt') }}
          restore-keys: |
            deps-
      - run: |
          echo "hit=${{ steps.deps.outputs.cache-hit }}"
          echo "found=[$(cat deps/made-by 2>/dev/null || true)] tool=[$(cat ~/.tool/v 2>/dev/null || true)]"
          mkdir -p deps ~/.tool
          echo "$GITHUB_REF_NAME-$(cat lock.txt)" > deps/made-by
          echo tool-1 > ~/.tool/v
"""


def files_hash(*contents: bytes) -> str:
    """GitHub's hashFiles: SHA-256 over each matched file's SHA-256."""
    outer = hashlib.sha256()
    for content in contents:
        outer.update(hashlib.sha256(content).digest())
    return outer.hexdigest()


def seen(log: str) -> tuple[str, str, str]:
    hit = re.search(r"^hit=(\w*)$", log, re.M)
    found = re.search(r"^found=\[(.*)\] tool=\[(.*)\]$", log, re.M)
    assert hit and found, log
    return hit.group(1), found.group(1), found.group(2)


def test_branch_scopes_restore_keys_and_tenants(tenancy: CIStack) -> None:
    store = open_store(tenancy.settings)
    a = push_workflow(tenancy, CACHED, files={"lock.txt": "v1\n"})
    first = wait_run(a.client, a.run_id)
    first_log = log_text(a.client, a.run_id, "build")
    assert first["status"] == "success", first_log
    assert "actions/checkout@v4: the workspace already holds" in first_log
    assert seen(first_log) == ("false", "", "")
    key_v1 = "deps-" + files_hash(b"v1\n")
    assert f"cache {key_v1!r} saved" in first_log

    # Three runs at once: feature-a (same lockfile: exact hit from the default branch),
    # feature-b (new lockfile: the restore key finds main's entry), and tenant B.
    a.remote.commit("feature a")
    a.remote.push("HEAD:refs/heads/feature-a")
    a.remote.write("lock.txt", "v2\n")
    a.remote.commit("feature b")
    a.remote.push("HEAD:refs/heads/feature-b")
    feature_a, feature_b = (runs_of_push(a.client, d.answer)[0] for d in a.remote.deliveries()[-2:])
    b = push_workflow(tenancy, CACHED, files={"lock.txt": "v1\n"}, name=a.name)

    for client, rid in ((a.client, feature_a), (a.client, feature_b), (b.client, b.run_id)):
        run = wait_run(client, rid)
        assert job(run, "build")["status"] == "success", log_text(client, rid, "build")
    log_a = log_text(a.client, feature_a, "build")
    log_b = log_text(a.client, feature_b, "build")
    log_other = log_text(b.client, b.run_id, "build")
    assert seen(log_a) == ("true", "main-v1", "tool-1"), log_a
    assert "saved" not in log_a  # an exact hit is not saved again
    assert seen(log_b) == ("false", "main-v1", "tool-1"), log_b
    assert f"restored from {key_v1!r}" in log_b
    assert seen(log_other) == ("false", "", ""), "tenant B must not see tenant A's cache"

    def entries(tenant: str, repo: str) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for key in store.list(f"ci-cache/{tenant}/{repo}/"):
            scope, cache_key = key.split("/")[3:5], key.split("/")[5]
            found.setdefault("/".join(scope), []).append(cache_key)
        return found

    key_v2 = "deps-" + files_hash(b"v2\n")
    # Each branch wrote only its own scope; the default branch's entry is untouched.
    assert entries(a.client.tenant_id, a.repo_id) == {  # type: ignore[attr-defined]
        "heads/main": [key_v1],
        "heads/feature-b": [key_v2],
    }
    assert entries(b.client.tenant_id, b.repo_id) == {"heads/main": [key_v1]}  # type: ignore[attr-defined]
