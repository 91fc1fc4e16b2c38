"""Before any GPU worker polls the model: honest ETAs, refusals, the per-user cap, capacity."""

from __future__ import annotations

import concurrent.futures

import httpx

from tests.video_admission.conftest import (
    METRICS_TOKEN,
    PAID_CAP,
    AdmissionStack,
    body,
    cancel_all,
    create,
    get,
    wait_until,
)


def test_no_worker_means_no_eta_and_a_reason(admission_stack: AdmissionStack) -> None:
    paid = admission_stack.caller("paid")
    video = create(paid)
    try:
        # Accepted (paid jobs wait for a worker), but with no number invented.
        assert video["status"] == "queued"
        assert video["eta_seconds"] is None
        assert "no worker" in video["eta_reason"]
        seen = get(paid, video["id"])
        assert seen["eta_seconds"] is None and seen["estimated_completion_at"] is None
        assert "no worker" in seen["eta_reason"]
        assert seen["queue"]["workers_serving"] == 0
        assert seen["queue"]["position"] >= 1
        assert "no worker" in seen["queue"]["reason"]
    finally:
        cancel_all(paid, [video["id"]])


def test_free_submit_for_an_unserved_model_is_a_clear_503(admission_stack: AdmissionStack) -> None:
    free = admission_stack.caller("free")
    response = free.http.post("/v1/videos", json=body())
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "model_unavailable"
    assert "no worker" in error["message"]
    assert int(response.headers["Retry-After"]) == error["retry_after"] > 0
    listed = free.http.get("/v1/videos").json()
    assert listed["data"] == []


def test_per_user_cap_is_429_and_creates_nothing(admission_stack: AdmissionStack) -> None:
    paid = admission_stack.caller("paid")
    colleague = admission_stack.caller("paid", tenant_id=paid.tenant_id)
    keyed = paid.http.post("/v1/videos", json=body(prompt="shot 0"), headers={"Idempotency-Key": "shot-0"})
    assert keyed.status_code == 200, keyed.text
    ids = [keyed.json()["id"], *(create(paid, prompt=f"shot {i}")["id"] for i in range(1, PAID_CAP))]
    try:
        over = paid.http.post("/v1/videos", json=body(prompt="one too many"))
        assert over.status_code == 429, over.text
        error = over.json()["error"]
        assert error["code"] == "too_many_queued"
        assert error["queued"] == PAID_CAP and error["limit"] == PAID_CAP
        assert str(PAID_CAP) in error["message"]
        # Nothing was created: the listing shows exactly the accepted jobs.
        listed = wait_until(
            lambda: (
                (data := paid.http.get("/v1/videos", params={"limit": 100}).json()["data"])
                and len(data) >= PAID_CAP
                and data
            ),
            10,
            "accepted jobs listed",
        )
        assert sorted(v["id"] for v in listed) == sorted(ids)
        assert all(v["prompt"] != "one too many" for v in listed)
        # The cap is per user: a colleague in the same tenant still gets in.
        theirs = create(colleague)
        cancel_all(colleague, [theirs["id"]])
        # A replay of an existing job (same Idempotency-Key) is not a new job: answered, not refused.
        replay = paid.http.post("/v1/videos", json=body(prompt="shot 0"), headers={"Idempotency-Key": "shot-0"})
        assert replay.status_code == 200, replay.text
        assert replay.json()["id"] == ids[0]
        # Once a job leaves the queue, the user may submit again.
        cancel_all(paid, ids[:1])
        again = wait_until(
            lambda: (r := paid.http.post("/v1/videos", json=body(prompt="after a cancel"))).status_code == 200 and r,
            20,
            "a submit after a slot freed up",
            interval=0.5,
        )
        ids.append(again.json()["id"])
    finally:
        cancel_all(paid, ids)


def test_concurrent_submits_cannot_pass_the_cap(admission_stack: AdmissionStack) -> None:
    paid = admission_stack.caller("paid")
    with httpx.Client(base_url=admission_stack.base_url, headers=paid.http.headers, timeout=30) as client:
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            responses = list(pool.map(lambda i: client.post("/v1/videos", json=body(prompt=f"race {i}")), range(8)))
    accepted = [r.json()["id"] for r in responses if r.status_code == 200]
    try:
        assert len(accepted) == PAID_CAP, [r.status_code for r in responses]
        assert sorted(r.status_code for r in responses if r.status_code != 200) == [429] * (8 - PAID_CAP)
    finally:
        cancel_all(paid, accepted)


def test_capacity_endpoint_and_gauges_without_workers(admission_stack: AdmissionStack) -> None:
    paid = admission_stack.caller("paid")
    ids = [create(paid)["id"] for _ in range(2)]
    try:
        figures = wait_until(
            lambda: (f := admission_stack.capacity(paid))["queued"] >= 2 and f, 15, "queued jobs measured"
        )
        assert figures["workers_serving"] == 0
        assert figures["workers_polling"] == 0
        assert figures["expected_wait_seconds"] == {"paid": None, "free": None}
        assert figures["admitting_free"] is False
        assert figures["backlog"] >= 0 and figures["oldest_queued_age_seconds"] >= 0
        # Two jobs waiting and no worker: Little's law asks for at least one.
        assert figures["workers_needed"] >= 1
        metrics = httpx.get(
            f"{admission_stack.base_url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
        ).text
        assert 'leasehold_video_workers_serving{model="procedural-v1"} 0.0' in metrics
        assert 'leasehold_video_workers_needed{model="procedural-v1"}' in metrics
        assert 'leasehold_video_expected_wait_seconds{model="procedural-v1",tier="free"} +Inf' in metrics
        assert admission_stack.api.alive()
        anonymous = httpx.get(f"{admission_stack.base_url}/v1/capacity")
        assert anonymous.status_code == 401
    finally:
        cancel_all(paid, ids)
