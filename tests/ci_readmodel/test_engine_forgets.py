"""The engine is no longer the record of CI: a run pushed for real (``git push`` -> signed webhook
-> push -> run on a real CI worker) is deleted from Temporal once closed, with its push, and
the API still serves over HTTP the run and its jobs, the run listing, the push, and the full
log of every job, on SQLite and on Postgres. Another tenant still gets 404."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from api.schemas.ci.runs import RunOut
from clients.ci.start import run_handle
from leasehold.database import init_database
from leasehold.records.ci.runs import get_run as get_run_record
from tests.ci_api.conftest import CIStack, running_ci_stack
from tests.ci_api.flows import get_run, job, push_workflow, sse_events, wait_run
from workflows.ci.ids import push_workflow_id, run_workflow_id
from workflows.ci.types.projection import snapshot_version

pytestmark = pytest.mark.slow

LINES = 3000
# Two jobs, outputs passed between them, and a log long enough to take several chunks.
CHAIN = f"""
name: chain
on:
  push:
    branches: [main]
jobs:
  build:
    runs-on: linux
    steps:
      - name: compile
        run: |
          echo "building ${{{{ github.sha }}}}"
          for i in $(seq 1 {LINES}); do echo "build line $i of the long log, padded to make chunks"; done
          echo "artifact=app-42" >> "$GITHUB_OUTPUT"
  test:
    needs: build
    runs-on: linux
    steps:
      - run: echo "testing ${{{{ needs.build.outputs.artifact }}}}"
"""


@pytest.fixture(params=["sqlite", "postgres"])
def stack(request: pytest.FixtureRequest, temporal_env: WorkflowEnvironment, tmp_path: Path) -> Iterator[CIStack]:
    # A finished run closes its workflow after one second (no retry window to wait out).
    extra: dict[str, Any] = {"ci_retry_window_seconds": 1.0}
    if request.param == "postgres":
        extra["database_url"] = request.getfixturevalue("postgres_url")
    with running_ci_stack(temporal_env, tmp_path, **extra) as running:
        running.start_workers()
        yield running


def full_log(client: httpx.Client, rid: str, job_id: str) -> str:
    """Every page of a job's log, following ``next_seq`` until the log has ended."""
    text: list[str] = []
    seq = 0
    for _ in range(1000):
        page = client.get(f"/v1/runs/{rid}/jobs/{job_id}/logs", params={"from_seq": seq})
        assert page.status_code == 200, page.text
        body = page.json()
        assert body["gaps"] == [], body["gaps"]
        text.extend(c["text"] for c in body["chunks"])
        seq = body["next_seq"]
        if body["ended"]:
            return "".join(text)
    raise AssertionError(f"the log of {job_id} never ended")


async def wait_closed(client: Client, workflow_id: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        description = await client.get_workflow_handle(workflow_id).describe()
        if description.status != WorkflowExecutionStatus.RUNNING:
            assert description.status == WorkflowExecutionStatus.COMPLETED, description.status
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{workflow_id} still running after {within}s")


async def delete_execution(client: Client, workflow_id: str, within: float = 60.0) -> None:
    """Delete the closed execution and wait until the engine no longer knows it."""
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=workflow_id)
        )
    )
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            await client.get_workflow_handle(workflow_id).describe()
        except RPCError as exc:
            assert exc.status == RPCStatusCode.NOT_FOUND, exc
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{workflow_id} still described {within}s after its deletion")


async def test_a_deleted_run_is_still_served_with_its_jobs_listing_and_logs(
    stack: CIStack, temporal_env: WorkflowEnvironment
) -> None:
    engine = temporal_env.client
    pushed = await asyncio.to_thread(push_workflow, stack, CHAIN)
    client, rid = pushed.client, pushed.run_id
    run = await asyncio.to_thread(wait_run, client, rid)
    assert run["status"] == "success", run

    await wait_closed(engine, run_workflow_id(rid))
    await wait_closed(engine, push_workflow_id(pushed.push_id))
    # The engine's own last word on the run, to hold the read model to.
    # The run's number is the read model's (kept beside the run when its push is listed).
    assert isinstance(run["run_number"], int) and run["run_number"] >= 1, run
    final = RunOut.from_state(await run_handle(engine, rid).result(), run_number=run["run_number"]).model_dump(
        mode="json"
    )
    logs_before = {j["id"]: await asyncio.to_thread(full_log, client, rid, j["id"]) for j in run["jobs"]}
    # The row's version carries the execution's start as the engine describes it (what a rebuild
    # of the read model from the engine uses), and the final history length is past it.
    described = await engine.get_workflow_handle(run_workflow_id(rid)).describe()
    record = get_run_record(init_database(stack.settings.resolved_database_url), client.tenant_id, rid)  # type: ignore[attr-defined]
    assert record is not None
    assert snapshot_version(described.start_time, 0) <= record.version
    assert record.version < snapshot_version(described.start_time, described.history_length or 0)

    await delete_execution(engine, run_workflow_id(rid))
    await delete_execution(engine, push_workflow_id(pushed.push_id))

    # The run and its jobs, exactly as the engine last had them.
    served = await asyncio.to_thread(get_run, client, rid)
    assert served == final
    assert [j["status"] for j in served["jobs"]] == ["success", "success"]
    assert job(served, "build")["outputs"] == {"artifact": "app-42"}

    # The listing, filtered and not.
    listed = client.get("/v1/runs", params={"repo": pushed.repo_id}).json()["data"]
    assert [(r["id"], r["status"], r["commit_sha"]) for r in listed] == [(rid, "success", pushed.sha)]
    assert rid in [r["id"] for r in client.get("/v1/runs", params={"status": "success"}).json()["data"]]
    page = client.get("/v1/runs", params={"limit": 1}).json()
    assert [r["id"] for r in page["data"]] == [rid] and not page["has_more"] and page["next_cursor"] is None
    bad = client.get("/v1/runs", params={"after": "not-a-cursor"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "after", bad.text

    # The push that made it.
    push = client.get(f"/v1/pushes/{pushed.push_id}")
    assert push.status_code == 200, push.text
    assert push.json()["status"] == "done" and [r["run_id"] for r in push.json()["runs"]] == [rid]

    # The full log of every job: every page, and the event stream of a finished attempt.
    build_log = await asyncio.to_thread(full_log, client, rid, "build")
    assert build_log == logs_before["build"]
    assert f"building {pushed.sha}" in build_log
    for i in (1, LINES // 2, LINES):
        assert f"build line {i} of the long log" in build_log
    assert build_log.count("of the long log") == LINES
    assert await asyncio.to_thread(full_log, client, rid, "test") == logs_before["test"]
    assert "testing app-42" in logs_before["test"]
    events = await asyncio.to_thread(sse_events, client, f"/v1/runs/{rid}/jobs/build/logs/stream")
    assert events[-1][1] == "end" and events[-1][2]["status"] == "success", events[-3:]
    assert "".join(data["text"] for _, kind, data in events if kind == "log") == build_log

    # Still another tenant's run: 404, like a run that never existed.
    other = stack.new_tenant()
    for url in (f"/v1/runs/{rid}", f"/v1/runs/{rid}/jobs/build/logs", f"/v1/pushes/{pushed.push_id}"):
        assert other.get(url).status_code == 404, url
    assert other.get("/v1/runs").json()["data"] == []
