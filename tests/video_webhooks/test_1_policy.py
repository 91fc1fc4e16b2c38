"""The address policy and the sender without the stack: what a tenant's URL may reach, and that
a delivery connects to the address that was checked (a real loopback receiver)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from activities.video.webhooks import WebhookSender, event_body
from leasehold.records.video.webhooks import DeliveryTarget, new_secret
from leasehold.standard_webhooks import sign, verify
from leasehold.webhook_urls import AddressPolicy, RefusedUrl, parse_url
from tests.video_webhooks.stack import Receiver
from workflows.video.types import VideoJobState, VideoRequest, VideoStatus

DEFAULT = AddressPolicy()


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.9.9.9",
        "::1",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",
        "fe80::1",
        "fd00::1",
        "100.64.0.1",
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "ff02::1",
        "240.0.0.1",
        "255.255.255.255",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "64:ff9b::a9fe:a9fe",
        "2002:7f00:1::",
        "not-an-address",
    ],
)
def test_default_policy_refuses_non_public_addresses(address: str) -> None:
    assert not DEFAULT.allows(address)


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_default_policy_allows_public_unicast(address: str) -> None:
    assert DEFAULT.allows(address)


def test_operator_allowance_is_exact() -> None:
    policy = AddressPolicy(["127.0.0.1/32"])
    assert policy.allows("127.0.0.1")
    assert policy.allows("::ffff:127.0.0.1")
    assert not policy.allows("127.0.0.2")
    assert not policy.allows("::1")
    assert not policy.allows("10.0.0.1")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/",
        "file:///etc/passwd",
        "https://user:pw@example.com/",
        "https://",
        "https://example.com/a b",
        "https://example.com/\r\nX-Injected: 1",
        "https://example.com:99999/",
        "https://example.com/#frag",
        "https://" + "a" * 2100 + ".com/",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(RefusedUrl):
        parse_url(url, ["https"])


def test_http_only_when_the_operator_allows_it() -> None:
    with pytest.raises(RefusedUrl):
        parse_url("http://example.com/", ["https"])
    assert parse_url("http://example.com/x?y=1", ["http", "https"]).target == "/x?y=1"


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/",
        "https://[::1]/",
        "https://[::ffff:10.1.2.3]/",
        "https://169.254.169.254/",
        "https://localhost/",
    ],
)
def test_literal_addresses_are_refused_at_registration(url: str) -> None:
    with pytest.raises(RefusedUrl):
        DEFAULT.check_literal(parse_url(url, ["https"]))


def test_every_resolved_address_is_checked() -> None:
    url = parse_url("https://hooks.example/", ["https"])
    # A name that resolves to one public and one private address is refused as a whole.
    with pytest.raises(RefusedUrl, match=r"10\.0\.0\.5"):
        DEFAULT.resolve(url, lambda host, port: ["93.184.216.34", "10.0.0.5"])
    with pytest.raises(RefusedUrl):
        DEFAULT.resolve(url, lambda host, port: [])
    assert DEFAULT.resolve(url, lambda host, port: ["93.184.216.34"]) == "93.184.216.34"
    # Numeric spellings resolve to what they mean.
    with pytest.raises(RefusedUrl, match=r"127\.0\.0\.1"):
        DEFAULT.resolve(parse_url("https://2130706433/", ["https"]))


def test_signature_matches_the_spec_example() -> None:
    # The example of the Standard Webhooks reference libraries.
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    msg_id = "msg_p5jXN8AQM9LWM0D4loKWxJek"
    body = '{"test": 2432232314}'
    assert sign(secret, msg_id, 1614265330, body) == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    assert verify(
        secret,
        msg_id,
        "1614265330",
        "v1,bad v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        body.encode(),
        1614265330,
    )
    assert not verify(
        secret, msg_id, "1614265330", sign(secret, msg_id, 1614265330, body + " "), body.encode(), 1614265330
    )
    assert not verify(
        secret, msg_id, "1614265330", sign(secret, msg_id, 1614265330, body), body.encode(), 1614265330 + 600
    )


def _target(url: str, secret: str) -> DeliveryTarget:
    return DeliveryTarget(id="msg_test", url=url, secret=secret, body=json.dumps({"type": "t"}), status="pending")


def test_sender_pins_the_checked_address_and_follows_no_redirect() -> None:
    receiver = Receiver()
    try:
        secret = new_secret()
        lookups: list[str] = []

        def resolver(host: str, port: int) -> list[str]:
            lookups.append(host)
            return ["127.0.0.1"]

        sender = WebhookSender(AddressPolicy(["127.0.0.1/32"]), ["http"], 5.0, resolver)
        # A name nothing else could resolve: the request can only arrive through the checked address.
        entry, _ = sender.send(_target(f"http://hooks.invalid:{receiver.port}/pinned", secret))
        assert entry["ok"] and entry["status_code"] == 204, entry
        assert lookups == ["hooks.invalid"]
        (got,) = receiver.at("/pinned")
        assert got.headers["host"] == f"hooks.invalid:{receiver.port}"
        assert verify(
            secret,
            got.headers["webhook-id"],
            got.headers["webhook-timestamp"],
            got.headers["webhook-signature"],
            got.body,
            time.time(),
        )

        # A redirect is an answer, not an instruction.
        receiver.redirects["/moved"] = receiver.url("/elsewhere")
        entry, retryable = sender.send(_target(receiver.url("/moved"), secret))
        assert entry["status_code"] == 302 and not entry["ok"] and retryable
        assert receiver.at("/elsewhere") == []

        # A body that never ends is not read: the attempt is over once the status is in.
        receiver.huge.add("/huge")
        started = time.monotonic()
        entry, _ = sender.send(_target(receiver.url("/huge"), secret))
        assert entry["ok"] and entry["status_code"] == 200
        assert time.monotonic() - started < 5

        # A refused address is never connected to and is not retried.
        default_sender = WebhookSender(DEFAULT, ["http"], 5.0)
        before = len(receiver.requests)
        entry, retryable = default_sender.send(_target(receiver.url("/refused"), secret))
        assert not entry["ok"] and not retryable and entry["error"].startswith("refused")
        assert len(receiver.requests) == before
    finally:
        receiver.close()


def test_event_body_of_a_failed_job() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    state = VideoJobState(
        job_id="video_x",
        tenant_id="t",
        user_id="u",
        tier="paid",
        request=VideoRequest(prompt="p", model="procedural-v1", seconds=4, width=720, height=1280, seed=1),
        request_hash="h",
        status=VideoStatus.FAILED,
        created_at=now,
        completed_at=now,
        error_code="GenerationFailed",
        error_message="out of memory",
    )
    event = json.loads(event_body(state, "video.failed"))
    assert event["type"] == "video.failed" and event["timestamp"] == "2026-12-01T12:00:00Z"
    data = event["data"]
    assert (data["id"], data["status"], data["size"], data["seconds"]) == ("video_x", "failed", "720x1280", "4")
    assert data["error"] == {"code": "GenerationFailed", "message": "out of memory"}
    # Nothing of the tenant's internals: no tenant, user or request hash.
    assert not {"tenant_id", "user_id", "request_hash"} & set(data)
