"""Liveness with dependencies (``/healthz``) and Prometheus metrics (``/metrics``).

``/metrics`` describes every tenant's traffic, so it needs ``LEASEHOLD_METRICS_TOKEN`` as a
bearer token; while none is configured the API serves no metrics (workers serve theirs on
their own health port, loopback by default).
"""

from __future__ import annotations

import asyncio
import hmac
import logging

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

from api.deps import ClientDep, DbDep, SettingsDep, note_failed_auth, refuse_if_throttled
from api.errors import ApiError
from leasehold.database import ping

router = APIRouter(tags=["health"])
log = logging.getLogger(__name__)


@router.get("/healthz")
async def healthz(client: ClientDep, db: DbDep, settings: SettingsDep) -> JSONResponse:
    """200 when the API, Temporal and the database all answer; 503 naming what does not, with
    ``Retry-After`` (a load balancer or client asks again then: an outage is expected to end)."""
    checks: dict[str, str] = {}
    try:
        await asyncio.wait_for(client.workflow_service.get_system_info(GetSystemInfoRequest()), timeout=3)
        checks["temporal"] = "ok"
    except Exception as exc:
        checks["temporal"] = f"unreachable: {type(exc).__name__}"
    try:
        await asyncio.wait_for(asyncio.to_thread(ping, db), timeout=3)
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unreachable: {type(exc).__name__}"
    healthy = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ok" if healthy else "unavailable", "checks": checks},
        status_code=200 if healthy else 503,
        headers=None if healthy else {"Retry-After": str(settings.api_database_retry_after_seconds)},
    )


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request, settings: SettingsDep) -> Response:
    """Prometheus text for ``Authorization: Bearer <metrics token>``; 404 while none is set."""
    if settings.metrics_token is None:
        raise ApiError(404, "not_found", "metrics are not served here: set LEASEHOLD_METRICS_TOKEN to enable them")
    refuse_if_throttled(request)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    expected = settings.metrics_token.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected):
        if token.strip():
            note_failed_auth(request)
        raise ApiError(
            401, "unauthorized", "send 'Authorization: Bearer <metrics token>'", headers={"WWW-Authenticate": "Bearer"}
        )
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
