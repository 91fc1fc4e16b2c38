"""GPU classes through the real API and worker processes: routing by memory, per-class
capacity, the fallback to a larger class when a class has no live worker, and the 400 for a
job no class holds. Two CPU workers declare different memory (``--memory-gib``)."""

from __future__ import annotations

import time
from typing import Any

from tests.video_classes.conftest import (
    BIG_JOB,
    LARGE_GIB,
    LONG_JOB,
    SMALL_GIB,
    SMALL_JOB,
    WIDE_JOB,
    Caller,
    ClassStack,
    body,
)

QUEUE_SMALL = "video.procedural-v1.small"
QUEUE_LARGE = "video.procedural-v1.large"


def wait_until(check: Any, timeout: float, what: str, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not reached in {timeout}s (last: {last!r})")


def create(caller: Caller, job: tuple[str, int], **fields: Any) -> dict[str, Any]:
    response = caller.http.post("/v1/videos", json=body(job, **fields))
    assert response.status_code == 200, response.text
    return response.json()


def status(caller: Caller, video_id: str) -> dict[str, Any]:
    response = caller.http.get(f"/v1/videos/{video_id}")
    assert response.status_code == 200, response.text
    return response.json()


def completed(caller: Caller, video_id: str) -> bool:
    video = status(caller, video_id)
    assert video["status"] not in ("failed", "cancelled"), video
    return video["status"] == "completed"


def test_capacity_per_class_and_jobs_routed_by_memory(class_stack: ClassStack) -> None:
    caller = class_stack.caller()
    both = wait_until(
        lambda: (
            (c := class_stack.capacity(caller))
            and c.get("small", {}).get("workers_serving") == 1
            and c.get("large", {}).get("workers_serving") == 1
            and c
        ),
        90,
        "both classes measured with their worker",
    )
    # One entry per class of the model (none for an unclassed queue), with the class's memory.
    assert set(both) == {"small", "large"}
    assert abs(both["small"]["gpu_memory_gib"] - SMALL_GIB) < 1e-6
    assert abs(both["large"]["gpu_memory_gib"] - LARGE_GIB) < 1e-6

    small = create(caller, SMALL_JOB)
    big = create(caller, BIG_JOB)
    for video in (small, big):
        wait_until(lambda v=video: completed(caller, v["id"]), 60, f"{video['id']} completed")
    prefix = class_stack.settings.queue_prefix
    small_queue, small_worker = class_stack.generated_on(small["id"])
    big_queue, big_worker = class_stack.generated_on(big["id"])
    assert small_queue == prefix + QUEUE_SMALL
    assert f"-gpu-small-{class_stack.gpu('small').pid}@" in small_worker
    assert big_queue == prefix + QUEUE_LARGE
    assert f"-gpu-large-{class_stack.gpu('large').pid}@" in big_worker
    # The classes' own figures: each completion counted on its class.
    after = wait_until(
        lambda: (
            (c := class_stack.capacity(caller))
            and c["small"]["completion_rate_per_minute"] > 0
            and c["large"]["completion_rate_per_minute"] > 0
            and c
        ),
        20,
        "completions counted per class",
    )
    assert after["small"]["queued"] == after["large"]["queued"] == 0


def test_a_job_no_class_holds_is_400_naming_the_field(class_stack: ClassStack) -> None:
    caller = class_stack.caller()
    too_long = caller.http.post("/v1/videos", json=body(LONG_JOB))
    assert too_long.status_code == 400, too_long.text
    error = too_long.json()["error"]
    assert error["code"] == "video_too_large" and error["param"] == "seconds"
    assert "large" in error["message"] and "Traceback" not in too_long.text
    too_wide = caller.http.post("/v1/videos", json=body(WIDE_JOB))
    assert too_wide.status_code == 400, too_wide.text
    assert too_wide.json()["error"]["param"] == "size"
    assert too_wide.json()["error"]["required_gib"] > LARGE_GIB
    # Nothing was created for either.
    assert caller.http.get("/v1/videos").json()["data"] == []


def test_eta_is_that_of_the_jobs_class(class_stack: ClassStack) -> None:
    caller = class_stack.caller()
    # Measured serving first: a small job sent while no small worker is measured falls back to
    # the large class (by design), and this test would have no busy small worker.
    wait_until(
        lambda: (c := class_stack.capacity(caller).get("small", {})).get("workers_serving") == 1 and c["running"] == 0,
        60,
        "the small worker is measured idle",
    )
    # The small worker is busy with a long job; the large one is idle.
    slow = create(caller, SMALL_JOB, steps=1000)
    waiting: dict[str, Any] | None = None
    try:
        wait_until(lambda: class_stack.capacity(caller)["small"]["running"] == 1, 60, "the small worker busy")
        waiting = create(caller, SMALL_JOB)
        seen = wait_until(
            lambda: (v := status(caller, waiting["id"]))["queue"] is not None and v["eta_seconds"] is not None and v,
            20,
            "an ETA for the waiting job",
        )
        # It waits for its own class's worker: the idle large worker is not counted for it.
        assert seen["status"] == "queued"
        assert seen["queue"]["workers_serving"] == 1
        assert "on small GPUs" in seen["queue"]["reason"] and "busy" in seen["queue"]["reason"]
        capacity = wait_until(
            lambda: (c := class_stack.capacity(caller))["small"]["queued"] == 1 and c,
            10,
            "the waiting job measured on its class",
        )
        assert capacity["small"]["running"] == 1
        assert capacity["large"]["queued"] == capacity["large"]["running"] == 0
    finally:
        for video in (slow, waiting):
            if video is not None:
                caller.http.post(f"/v1/videos/{video['id']}/cancel")
        # Cancelled means the worker stopped (the workflow waits for it): the next test starts idle.
        for video in (slow, waiting):
            if video is not None:
                wait_until(lambda v=video: status(caller, v["id"])["status"] == "cancelled", 30, "cancelled")


def test_small_job_falls_back_to_large_when_small_has_no_worker(class_stack: ClassStack) -> None:
    caller = class_stack.caller()
    # Idle, as measured: no job of an earlier test still counts as running on it.
    wait_until(
        lambda: (c := class_stack.capacity(caller)["small"])["workers_serving"] == 1 and c["running"] == 0,
        60,
        "the small worker is measured idle",
    )
    # Keep the small worker busy, then reclaim it (SIGTERM: the preemption notice). A busy worker
    # does not poll, so it drops out of the count as soon as its job stops heartbeating.
    slow = create(caller, SMALL_JOB, steps=1000)
    try:
        wait_until(lambda: status(caller, slow["id"])["status"] == "in_progress", 60, "the slow job started")
        # Measured busy: from here its last poll, which came before the job, does not count.
        wait_until(lambda: class_stack.capacity(caller)["small"]["running"] == 1, 30, "the small worker measured busy")
        gone = class_stack.gpu("small")
        gone.signal(15)
        gone.proc.wait(timeout=60)  # type: ignore[union-attr]
        wait_until(
            lambda: class_stack.capacity(caller)["small"]["workers_serving"] == 0, 30, "the small class has no worker"
        )
        moved = create(caller, SMALL_JOB)
        wait_until(lambda: completed(caller, moved["id"]), 60, "the small job completed on the large worker")
        queue, worker = class_stack.generated_on(moved["id"])
        assert queue == class_stack.settings.queue_prefix + QUEUE_LARGE
        assert f"-gpu-large-{class_stack.gpu('large').pid}@" in worker
        # The preempted job stays on its own class's queue: it waits for a small worker.
        assert status(caller, slow["id"])["status"] in ("queued", "in_progress")
    finally:
        caller.http.post(f"/v1/videos/{slow['id']}/cancel")
