"""Why is my job queued, through the real API, dev server and CI worker.

A tenant held at its cap (one slot, taken by a long job) pushes a run with a job the worker
serves and one whose labels no worker serves: the first explains that it waits for a slot,
first in line (the other is not ahead of it: the semaphore grants it nothing), the second that
no worker serves its labels, that it holds no slot, and which label sets are served. Another
tenant's run waits for an approval, for ``needs``, for a worker on its labels, and behind
another job in its concurrency group; it is never shown the first tenant's labels, and it gets
404 for that run.
"""

from __future__ import annotations

import httpx
import pytest

from leasehold.database import init_database
from leasehold.records.ci.plans import set_plan
from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import get_run, job, push_workflow, wait_for, wait_run

pytestmark = pytest.mark.slow

HOLD = """
name: hold
on: push
jobs:
  hold:
    runs-on: linux
    steps: [{run: "sleep 120"}]
"""

CAPPED = """
name: capped
on: push
jobs:
  plain:
    runs-on: linux
    steps: [{run: "true"}]
  gpu:
    runs-on: [linux, gpu-none]
    steps: [{run: "true"}]
"""

GATED = """
name: gated
on: push
jobs:
  deploy:
    runs-on: pool-none
    environment: Production
    steps: [{run: "true"}]
  after:
    needs: deploy
    runs-on: pool-none
    steps: [{run: "true"}]
  nowhere:
    runs-on: pool-none
    steps: [{run: "true"}]
  first:
    runs-on: pool-none
    concurrency: one-at-a-time
    steps: [{run: "true"}]
  second:
    runs-on: pool-none
    concurrency: one-at-a-time
    steps: [{run: "true"}]
"""


def reasons(j: dict) -> list[str]:
    return [w["reason"] for w in j["queue"]["waiting_for"]] if j["queue"] else []


def cancel(client: httpx.Client, rid: str) -> None:
    assert client.post(f"/v1/runs/{rid}/cancel").status_code == 202


def test_capped_tenant_and_unserved_labels(queue_stack: CIStack) -> None:
    capped = queue_stack.new_tenant()
    set_plan(init_database(queue_stack.settings.resolved_database_url), capped.tenant_id, 1.0, 1)  # type: ignore[attr-defined]
    hold = push_workflow(queue_stack, HOLD, client=capped)
    held = wait_for(
        "the holding job to run", lambda: (r := get_run(capped, hold.run_id))["status"] == "in_progress" and r
    )
    assert job(held, "hold")["queue"] is None, "a running job has no queue explanation"

    second = push_workflow(queue_stack, CAPPED, client=capped)
    try:
        both = wait_for(
            "one job to wait for the tenant's slot, the other for a worker",
            lambda: (
                (r := get_run(capped, second.run_id))
                and (job(r, "plain")["queue"] or {}).get("reason") == "tenant_cap"
                and (job(r, "gpu")["queue"] or {}).get("reason") == "no_worker"
                and r
            ),
        )
        plain, gpu = job(both, "plain")["queue"], job(both, "gpu")["queue"]
        assert (plain["slots_in_use"], plain["slot_limit"]) == (1, 1)
        assert "1 of 1 slots in use" in plain["message"]
        # The unserved job is not in line ahead of the served one.
        assert (plain["position"], plain["ahead"]) == (1, 0)
        assert gpu["position"] is None

        assert reasons(job(both, "plain")) == ["tenant_cap"]
        assert plain["labels_served"] is True
        assert reasons(job(both, "gpu")) == ["no_worker"]
        assert gpu["labels_served"] is False
        assert gpu["labels"] == ["linux", "gpu-none"]
        no_worker = gpu["waiting_for"][0]["message"]
        assert "no worker serves runs-on [gpu-none, linux]" in no_worker and "[linux]" in no_worker
        assert "holds no slot" in no_worker
        # Served among the tenant's own label sets; the deployment's listed pool has no worker.
        assert gpu["served_labels"] == [["linux"]]

        # The job endpoint answers the same.
        one = capped.get(f"/v1/runs/{second.run_id}/jobs/gpu")
        assert one.status_code == 200, one.text
        assert one.json()["queue"]["reason"] == "no_worker" and reasons(one.json()) == ["no_worker"]
        assert capped.get(f"/v1/runs/{second.run_id}/jobs/nope").status_code == 404

        # Another tenant: 404 for the run and its jobs, like a missing one.
        other = queue_stack.new_tenant()
        for path in (f"/v1/runs/{second.run_id}", f"/v1/runs/{second.run_id}/jobs/gpu"):
            answer = other.get(path)
            assert answer.status_code == 404, answer.text
            assert "gpu-none" not in answer.text
    finally:
        cancel(capped, hold.run_id)
        cancel(capped, second.run_id)
    assert wait_run(capped, second.run_id)["status"] == "cancelled"


