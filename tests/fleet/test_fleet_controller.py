"""The fleet controller end to end, with the local provider: ``leasehold fleet run`` starts
and retires real GPU worker processes on a stack split into reserved and preemptible capacity.

A paid job keeps the one reserved worker busy; a burst of free jobs makes the controller start
preemptible workers; once the burst's short jobs are done and the paid job is cancelled, the
reserved worker has room for the one free job left, so the controller drains the preemptible
workers (idle first) and retires them. The long free job, running on a preemptible worker when
its worker is drained, is checkpointed, handed to the reserved worker and resumed there.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from leasehold.devserver import free_port
from leasehold.temporal import connect
from testing.harness import ManagedProcess, process_env
from testing.process_stack import ORCHESTRATION
from tests.fleet.conftest import CapacityStack, completed, create, status, wait_until
from workflows.fleet.controller import FleetWorkflow, fleet_workflow_id
from workflows.fleet.types import FleetState
from workflows.video.ids import workflow_id
from workflows.video.types import VideoJobState

PENDING_ACTIVITY_STATE_STARTED = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
RESERVED = "procedural-v1@reserved"
PREEMPTIBLE = "procedural-v1@preemptible"
SPEC = {
    "pools": [
        {"model": "procedural-v1", "capacity_type": "reserved", "min_workers": 1, "max_workers": 1},
        {"model": "procedural-v1", "capacity_type": "preemptible", "max_workers": 2, "gpu_hour_cost": 0.4},
    ],
    "target_wait_seconds": 2.0,
    # The burst is forgotten 20 s after its last job arrived (5 minutes in production).
    "arrival_window_seconds": 20.0,
    "tick_seconds": 1.0,
    "scale_down_after_ticks": 3,
}


class FleetStack(CapacityStack):
    fleet: ManagedProcess

    def state(self) -> FleetState:
        async def query() -> FleetState:
            client = await connect(self.settings)
            handle = client.get_workflow_handle(fleet_workflow_id(self.settings.queue_prefix))
            return await handle.query(FleetWorkflow.state)

        return asyncio.run(query())

    def job_state(self, job_id: str) -> VideoJobState:
        async def query() -> VideoJobState:
            client = await connect(self.settings)
            handle = client.get_workflow_handle(workflow_id(job_id), result_type=VideoJobState)
            return await handle.result()

        return asyncio.run(query())


@pytest.fixture
def fleet_stack(temporal_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetStack]:
    root = tmp_path_factory.mktemp("fleet-controller")
    with FleetStack.running(
        temporal_address,
        root,
        ORCHESTRATION,
        video_capacity_refresh_seconds=1.0,
        video_capacity_types=True,
        video_capacity_fallback_seconds=2.0,
        # About half a second per step of the small job: a burst that takes seconds, not minutes.
        video_step_pace_seconds_per_frame_megapixel=1.0,
    ) as stack:
        config = root / "fleet.json"
        config.write_text(json.dumps(SPEC))
        port = free_port()
        stack.fleet = ManagedProcess(
            "fleet",
            [sys.executable, "-m", "cli.main", "fleet", "run", "--config", str(config)],
            process_env(stack.settings, LEASEHOLD_METRICS_PORT=str(port)),
            stack.logs / "fleet.log",
            f"http://127.0.0.1:{port}/healthz",
        ).start()
        try:
            stack.fleet.wait_healthy(60)
            yield stack
        finally:
            stack.fleet.stop(timeout=60)


def console_fleet_page(stack: FleetStack) -> str:
    """``/console/fleet`` as a signed-in tenant sees it (the sign-in form, its CSRF token and
    Origin check included)."""
    _tenant, key = stack.new_key(tier="free")
    with httpx.Client(base_url=stack.base_url, timeout=10) as browser:
        anonymous = browser.get("/console/fleet")
        assert anonymous.status_code in (302, 303) and "/console/sign-in" in anonymous.headers["location"]
        form = browser.get("/console/sign-in").text
        token = re.search(r'name="csrf" value="([^"]+)"', form)
        assert token is not None
        signed = browser.post(
            "/console/sign-in",
            data={"api_key": key, "csrf": token.group(1)},
            headers={"Origin": stack.base_url},
        )
        assert signed.status_code in (302, 303), signed.text
        page = browser.get("/console/fleet")
        assert page.status_code == 200, page.text
        return page.text


def decided(stack: FleetStack, key: str, check: Any) -> list[Any]:
    return [(d, p) for d in stack.state().decisions for p in d.pools if p.key == key and check(d, p)]


def running_on(stack: FleetStack, job_id: str) -> str | None:
    """The identity of the worker generating the job now (the history names it only once the
    activity closes; the pending activity names it at once)."""

    async def describe() -> str | None:
        client = await Client.connect(stack.settings.temporal_address)
        desc = await client.get_workflow_handle(workflow_id(job_id)).describe()
        for pending in desc.raw_description.pending_activities:
            if pending.activity_type.name == "generate_video" and pending.state == PENDING_ACTIVITY_STATE_STARTED:
                return pending.last_worker_identity
        return None

    return asyncio.run(describe())


def test_scale_up_on_a_burst_then_drain_and_retire_with_a_job_resumed(fleet_stack: FleetStack) -> None:
    stack = fleet_stack
    paid, free = stack.caller("paid"), stack.caller("free")
    wait_until(lambda: stack.capacity(paid)["workers_by_capacity"] == {"reserved": 1, "preemptible": 0}, 120, "min 1")
    blocker = create(paid, steps=1000)
    wait_until(lambda: status(paid, blocker["id"])["status"] == "in_progress", 60, "the reserved worker busy")

    shorts = [create(free, steps=8) for _ in range(2)]
    long = create(free, steps=80)
    # The burst: free work waiting and no preemptible worker, so the controller starts two.
    grown = wait_until(lambda: decided(stack, PREEMPTIBLE, lambda d, p: d.started.get(PREEMPTIBLE)), 60, "scale-up")
    decision, pool = grown[0]
    assert pool.desired == 2 and pool.current == 0 and decision.started[PREEMPTIBLE] == 2
    assert pool.inputs["free_queued"] >= 1 and "free work needs" in pool.reason
    wait_until(lambda: stack.capacity(paid)["workers_by_capacity"]["preemptible"] == 2, 120, "two preemptible")
    for job in shorts:
        wait_until(partial(completed, free, job["id"]), 120, "short free jobs done")
    worker = wait_until(lambda: running_on(stack, long["id"]), 60, "the long job running")
    assert "-gpu-preemptible-" in worker
    # The API reads the read model, which trails the engine's pending activity by a write.
    wait_until(lambda: status(free, long["id"])["status"] == "in_progress", 30, "the long job shown in progress")

    # The paid job goes: the reserved worker has room for the free job left, so preemptible
    # capacity is drained (after the shrink is held three ticks) and retired.
    cancelled = paid.post(f"/v1/videos/{blocker['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text

    # The idle one may go first, while the paid job still holds the reserved worker.
    def all_drained() -> list[Any]:
        found = decided(stack, PREEMPTIBLE, lambda d, p: d.retired.get(PREEMPTIBLE))
        return found if sum(len(d.retired[PREEMPTIBLE]) for d, _p in found) == 2 else []

    drained = wait_until(all_drained, 90, "drain")
    decision, pool = drained[-1]
    assert pool.desired == 0 and "reserved spare 1" in pool.reason
    assert "shrink after 3 ticks" in pool.reason
    retired_pids = [int(name.rsplit("/", 1)[1]) for d, _p in drained for name in d.retired[PREEMPTIBLE]]
    # The busy worker (the long job's) went last: the idle one first.
    busy_pid = int(worker.split("-gpu-preemptible-")[1].split("@")[0])
    assert retired_pids[-1] == busy_pid and len(set(retired_pids)) == 2
    for pid in retired_pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # Checkpointed at the drain, handed to reserved, resumed there.
    wait_until(lambda: completed(free, long["id"]), 180, "the long job completed after the drain")
    legs = stack.generations(long["id"])
    prefix = stack.settings.queue_prefix
    assert legs[-1][0] == prefix + "video." + RESERVED
    assert legs[-1][2] == "completed" and "-gpu-reserved-" in legs[-1][1]
    result = stack.job_state(long["id"]).result
    assert result is not None and 0 < result.resumed_from_step < 80
    assert stack.capacity(paid)["workers_by_capacity"]["reserved"] == 1
    wait_until(lambda: stack.capacity(paid)["workers_by_capacity"]["preemptible"] == 0, 90, "none preemptible")
    # The console lists the decisions with their reasons and inputs, and no worker's name.
    html = console_fleet_page(stack)
    assert "procedural-v1@preemptible" in html and "drained and retired" in html and "started 2" in html
    assert "shrink after 3 ticks" in html and "free_queued=" in html
    assert str(busy_pid) not in html
    # Operators see the workers by name: ``leasehold fleet decisions``.
    shown = subprocess.run(
        [sys.executable, "-m", "cli.main", "fleet", "decisions", "--last", "50"],
        env=process_env(stack.settings),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert (
        f"procedural-v1@preemptible/{busy_pid}" in shown.stdout
        and "started 2 on procedural-v1@preemptible" in shown.stdout
    )
