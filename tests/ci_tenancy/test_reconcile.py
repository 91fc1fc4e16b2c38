"""Lost webhooks: with no webhook installed, a push reaches CI through the reconciler (the schedule
the CI worker created, run here on demand); a later delivery of the same push creates nothing
new, and a second pass finds nothing to do. Branches no workflow watches are not pushed."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from api.ci.signatures import signature_of
from clients.ci.start import reconcile_schedule_id
from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import WORKFLOW_PATH, done_push, wait_for, wait_run
from workflows.ci.reconcile import CIReconcileWorkflow
from workflows.ci.types.reconcile import ReconcileInput, ReconcileResult
from workflows.queues import orchestration_queue

pytestmark = pytest.mark.slow

WATCHED = """
name: watched
on:
  push:
    branches: [main, 'release/**']
jobs:
  build:
    runs-on: linux
    steps: [{run: echo reconciled}]
"""


async def reconcile(env: WorkflowEnvironment, stack: CIStack, repo_id: str, n: int) -> ReconcileResult:
    prefix = stack.settings.queue_prefix
    return await env.client.execute_workflow(
        CIReconcileWorkflow.run,
        ReconcileInput(queue_prefix=prefix, repo_ids=[repo_id]),
        id=f"{prefix}test-reconcile-{repo_id}-{n}",
        task_queue=orchestration_queue(prefix),
        execution_timeout=timedelta(seconds=120),
    )


def runs_of(client: httpx.Client, repo_id: str) -> list[str]:
    response = client.get("/v1/runs", params={"repo": repo_id})
    assert response.status_code == 200, response.text
    return [r["id"] for r in response.json()["data"]]


async def test_reconciler_creates_missed_runs_once(tenancy: CIStack, temporal_env: WorkflowEnvironment) -> None:
    # The CI worker scheduled the reconciler at start, at the configured interval.
    schedule = await temporal_env.client.get_schedule_handle(
        reconcile_schedule_id(tenancy.settings.queue_prefix)
    ).describe()
    (interval,) = schedule.schedule.spec.intervals
    assert interval.every == timedelta(seconds=tenancy.settings.ci_reconcile_interval_seconds)

    client = tenancy.new_tenant()
    remote = tenancy.git_remote()
    repo_id, name, secret = tenancy.register(client, remote, hook=False)  # the webhook is "lost"
    remote.write(WORKFLOW_PATH, WATCHED)
    sha = remote.commit("missed")
    remote.push()
    remote.push("HEAD:refs/heads/docs")  # no workflow watches it
    assert remote.deliveries() == []

    first = await reconcile(temporal_env, tenancy, repo_id, 1)
    assert first.errors == {}
    assert [(p.ref, p.commit_sha) for p in first.pushes] == [("refs/heads/main", sha)]
    (rid,) = await asyncio.to_thread(wait_for, "the reconciled run", lambda: runs_of(client, repo_id))
    run = await asyncio.to_thread(wait_run, client, rid)
    assert run["status"] == "success" and run["commit_sha"] == sha and run["ref"] == "refs/heads/main"

    # The webhook shows up after all (a host redelivery): same push, no second run.
    body = json.dumps(
        {"ref": "refs/heads/main", "after": sha, "repository": {"full_name": name, "id": repo_id}}
    ).encode()
    delivered = client.post(
        "/v1/hooks/github",
        content=body,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "push",
            "X-Hub-Signature-256": signature_of(secret, body),
        },
    )
    assert delivered.status_code == 202, delivered.text
    (accepted,) = delivered.json()["pushes"]
    assert accepted["id"] == first.pushes[0].push_id
    push = await asyncio.to_thread(wait_for, "the push", lambda: done_push(client, accepted["id"]))
    assert [r["run_id"] for r in push["runs"]] == [rid]
    assert runs_of(client, repo_id) == [rid]

    # Nothing changed since: a second pass pushes nothing.
    second = await reconcile(temporal_env, tenancy, repo_id, 2)
    assert second.pushes == [] and second.errors == {}
    assert runs_of(client, repo_id) == [rid]


SRC_ONLY = """
on:
  push:
    branches: [main]
    paths: ['src/**']
jobs:
  build:
    runs-on: linux
    steps: [{run: echo src}]
"""


async def test_reconciled_pushes_keep_paths_filters(tenancy: CIStack, temporal_env: WorkflowEnvironment) -> None:
    client = tenancy.new_tenant()
    remote = tenancy.git_remote()
    repo_id, _, _ = tenancy.register(client, remote, hook=False)
    remote.write(".github/workflows/src.yml", SRC_ONLY)
    remote.write("src/app.py", "1\n")
    remote.commit("first")
    remote.push()
    first = await reconcile(temporal_env, tenancy, repo_id, 1)
    assert first.errors == {} and len(first.pushes) == 1
    (rid,) = await asyncio.to_thread(wait_for, "the reconciled run", lambda: runs_of(client, repo_id))

    # A missed docs-only push: the reconciler diffs it against the head it saw last, so the
    # paths filter holds as a webhook's before would have made it hold.
    remote.write("docs/guide.md", "1\n")
    sha = remote.commit("docs")
    remote.push()
    second = await reconcile(temporal_env, tenancy, repo_id, 2)
    assert second.errors == {}
    assert [(p.ref, p.commit_sha) for p in second.pushes] == [("refs/heads/main", sha)]
    push = await asyncio.to_thread(wait_for, "the push", lambda: done_push(client, second.pushes[0].push_id))
    assert push["runs"] == [] and push["not_triggered"] == [".github/workflows/src.yml"], push
    assert runs_of(client, repo_id) == [rid]

    # Two missed commits (src, then docs): the diff is since the head seen last, not only the
    # last commit, so the src change triggers.
    remote.write("src/app.py", "2\n")
    remote.commit("src")
    remote.write("docs/guide.md", "2\n")
    remote.commit("docs again")
    remote.push()
    third = await reconcile(temporal_env, tenancy, repo_id, 3)
    assert third.errors == {} and len(third.pushes) == 1
    push = await asyncio.to_thread(wait_for, "the push", lambda: done_push(client, third.pushes[0].push_id))
    assert [r["workflow_path"] for r in push["runs"]] == [".github/workflows/src.yml"], push
