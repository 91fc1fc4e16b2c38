"""Completion webhooks of video jobs: endpoints a user registered and the delivery log.

An endpoint belongs to one user of one tenant (the owner of the videos it hears about) and
holds a Standard Webhooks signing secret (``whsec_<base64>``), sealed with the secrets keyring
like every other secret: it is shown once, at registration, and only the delivery activity
opens it again. A delivery is one event (``video.completed`` / ``video.failed`` /
``video.cancelled``) of one job for one endpoint; its id is the ``webhook-id`` the receiver
sees, the same on every attempt, and there is at most one per (endpoint, job, event), so a
retried or replayed trigger never makes a second. Its attempts (time, status code, error) are
the log the API shows.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Index, LargeBinary, String, Text, UniqueConstraint, delete, func, select
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.records.base import Base, from_row, utcnow
from leasehold.records.ci.secrets import Keyring
from leasehold.records.versioned import dialect_insert

_AAD_VERSION = b"leasehold-video-webhook-v1"
SECRET_PREFIX = "whsec_"
# Random bytes of a signing secret (the spec asks for 24 to 64).
SECRET_BYTES = 32
# Attempts kept in one delivery's log (the retry policy makes fewer).
MAX_LOGGED_ATTEMPTS = 50


class DeliveryStatus:
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class _UsersRow:
    """What an endpoint row and a delivery row both have (a mixin): their id, whose they are,
    when they were made."""

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class VideoWebhookEndpoint(_UsersRow, Base):
    """One registered receiver of a user's video events."""

    __tablename__ = "video_webhook_endpoints"

    url: Mapped[str] = mapped_column(String(2048))
    secret_key_id: Mapped[str] = mapped_column(String(32))
    secret_nonce: Mapped[bytes] = mapped_column(LargeBinary)
    secret_ciphertext: Mapped[bytes] = mapped_column(LargeBinary)

    __table_args__ = (Index("ix_video_webhook_endpoints_owner", "tenant_id", "user_id"),)


class VideoWebhookDelivery(_UsersRow, Base):
    """One event for one endpoint; ``id`` is its ``webhook-id``."""

    __tablename__ = "video_webhook_deliveries"

    endpoint_id: Mapped[str] = mapped_column(String(40))
    job_id: Mapped[str] = mapped_column(String(64))
    event_type: Mapped[str] = mapped_column(String(32))
    # The exact body every attempt sends (and signs).
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    __table_args__ = (
        UniqueConstraint("endpoint_id", "job_id", "event_type", name="uq_video_webhook_deliveries_event"),
        Index("ix_video_webhook_deliveries_endpoint", "endpoint_id", "created_at"),
    )


@dataclass(frozen=True)
class EndpointInfo:
    """An endpoint as its owner sees it (never the secret)."""

    id: str
    url: str
    created_at: datetime


@dataclass(frozen=True)
class DeliveryInfo:
    """A delivery and its attempts."""

    id: str
    endpoint_id: str
    job_id: str
    event_type: str
    status: str
    attempts: list[dict[str, Any]]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class DeliveryTarget:
    """What one attempt needs: where, the secret to sign with, the body."""

    id: str
    url: str
    secret: str
    body: str
    status: str


class TooManyEndpoints(Exception):
    """The user already has the most endpoints allowed."""


def _aad(endpoint_id: str, tenant_id: str, user_id: str) -> bytes:
    return b"\x00".join([_AAD_VERSION, endpoint_id.encode(), tenant_id.encode(), user_id.encode()])


def new_secret() -> str:
    """A Standard Webhooks signing secret: ``whsec_`` and base64 of random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def _endpoint_info(row: VideoWebhookEndpoint) -> EndpointInfo:
    return from_row(EndpointInfo, row)


def _delivery_info(row: VideoWebhookDelivery) -> DeliveryInfo:
    return from_row(DeliveryInfo, row, attempts=list(row.attempts or []))


def create_endpoint(
    db: sessionmaker, keyring: Keyring, tenant_id: str, user_id: str, url: str, max_endpoints: int
) -> tuple[EndpointInfo, str]:
    """Register ``url`` for the user; returns the endpoint and its secret (shown this once)."""
    endpoint_id = "whep_" + secrets.token_hex(12)
    secret = new_secret()
    key_id, nonce, ciphertext = keyring.seal(_aad(endpoint_id, tenant_id, user_id), secret)
    with db.begin() as session:
        count = session.scalar(
            select(func.count())
            .select_from(VideoWebhookEndpoint)
            .where(VideoWebhookEndpoint.tenant_id == tenant_id, VideoWebhookEndpoint.user_id == user_id)
        )
        if (count or 0) >= max_endpoints:
            raise TooManyEndpoints()
        row = VideoWebhookEndpoint(
            id=endpoint_id,
            tenant_id=tenant_id,
            user_id=user_id,
            url=url,
            secret_key_id=key_id,
            secret_nonce=nonce,
            secret_ciphertext=ciphertext,
            created_at=utcnow(),
        )
        session.add(row)
        session.flush()
        return _endpoint_info(row), secret


def list_endpoints(db: sessionmaker, tenant_id: str, user_id: str) -> list[EndpointInfo]:
    with db() as session:
        rows = session.scalars(
            select(VideoWebhookEndpoint)
            .where(VideoWebhookEndpoint.tenant_id == tenant_id, VideoWebhookEndpoint.user_id == user_id)
            .order_by(VideoWebhookEndpoint.created_at, VideoWebhookEndpoint.id)
        ).all()
        return [_endpoint_info(row) for row in rows]


def _owned_endpoint(session: Any, tenant_id: str, user_id: str, endpoint_id: str) -> VideoWebhookEndpoint | None:
    return session.scalar(
        select(VideoWebhookEndpoint).where(
            VideoWebhookEndpoint.id == endpoint_id,
            VideoWebhookEndpoint.tenant_id == tenant_id,
            VideoWebhookEndpoint.user_id == user_id,
        )
    )


def get_endpoint(db: sessionmaker, tenant_id: str, user_id: str, endpoint_id: str) -> EndpointInfo | None:
    """The user's endpoint ``endpoint_id``; ``None`` if missing or someone else's."""
    with db() as session:
        row = _owned_endpoint(session, tenant_id, user_id, endpoint_id)
        return _endpoint_info(row) if row is not None else None


def delete_endpoint(db: sessionmaker, tenant_id: str, user_id: str, endpoint_id: str) -> bool:
    """Forget the endpoint and its delivery log; ``False`` if it is not the user's."""
    with db.begin() as session:
        row = _owned_endpoint(session, tenant_id, user_id, endpoint_id)
        if row is None:
            return False
        session.execute(delete(VideoWebhookDelivery).where(VideoWebhookDelivery.endpoint_id == endpoint_id))
        session.delete(row)
        return True


