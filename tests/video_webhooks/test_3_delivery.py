"""Completion webhooks end to end: the API, the orchestration and GPU workers as real processes,
a real loopback receiver that verifies Standard Webhooks signatures."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from leasehold.standard_webhooks import verify
from tests.video_webhooks.stack import Receiver, Stack, create_video, wait_until


def register(client: httpx.Client, url: str) -> dict[str, Any]:
    response = client.post("/v1/webhooks", json={"url": url})
    assert response.status_code == 201, response.text
    return dict(response.json())


def deliveries(client: httpx.Client, endpoint_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/webhooks/{endpoint_id}/deliveries")
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def test_registration_checks_the_url_and_hides_the_secret(stack: Stack) -> None:
    alice, mallory = stack.caller(), stack.caller()
    for url in [
        "ftp://example.com/hook",
        "http://user:pw@example.com/hook",
        "http://10.0.0.1/hook",
        "http://127.0.0.2/hook",
        "http://[::1]/hook",
        "http://[::ffff:10.0.0.1]/hook",
        "http://[::ffff:127.0.0.2]/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://example.com/\r\nX-Evil: 1",
    ]:
        response = alice.post("/v1/webhooks", json={"url": url})
        assert response.status_code == 400, (url, response.text)
        assert response.json()["error"]["param"] == "url", response.text
    assert alice.post("/v1/webhooks", json={"url": "https://example.com/", "x": 1}).status_code == 422
    assert alice.post("/v1/webhooks", json={"url": "x" * 5000}).status_code == 422
    assert stack.caller().post(
        "/v1/webhooks", content=b"{", headers={"content-type": "application/json"}
    ).status_code in (
        400,
        422,
    )
    assert httpx.post(f"{stack.base_url}/v1/webhooks", json={"url": "https://example.com/"}).status_code == 401

    endpoint = register(alice, "https://hooks.example.com/video")
    assert endpoint["secret"].startswith("whsec_")
    listed = alice.get("/v1/webhooks").json()["data"]
    assert [e["id"] for e in listed] == [endpoint["id"]]
    assert all(e["secret"] is None for e in listed)
    assert alice.get(f"/v1/webhooks/{endpoint['id']}").json()["secret"] is None

    # Another tenant cannot see, read the log of, or delete it; it looks missing.
    assert mallory.get("/v1/webhooks").json()["data"] == []
    for method, path in [
        ("GET", f"/v1/webhooks/{endpoint['id']}"),
        ("GET", f"/v1/webhooks/{endpoint['id']}/deliveries"),
        ("DELETE", f"/v1/webhooks/{endpoint['id']}"),
    ]:
        response = mallory.request(method, path)
        assert response.status_code == 404, (method, path, response.text)
        assert "Traceback" not in response.text
    assert alice.delete(f"/v1/webhooks/{endpoint['id']}").json()["deleted"] is True
    assert alice.get(f"/v1/webhooks/{endpoint['id']}").status_code == 404


def test_completed_video_is_delivered_signed_once_per_endpoint(stack: Stack, receiver: Receiver) -> None:
    alice, bob = stack.caller(), stack.caller()
    endpoint = register(alice, receiver.url("/alice"))
    bob_endpoint = register(bob, receiver.url("/bob"))
    video = create_video(alice, steps=4)

    (got,) = wait_until(lambda: receiver.at("/alice"), 90, "the completion webhook")
    headers = got.headers
    assert verify(
        endpoint["secret"],
        headers["webhook-id"],
        headers["webhook-timestamp"],
        headers["webhook-signature"],
        got.body,
        time.time(),
    )
    # Bob's secret does not verify it: each endpoint signs with its own.
    assert not verify(
        bob_endpoint["secret"],
        headers["webhook-id"],
        headers["webhook-timestamp"],
        headers["webhook-signature"],
        got.body,
        time.time(),
    )
    event = json.loads(got.body)
    assert event["type"] == "video.completed"
    assert event["data"]["id"] == video["id"] and event["data"]["status"] == "completed"
    assert headers["content-type"] == "application/json"

    log = wait_until(
        lambda: [d for d in deliveries(alice, endpoint["id"]) if d["status"] == "delivered"], 30, "the delivery log"
    )
    (delivery,) = log
    assert delivery["id"] == headers["webhook-id"]
    assert (delivery["type"], delivery["video_id"]) == ("video.completed", video["id"])
    assert [a["status_code"] for a in delivery["attempts"]] == [204]
    # Bob hears nothing of Alice's video.
    time.sleep(1)
    assert receiver.at("/bob") == []
    assert deliveries(bob, bob_endpoint["id"]) == []


def test_a_failing_receiver_gets_the_same_webhook_id_again(stack: Stack, receiver: Receiver) -> None:
    alice = stack.caller()
    receiver.statuses["/flaky"] = [503, 204]
    endpoint = register(alice, receiver.url("/flaky"))
    video = create_video(alice, steps=4)

    first, second = wait_until(
        lambda: receiver.at("/flaky")[:2] if len(receiver.at("/flaky")) >= 2 else None, 120, "a retry"
    )
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert first.body == second.body
    assert json.loads(second.body)["data"]["id"] == video["id"]
    for got in (first, second):
        headers = got.headers
        assert verify(
            endpoint["secret"],
            headers["webhook-id"],
            headers["webhook-timestamp"],
            headers["webhook-signature"],
            got.body,
            time.time(),
        )
    # Back-off: the retry came after the policy's first interval.
    assert second.at - first.at >= 1.5
    (delivery,) = wait_until(
        lambda: [d for d in deliveries(alice, endpoint["id"]) if d["status"] == "delivered"], 30, "the delivered log"
    )
    assert [a["status_code"] for a in delivery["attempts"]] == [503, 204]


def test_cancelled_video_is_announced(stack: Stack, receiver: Receiver) -> None:
    alice = stack.caller()
    register(alice, receiver.url("/cancelled"))
    video = create_video(alice, steps=1000)
    wait_until(lambda: alice.get(f"/v1/videos/{video['id']}").json()["status"] == "in_progress", 60, "the start")
    assert alice.post(f"/v1/videos/{video['id']}/cancel").status_code == 200
    (got,) = wait_until(lambda: receiver.at("/cancelled"), 60, "the cancel webhook")
    event = json.loads(got.body)
    assert (event["type"], event["data"]["id"], event["data"]["status"]) == (
        "video.cancelled",
        video["id"],
        "cancelled",
    )
    assert event["data"]["error"]["code"]


def test_refused_addresses_redirects_and_huge_answers(stack: Stack, receiver: Receiver) -> None:
    alice = stack.caller()
    # A name (not a literal) that resolves to a loopback address outside the allowance: only
    # the resolution at delivery can refuse it. A receiver there proves nothing was sent.
    trap = Receiver("127.0.0.2")
    try:
        refused = register(alice, f"http://2130706434:{trap.port}/trap")
        receiver.redirects["/redirect"] = receiver.url("/redirect-target")
        redirected = register(alice, receiver.url("/redirect"))
        receiver.huge.add("/huge")
        huge = register(alice, receiver.url("/huge"))
        create_video(alice, steps=4)

        (refused_log,) = wait_until(
            lambda: [d for d in deliveries(alice, refused["id"]) if d["status"] == "failed"], 90, "the refusal"
        )
        (attempt,) = refused_log["attempts"]
        assert attempt["status_code"] is None and "127.0.0.2" in attempt["error"], attempt
        assert trap.requests == []

        (redirect_log,) = wait_until(
            lambda: [d for d in deliveries(alice, redirected["id"]) if d["attempts"]], 30, "the redirect attempt"
        )
        assert redirect_log["attempts"][0]["status_code"] == 302
        assert redirect_log["status"] != "delivered"
        assert receiver.at("/redirect-target") == []

        (huge_log,) = wait_until(
            lambda: [d for d in deliveries(alice, huge["id"]) if d["status"] == "delivered"], 30, "the huge answer"
        )
        assert huge_log["attempts"][0]["status_code"] == 200
        assert huge_log["attempts"][0]["duration_ms"] < 5000
    finally:
        trap.close()