def test_approval_needs_and_worker_explanations(queue_stack: CIStack) -> None:
    tenant = queue_stack.new_tenant()

    def protect(client: httpx.Client, repo_id: str) -> None:
        put = client.put(f"/v1/repos/{repo_id}/environments/production", json={"required_approval": True})
        assert put.status_code == 200, put.text

    pushed = push_workflow(queue_stack, GATED, client=tenant, before_push=protect)
    try:
        try:
            run = wait_for(
                "the run's jobs to wait",
                lambda: (
                    (r := get_run(tenant, pushed.run_id))
                    and job(r, "deploy")["status"] == "awaiting_approval"
                    and job(r, "nowhere")["status"] == "queued"
                    and (job(r, "nowhere")["queue"] or {}).get("reason") == "no_worker"
                    and {(job(r, j)["queue"] or {}).get("reason") for j in ("first", "second")}
                    == {"no_worker", "concurrency_group"}
                    and r
                ),
            )
        except AssertionError as exc:
            # Say where each job stood, not only that the wait ran out.
            r = get_run(tenant, pushed.run_id)
            seen = {j["id"]: (j["status"], j.get("error"), reasons(j)) for j in r["jobs"]}
            raise AssertionError(f"{exc}; jobs: {seen}") from None
        deploy, after, nowhere = job(run, "deploy"), job(run, "after"), job(run, "nowhere")
        assert reasons(deploy) == ["approval", "no_worker"]
        assert "'Production'" in deploy["queue"]["message"] and deploy["queue"]["environment"] == "Production"
        assert reasons(after) == ["needs", "no_worker"]
        assert after["queue"]["needs"] == ["deploy"]
        assert after["queue"]["message"] == "waiting for deploy (awaiting_approval)"
        # Queued under its (default, roomy) cap: it waits only for a worker, and holds no slot
        # (nor does any other job of the tenant: none of their labels has a worker).
        assert reasons(nowhere) == ["no_worker"]
        assert nowhere["queue"]["position"] is None and nowhere["queue"]["slots_in_use"] == 0
        # One of the two group members holds the group (and waits for a worker); the other
        # waits in the group behind it.
        inside, behind = sorted((job(run, "first"), job(run, "second")), key=lambda j: reasons(j)[0] != "no_worker")
        assert reasons(behind) == ["concurrency_group", "no_worker"]
        assert behind["queue"]["concurrency_group"] == "one-at-a-time"
        running_in_it = f"{pushed.run_id} (job {inside['id']}) is running in it"
        assert behind["queue"]["message"] == f"this job waits in concurrency group 'one-at-a-time': {running_in_it}"
        # The worker pool serving ``linux`` is never named to this tenant: none of its jobs
        # asks for it and the deployment lists only ``big+linux`` (which has no worker).
        for j in (deploy, after, nowhere, inside, behind):
            assert j["queue"]["served_labels"] == []
        assert "linux" not in nowhere["queue"]["message"]
    finally:
        cancel(tenant, pushed.run_id)
    assert wait_run(tenant, pushed.run_id)["status"] == "cancelled"
