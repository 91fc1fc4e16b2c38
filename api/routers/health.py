"""Liveness with dependencies (``/healthz``) and Prometheus metrics (``/metrics``)."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

from api.deps import ClientDep, DbDep
from leasehold.database import ping

router = APIRouter(tags=["health"])
log = logging.getLogger(__name__)


@router.get("/healthz")
async def healthz(client: ClientDep, db: DbDep) -> JSONResponse:
    """200 when the API, Temporal and the database all answer; 503 naming what does not."""
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
    )


@router.get("/metrics", include_in_schema=False)
async def metrics() -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
