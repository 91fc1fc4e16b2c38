"""Reserved and preemptible capacity through the real API and worker processes: paid jobs go to
reserved workers first and free jobs to preemptible ones, each is handed to the other type when
its own has no free worker (a schedule-to-start timeout, no queue of our own), and
``/v1/capacity`` counts the workers of each type."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from leasehold.settings import Settings
from tests.fleet.conftest import SMALL, CapacityStack, completed, create, status, wait_until
from worker_gpu.main import MissingCapacityType, capacity_type

RESERVED = "video.procedural-v1@reserved"
PREEMPTIBLE = "video.procedural-v1@preemptible"


def test_tiers_go_to_their_capacity_type_first(capacity_stack: CapacityStack) -> None:
    paid, free = capacity_stack.caller("paid"), capacity_stack.caller("free")

    def both_measured() -> dict[str, Any] | None:
        figures = capacity_stack.capacity(paid)
        return figures if figures["workers_by_capacity"] == {"reserved": 1, "preemptible": 1} else None

    figures = wait_until(both_measured, 90, "one worker of each capacity type measured")
    assert figures["workers_serving"] == 2
    paid_job, free_job = create(paid), create(free)
    for http, job in ((paid, paid_job), (free, free_job)):
        wait_until(partial(completed, http, job["id"]), 60, f"{job['id']} completed")
    prefix = capacity_stack.settings.queue_prefix
    ((paid_queue, paid_worker, _),) = capacity_stack.generations(paid_job["id"])
    ((free_queue, free_worker, _),) = capacity_stack.generations(free_job["id"])
    assert paid_queue == prefix + RESERVED
    assert f"-gpu-reserved-{capacity_stack.gpu('reserved').pid}@" in paid_worker
    assert free_queue == prefix + PREEMPTIBLE
    assert f"-gpu-preemptible-{capacity_stack.gpu('preemptible').pid}@" in free_worker


def test_a_paid_job_spills_to_preemptible_when_reserved_is_busy(capacity_stack: CapacityStack) -> None:
    paid = capacity_stack.caller("paid")

    def both_idle() -> bool:
        figures = capacity_stack.capacity(paid)
        return figures["workers_by_capacity"] == {"reserved": 1, "preemptible": 1} and figures["running"] == 0

    wait_until(both_idle, 60, "both workers measured idle")
    slow = create(paid, steps=1000)
    try:
        wait_until(lambda: status(paid, slow["id"])["status"] == "in_progress", 60, "the slow job started")
        spilled = create(paid)
        wait_until(lambda: completed(paid, spilled["id"]), 60, "the second paid job completed")
        prefix = capacity_stack.settings.queue_prefix
        legs = capacity_stack.generations(spilled["id"])
        # Scheduled on reserved, not taken there within the fallback wait, then run on preemptible.
        assert [(q, e) for q, _w, e in legs] == [(prefix + RESERVED, "timed_out"), (prefix + PREEMPTIBLE, "completed")]
        assert f"-gpu-preemptible-{capacity_stack.gpu('preemptible').pid}@" in legs[1][1]
        assert status(paid, slow["id"])["status"] == "in_progress"
    finally:
        paid.post(f"/v1/videos/{slow['id']}/cancel")
        wait_until(lambda: status(paid, slow["id"])["status"] == "cancelled", 30, "cancelled")


def test_a_worker_must_declare_the_capacity_type_its_deployment_has(capacity_stack: CapacityStack) -> None:
    split = capacity_stack.settings
    with pytest.raises(MissingCapacityType, match="--capacity-type"):
        capacity_type(split.model_copy(update={"gpu_capacity_type": None}))
    unsplit = Settings(**{**split.model_dump(), "video_capacity_types": False, "gpu_capacity_type": "reserved"})
    with pytest.raises(MissingCapacityType, match="LEASEHOLD_VIDEO_CAPACITY_TYPES"):
        capacity_type(unsplit)
    assert capacity_type(split.model_copy(update={"gpu_capacity_type": "preemptible"})) == "preemptible"


def test_refusals_count_each_capacity_type(capacity_stack: CapacityStack) -> None:
    """Last in this module: it reclaims the stack's workers."""
    free = capacity_stack.caller("free")
    for name in ("preemptible", "reserved"):
        gone = capacity_stack.gpu(name)
        gone.signal(15)  # the preemption notice
        assert gone.proc is not None
        gone.proc.wait(timeout=60)

    def none_left() -> bool:
        return bool(capacity_stack.capacity(free)["workers_by_capacity"] == {"reserved": 0, "preemptible": 0})

    # An idle worker that left stays among the pollers until its last poll is 75 s old.
    wait_until(none_left, 120, "both capacity types measured empty")
    refused = free.post("/v1/videos", json={**SMALL, "steps": 3})
    assert refused.status_code == 503, refused.text
    error = refused.json()["error"]
    assert error["code"] == "model_unavailable"
    assert "(0 reserved, 0 preemptible workers)" in error["message"] and "Traceback" not in refused.text