def list_deliveries(
    db: sessionmaker, tenant_id: str, user_id: str, endpoint_id: str, limit: int
) -> list[DeliveryInfo] | None:
    """The newest deliveries of the user's endpoint; ``None`` if the endpoint is not the user's."""
    with db() as session:
        if _owned_endpoint(session, tenant_id, user_id, endpoint_id) is None:
            return None
        rows = session.scalars(
            select(VideoWebhookDelivery)
            .where(VideoWebhookDelivery.endpoint_id == endpoint_id)
            .order_by(VideoWebhookDelivery.created_at.desc(), VideoWebhookDelivery.id.desc())
            .limit(limit)
        ).all()
        return [_delivery_info(row) for row in rows]


def record_event(db: sessionmaker, tenant_id: str, user_id: str, job_id: str, event_type: str, body: str) -> list[str]:
    """One delivery per endpoint of the job's owner (kept if it exists); the ids still pending.

    Idempotent: a retried or replayed call finds the deliveries the first one made, with their
    ids, so every attempt of one event carries one ``webhook-id``.
    """
    with db.begin() as session:
        endpoint_ids = session.scalars(
            select(VideoWebhookEndpoint.id).where(
                VideoWebhookEndpoint.tenant_id == tenant_id, VideoWebhookEndpoint.user_id == user_id
            )
        ).all()
        now = utcnow()
        for endpoint_id in endpoint_ids:
            session.execute(
                dialect_insert(session, VideoWebhookDelivery)
                .values(
                    id="msg_" + secrets.token_hex(12),
                    endpoint_id=endpoint_id,
                    tenant_id=tenant_id,
                    user_id=user_id,
                    job_id=job_id,
                    event_type=event_type,
                    body=body,
                    status=DeliveryStatus.PENDING,
                    attempts=[],
                    created_at=now,
                    updated_at=now,
                )
                .on_conflict_do_nothing(index_elements=["endpoint_id", "job_id", "event_type"])
            )
        pending = session.scalars(
            select(VideoWebhookDelivery.id)
            .where(
                VideoWebhookDelivery.job_id == job_id,
                VideoWebhookDelivery.event_type == event_type,
                VideoWebhookDelivery.tenant_id == tenant_id,
                VideoWebhookDelivery.status == DeliveryStatus.PENDING,
            )
            .order_by(VideoWebhookDelivery.id)
        ).all()
        return list(pending)


def delivery_target(db: sessionmaker, keyring: Keyring, delivery_id: str) -> DeliveryTarget | None:
    """The delivery with its endpoint's URL and opened secret; ``None`` once the endpoint is gone."""
    with db() as session:
        row = session.get(VideoWebhookDelivery, delivery_id)
        if row is None:
            return None
        endpoint = session.get(VideoWebhookEndpoint, row.endpoint_id)
        if endpoint is None:
            return None
        secret = keyring.open(
            endpoint.secret_key_id,
            endpoint.secret_nonce,
            endpoint.secret_ciphertext,
            _aad(endpoint.id, endpoint.tenant_id, endpoint.user_id),
        )
        return DeliveryTarget(id=row.id, url=endpoint.url, secret=secret, body=row.body, status=row.status)


def record_attempt(db: sessionmaker, delivery_id: str, attempt: dict[str, Any], status: str) -> None:
    """Append one attempt to the delivery's log and set its status."""
    with db.begin() as session:
        row = session.get(VideoWebhookDelivery, delivery_id)
        if row is None:
            return
        row.attempts = [*(row.attempts or []), attempt][-MAX_LOGGED_ATTEMPTS:]
        row.status = status
        row.updated_at = utcnow()
