"""The webhook tables on SQLite and Postgres: ownership, the secret sealed, one delivery per
(endpoint, job, event) with a stable id, and the attempt log."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text
from temporalio.testing import ActivityEnvironment

from activities.video.webhooks import UNSIGNABLE, VideoWebhookActivities, WebhookSender
from leasehold.database import init_database
from leasehold.records.ci.secrets import Keyring
from leasehold.records.video.webhooks import (
    DeliveryStatus,
    TooManyEndpoints,
    create_endpoint,
    delete_endpoint,
    delivery_target,
    get_endpoint,
    list_deliveries,
    list_endpoints,
    record_attempt,
    record_event,
)
from leasehold.standard_webhooks import secret_key
from leasehold.webhook_urls import AddressPolicy
from tests.conftest import sqlite_url
from workflows.video.types import VideoEventInput, VideoEventType, VideoJobState, VideoRequest, VideoStatus

KEYRING = Keyring({"k1": b"\x07" * 32}, "k1")


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path)
    return str(request.getfixturevalue("postgres_url"))


def test_endpoints_deliveries_and_owners(db_url: str) -> None:
    db = init_database(db_url)
    info, secret = create_endpoint(db, KEYRING, "t1", "u1", "https://hooks.example/a", 2)
    assert secret.startswith("whsec_") and len(secret_key(secret)) == 32
    create_endpoint(db, KEYRING, "t1", "u1", "https://hooks.example/b", 2)
    with pytest.raises(TooManyEndpoints):
        create_endpoint(db, KEYRING, "t1", "u1", "https://hooks.example/c", 2)
    other, _ = create_endpoint(db, KEYRING, "t2", "u1", "https://hooks.example/t2", 2)

    # The secret is stored sealed, never as written.
    with db() as session:
        dump = repr(session.execute(text("SELECT * FROM video_webhook_endpoints")).all())
    assert secret not in dump and secret.removeprefix("whsec_") not in dump

    assert [e.url for e in list_endpoints(db, "t1", "u1")] == ["https://hooks.example/a", "https://hooks.example/b"]
    assert get_endpoint(db, "t2", "u1", info.id) is None
    assert get_endpoint(db, "t1", "u2", info.id) is None

    first = record_event(db, "t1", "u1", "job-1", "video.completed", '{"x":1}')
    assert len(first) == 2
    # A retried trigger finds the same deliveries: the webhook-id is stable.
    assert record_event(db, "t1", "u1", "job-1", "video.completed", '{"x":1}') == first
    target = delivery_target(db, KEYRING, first[0])
    assert target is not None and target.body == '{"x":1}' and target.status == DeliveryStatus.PENDING
    assert target.secret.startswith("whsec_")

    record_attempt(db, first[0], {"at": 1.0, "status_code": 500, "error": None}, DeliveryStatus.PENDING)
    record_attempt(db, first[0], {"at": 2.0, "status_code": 204, "error": None}, DeliveryStatus.DELIVERED)
    assert record_event(db, "t1", "u1", "job-1", "video.completed", '{"x":1}') == first[1:]
    deliveries = list_deliveries(db, "t1", "u1", info.id, 10)
    assert deliveries is not None and len(deliveries) == 1
    (mine,) = deliveries
    assert mine.id in first and mine.job_id == "job-1" and mine.event_type == "video.completed"
    if mine.id == first[0]:
        assert mine.status == DeliveryStatus.DELIVERED
        assert [a["status_code"] for a in mine.attempts] == [500, 204]
    else:
        assert (mine.status, mine.attempts) == (DeliveryStatus.PENDING, [])

    # Another tenant sees neither the endpoint's log nor can delete it; it has its own events.
    assert list_deliveries(db, "t2", "u1", info.id, 10) is None
    assert not delete_endpoint(db, "t2", "u1", info.id)
    assert record_event(db, "t2", "u1", "job-1", "video.completed", "{}") != first
    assert list_deliveries(db, "t2", "u1", other.id, 10) is not None

    assert delete_endpoint(db, "t1", "u1", info.id)
    assert get_endpoint(db, "t1", "u1", info.id) is None
    # Its log went with it; the other endpoint's delivery stays.
    assert delivery_target(db, KEYRING, mine.id) is None
    (left,) = [d for d in first if d != mine.id]
    assert delivery_target(db, KEYRING, left) is not None


def test_a_keyring_that_cannot_open_the_secret_fails_the_delivery_visibly(tmp_path: Path) -> None:
    db = init_database(sqlite_url(tmp_path))
    endpoint, _ = create_endpoint(db, KEYRING, "t1", "u1", "https://hooks.example/a", 5)
    other = Keyring({"k2": b"\x08" * 32}, "k2")
    activities = VideoWebhookActivities(db, other, WebhookSender(AddressPolicy(), ["https"], 1.0))
    env = ActivityEnvironment()
    now = datetime(2026, 12, 1, tzinfo=UTC)
    state = VideoJobState(
        job_id="video_k",
        tenant_id="t1",
        user_id="u1",
        tier="paid",
        request=VideoRequest(prompt="p", model="procedural-v1", seconds=4, width=720, height=1280, seed=1),
        request_hash="h",
        status=VideoStatus.COMPLETED,
        created_at=now,
        completed_at=now,
    )
    result = env.run(activities.deliver_video_event, VideoEventInput(state=state, event_type=VideoEventType.COMPLETED))
    assert (result.delivered, result.failed) == (0, 1)
    (delivery,) = list_deliveries(db, "t1", "u1", endpoint.id, 10) or []
    assert delivery.status == DeliveryStatus.FAILED
    assert delivery.attempts[0]["error"] == UNSIGNABLE
