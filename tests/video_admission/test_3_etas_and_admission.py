"""ETAs, the queue explanation, capacity refusals and capacity signals with real workers."""

from __future__ import annotations

import time
from typing import Any

import httpx

from leasehold.devserver import free_port
from testing.harness import start_api
from tests.video_admission.conftest import (
    FREE_CAP,
    SLOW_STEPS,
    AdmissionStack,
    Caller,
    body,
    cancel_all,
    create,
    get,
    wait_until,
)


def _in_progress(caller: Caller, video_id: str) -> bool:
    return get(caller, video_id)["status"] == "in_progress"


def test_etas_follow_the_queue_and_rise_when_workers_vanish(admission_stack: AdmissionStack) -> None:
    while len(admission_stack.gpus) < 2:
        admission_stack.add_gpu()
    owner = admission_stack.caller("paid")
    waiting = admission_stack.caller("paid")
    slow = [create(owner, steps=SLOW_STEPS, prompt=f"long take {i}")["id"] for i in range(2)]
    queued: list[str] = []
    try:
        for video_id in slow:
            wait_until(lambda v=video_id: _in_progress(owner, v), 60, "slow jobs running")
        queued = [create(waiting, prompt=f"short {i}")["id"] for i in range(2)]
        figures = wait_until(
            lambda: (f := admission_stack.capacity(owner))["running"] == 2 and f["queued"] >= 2 and f,
            20,
            "two running, two queued",
        )
        assert figures["workers_serving"] == 2
        # Step times are measured from the running jobs' heartbeats.
        last = wait_until(
            lambda: (v := get(waiting, queued[-1]))["queue"] and v["queue"]["ahead"] == 1 and v,
            20,
            "the last job sees one job ahead",
        )
        assert last["status"] == "queued"
        assert last["eta_seconds"] > 0
        assert last["estimated_start_at"] <= last["estimated_completion_at"]
        assert last["queue"]["position"] == 2
        assert last["queue"]["workers_serving"] == 2
        assert "1 job(s) ahead" in last["queue"]["reason"]
        response = waiting.http.get(f"/v1/videos/{queued[-1]}")
        eta = response.json()["eta_seconds"]
        assert int(response.headers["openai-poll-after-ms"]) == int(min(30_000, max(500, eta * 100)))
        running = get(owner, slow[0])
        assert running["status"] == "in_progress" and running["queue"] is None
        assert running["eta_seconds"] > 0 and running["estimated_start_at"] <= time.time() + 1

        before = get(waiting, queued[-1])["estimated_completion_at"]
        # A third... here half of the fleet is reclaimed: the preemption notice.
        gone = admission_stack.gpus.pop()
        gone.signal(15)
        gone.proc.wait(timeout=60)  # type: ignore[union-attr]
        wait_until(lambda: admission_stack.capacity(owner)["workers_serving"] == 1, 60, "one worker left")
        after = wait_until(
            lambda: (v := get(waiting, queued[-1]))["estimated_completion_at"] > before + 2 and v,
            60,
            "ETA of the waiting job rose",
        )
        assert after["queue"]["workers_serving"] == 1
    finally:
        cancel_all(owner, slow)
        cancel_all(waiting, queued)


def _error(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


def test_free_tier_is_refused_past_the_wait_threshold_and_capped(admission_stack: AdmissionStack) -> None:
    if not admission_stack.gpus:
        admission_stack.add_gpu()
    owner = admission_stack.caller("paid")
    slow = [create(owner, steps=SLOW_STEPS, prompt=f"hold {i}")["id"] for i in range(len(admission_stack.gpus) + 1)]
    # A second API on the same deployment whose free tier tolerates only a few seconds of wait.
    strict_settings = admission_stack.settings.model_copy(
        update={"api_port": free_port(), "video_free_max_wait_seconds": 3.0}
    )
    strict, strict_url = start_api(strict_settings, admission_stack.logs / "strict")
    free = admission_stack.caller("free")
    free_jobs: list[str] = []
    try:
        strict.wait_healthy(60)
        wait_until(lambda: _in_progress(owner, slow[0]), 60, "slow job running")
        refused = wait_until(
            lambda: (
                (
                    r := httpx.post(f"{strict_url}/v1/videos", json=body(), headers=free.http.headers, timeout=30)
                ).status_code
                == 503
                and r
            ),
            30,
            "free submit refused for capacity",
            interval=0.5,
        )
        error = _error(refused)
        assert error["code"] == "capacity"
        assert int(refused.headers["Retry-After"]) == error["retry_after"] >= 1
        assert "paid" in error["message"]
        # Paid is still accepted on the same API.
        paid = httpx.post(f"{strict_url}/v1/videos", json=body(), headers=owner.http.headers, timeout=30)
        assert paid.status_code == 200, paid.text
        slow.append(paid.json()["id"])
        strict_capacity = httpx.get(f"{strict_url}/v1/capacity", headers=owner.http.headers, timeout=30).json()
        assert strict_capacity["data"][0]["admitting_free"] is False
        # The default threshold (30 minutes) admits free jobs, up to the free tier's cap.
        free_jobs = [create(free, prompt=f"free {i}")["id"] for i in range(FREE_CAP)]
        over = free.http.post("/v1/videos", json=body())
        assert over.status_code == 429, over.text
        assert _error(over)["limit"] == FREE_CAP
    finally:
        cancel_all(free, free_jobs)
        cancel_all(owner, slow)
        strict.stop()
