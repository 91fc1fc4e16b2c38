"""Deployment approvals: a job naming a protected environment (here by an expression over
``github``, evaluated when the push is listed) waits in ``awaiting_approval`` until an approver
of its tenant approves (it runs) or rejects (it fails, its dependents are skipped); every
decision is kept for audit; a user outside the approvers is refused, another tenant sees 404;
cancelling the run while it waits cancels the job."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from leasehold.database import init_database
from leasehold.records.api_keys import create_key
from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import get_run, job, runs_of_push, wait_for, wait_run

pytestmark = pytest.mark.slow

DEPLOY = """
name: deploy
on: push
jobs:
  build:
    runs-on: linux
    steps: [{run: echo built}]
  deploy:
    needs: build
    runs-on: linux
    # Evaluated when the push is listed (a push to main), so its protection applies.
    environment: ${{ github.ref_name == 'main' && 'Production' || 'staging' }}
    steps: [{run: echo deployed}]
  notify:
    needs: deploy
    runs-on: linux
    steps: [{run: echo notified}]
"""


def awaiting(client: httpx.Client, rid: str) -> dict:
    return wait_for(
        f"{rid} to await approval",
        lambda: (r := get_run(client, rid)) and job(r, "deploy")["status"] == "awaiting_approval" and r,
    )


def test_approve_reject_cancel_and_audit(tenancy: CIStack) -> None:
    user = tenancy.new_tenant()
    tenant = user.tenant_id  # type: ignore[attr-defined]
    key = create_key(init_database(tenancy.settings.resolved_database_url), tenant, "approver", "paid")
    approver = httpx.Client(base_url=tenancy.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    remote = tenancy.git_remote()
    repo_id, _, _ = tenancy.register(user, remote)
    put = user.put(
        f"/v1/repos/{repo_id}/environments/production", json={"required_approval": True, "approvers": ["approver"]}
    )
    assert put.status_code == 200, put.text
    listed = user.get(f"/v1/repos/{repo_id}/environments").json()["data"]
    assert [(e["name"], e["required_approval"], e["approvers"]) for e in listed] == [("production", True, ["approver"])]

    # Three commits, three runs: one to approve, one to reject, one to cancel while waiting.
    remote.write(".github/workflows/ci.yml", DEPLOY)
    rids = []
    for n in range(3):
        remote.commit(f"release {n}")
        remote.push()
        (rid,) = runs_of_push(user, remote.deliveries()[-1].answer)
        rids.append(rid)
    to_approve, to_reject, to_cancel = rids

    waiting = awaiting(user, to_approve)
    assert job(waiting, "build")["status"] == "success" and job(waiting, "notify")["status"] == "waiting"
    assert job(waiting, "deploy")["environment"] == "Production" and job(waiting, "deploy")["attempts"] == []
    assert waiting["status"] != "success"
    # Not an approver (same tenant), another tenant, a job that is not waiting: refused.
    refused = user.post(f"/v1/runs/{to_approve}/jobs/deploy/approve")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "not_an_approver"
    other = tenancy.new_tenant().post(f"/v1/runs/{to_approve}/jobs/deploy/approve")
    assert other.status_code == 404
    early = approver.post(f"/v1/runs/{to_approve}/jobs/build/approve")
    assert early.status_code == 409 and early.json()["error"]["code"] == "job_not_awaiting_approval"

    approved = approver.post(f"/v1/runs/{to_approve}/jobs/deploy/approve", json={"comment": "ship it"})
    assert approved.status_code == 200, approved.text
    assert approved.json()["status"] in ("waiting", "queued", "in_progress", "success")

    awaiting(user, to_reject)
    rejected = approver.post(f"/v1/runs/{to_reject}/jobs/deploy/reject", json={"comment": "not today"})
    assert rejected.status_code == 200 and rejected.json()["status"] == "failure", rejected.text

    awaiting(user, to_cancel)
    assert user.post(f"/v1/runs/{to_cancel}/cancel").status_code == 202

    done = wait_run(user, to_approve)
    assert done["status"] == "success", done
    assert [job(done, j)["status"] for j in ("build", "deploy", "notify")] == ["success"] * 3
    (decision,) = job(done, "deploy")["approvals"]
    assert decision["decision"] == "approved" and decision["user_id"] == "approver"
    assert decision["comment"] == "ship it" and decision["environment"] == "Production" and decision["at"]
    assert decision["at"] <= job(done, "deploy")["started_at"]

    failed = wait_run(user, to_reject)
    assert failed["status"] == "failure"
    assert [job(failed, j)["status"] for j in ("build", "deploy", "notify")] == ["success", "failure", "skipped"]
    assert job(failed, "deploy")["error"] == "rejected by approver: not today"
    assert [(d["decision"], d["user_id"]) for d in job(failed, "deploy")["approvals"]] == [("rejected", "approver")]
    assert job(failed, "deploy")["attempts"] == []

    cancelled = wait_run(user, to_cancel)
    assert cancelled["status"] == "cancelled"
    assert job(cancelled, "deploy")["status"] == "cancelled" and job(cancelled, "deploy")["approvals"] == []
    assert job(cancelled, "notify")["status"] in ("cancelled", "skipped")


def test_cli_sets_and_lists_environments(tenancy: CIStack) -> None:
    client = tenancy.new_tenant()
    repo_id, _, _ = tenancy.register(client, tenancy.git_remote(), hook=False)
    tenant = client.tenant_id  # type: ignore[attr-defined]
    base = [sys.executable, "-m", "cli.main", "environments"]
    where = ["--data-dir", str(tenancy.settings.data_dir), "--tenant", tenant, "--repo", repo_id]
    done = subprocess.run([*base, "set", *where, "Staging", "--approver", "alice"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    listed = client.get(f"/v1/repos/{repo_id}/environments").json()["data"]
    assert [(e["name"], e["required_approval"], e["approvers"]) for e in listed] == [("Staging", True, ["alice"])]
    other = subprocess.run([*base, "list", *where[:3], "someone-else", *where[4:]], capture_output=True, text=True)
    assert other.returncode == 2 and "has no repository" in other.stderr
