"""``/v1/webhooks``: endpoints that hear when the caller's videos end, and their delivery logs.

An endpoint belongs to the caller (tenant and user: the owner of the videos it hears about)
and receives ``video.completed``, ``video.failed`` and ``video.cancelled``, signed per
Standard Webhooks with the ``whsec_`` secret shown once, in the answer to its registration.
Another caller's endpoint answers 404 like a missing one. See ``docs/webhooks.md``.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from api.deps import DbDep, KeyringDep, PrincipalDep, SettingsDep
from api.errors import ApiError, invalid, not_found
from api.schemas.objects import ObjectList
from leasehold.records.video.webhooks import (
    DeliveryInfo,
    EndpointInfo,
    TooManyEndpoints,
    create_endpoint,
    delete_endpoint,
    get_endpoint,
    list_deliveries,
    list_endpoints,
)
from leasehold.webhook_urls import MAX_URL_LENGTH, AddressPolicy, RefusedUrl, parse_url

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])

EVENT_TYPES = ["video.completed", "video.failed", "video.cancelled"]


class WebhookCreate(BaseModel):
    """Register a receiver."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=MAX_URL_LENGTH)


class WebhookEndpoint(BaseModel):
    id: str
    object: Literal["webhook_endpoint"] = "webhook_endpoint"
    url: str
    events: list[str] = Field(default_factory=lambda: list(EVENT_TYPES))
    created_at: int
    # Only in the answer to the registration.
    secret: str | None = None

    @classmethod
    def of(cls, info: EndpointInfo, secret: str | None = None) -> WebhookEndpoint:
        return cls(id=info.id, url=info.url, created_at=int(info.created_at.timestamp()), secret=secret)


class WebhookEndpointList(ObjectList[WebhookEndpoint]):
    pass


class WebhookEndpointDeleted(BaseModel):
    id: str
    object: Literal["webhook_endpoint.deleted"] = "webhook_endpoint.deleted"
    deleted: bool = True


class DeliveryAttempt(BaseModel):
    at: float
    status_code: int | None
    error: str | None
    duration_ms: int | None = None


class WebhookDelivery(BaseModel):
    # The ``webhook-id`` header of every attempt.
    id: str
    object: Literal["webhook_delivery"] = "webhook_delivery"
    endpoint_id: str
    type: str
    video_id: str
    status: str
    attempts: list[DeliveryAttempt]
    created_at: int
    updated_at: int

    @classmethod
    def of(cls, info: DeliveryInfo) -> WebhookDelivery:
        return cls(
            id=info.id,
            endpoint_id=info.endpoint_id,
            type=info.event_type,
            video_id=info.job_id,
            status=info.status,
            attempts=[DeliveryAttempt.model_validate(_attempt(a)) for a in info.attempts],
            created_at=_epoch(info.created_at),
            updated_at=_epoch(info.updated_at),
        )


class WebhookDeliveryList(ObjectList[WebhookDelivery]):
    pass


def _attempt(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: entry.get(k) for k in ("at", "status_code", "error", "duration_ms")}


def _epoch(value: datetime) -> int:
    return int(value.timestamp())


def _check_url(url: str, settings: Any) -> str:
    """The URL as registered, or 400 naming ``url`` with the reason."""
    try:
        parsed = parse_url(url, settings.video_webhook_schemes)
        AddressPolicy(settings.video_webhook_allow_cidrs).check_literal(parsed)
    except RefusedUrl as exc:
        raise invalid("url", str(exc)) from None
    return url


@router.post("", response_model=WebhookEndpoint, status_code=201)
async def create_webhook(
    body: WebhookCreate, principal: PrincipalDep, db: DbDep, keyring: KeyringDep, settings: SettingsDep
) -> WebhookEndpoint:
    """Register an endpoint; the answer holds its signing secret, which is never shown again."""
    url = _check_url(body.url, settings)
    try:
        info, secret = await asyncio.to_thread(
            create_endpoint,
            db,
            keyring,
            principal.tenant_id,
            principal.user_id,
            url,
            settings.video_webhook_max_endpoints,
        )
    except TooManyEndpoints:
        raise ApiError(
            409, "too_many_endpoints", f"at most {settings.video_webhook_max_endpoints} webhook endpoints per user"
        ) from None
    return WebhookEndpoint.of(info, secret)


@router.get("", response_model=WebhookEndpointList)
async def list_webhooks(principal: PrincipalDep, db: DbDep) -> WebhookEndpointList:
    infos = await asyncio.to_thread(list_endpoints, db, principal.tenant_id, principal.user_id)
    return WebhookEndpointList(data=[WebhookEndpoint.of(info) for info in infos])


@router.get("/{endpoint_id}", response_model=WebhookEndpoint)
async def get_webhook(endpoint_id: str, principal: PrincipalDep, db: DbDep) -> WebhookEndpoint:
    info = await asyncio.to_thread(get_endpoint, db, principal.tenant_id, principal.user_id, endpoint_id[:64])
    if info is None:
        raise not_found("webhook endpoint")
    return WebhookEndpoint.of(info)


@router.delete("/{endpoint_id}", response_model=WebhookEndpointDeleted)
async def delete_webhook(endpoint_id: str, principal: PrincipalDep, db: DbDep) -> WebhookEndpointDeleted:
    """Stop deliveries to the endpoint and forget its log."""
    removed = await asyncio.to_thread(delete_endpoint, db, principal.tenant_id, principal.user_id, endpoint_id[:64])
    if not removed:
        raise not_found("webhook endpoint")
    return WebhookEndpointDeleted(id=endpoint_id)


@router.get("/{endpoint_id}/deliveries", response_model=WebhookDeliveryList)
async def webhook_deliveries(
    endpoint_id: str,
    principal: PrincipalDep,
    db: DbDep,
    response: Response,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> WebhookDeliveryList:
    """The endpoint's newest deliveries, each with its attempts (time, status code, error)."""
    infos = await asyncio.to_thread(
        list_deliveries, db, principal.tenant_id, principal.user_id, endpoint_id[:64], limit
    )
    if infos is None:
        raise not_found("webhook endpoint")
    response.headers["Cache-Control"] = "no-store"
    return WebhookDeliveryList(data=[WebhookDelivery.of(info) for info in infos])
