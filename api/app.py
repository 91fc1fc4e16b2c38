"""The FastAPI application: one Temporal client, database and object store per process."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from prometheus_client import Counter, Histogram

from api.errors import install_error_handlers
from api.routers import files, health
from leasehold.database import init_database
from leasehold.settings import Settings
from leasehold.storage import open_store
from leasehold.temporal import connect

log = logging.getLogger(__name__)

REQUESTS = Counter("leasehold_api_requests_total", "API requests", ["method", "route", "status"])
LATENCY = Histogram(
    "leasehold_api_request_seconds",
    "API request latency",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


def create_app(settings: Settings) -> FastAPI:
    """Build the API for ``settings``; the Temporal connection is made in ``lifespan``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        app.state.settings = settings
        app.state.db = init_database(settings.resolved_database_url)
        app.state.store = open_store(settings)
        # Lazy: the API must start (and /healthz answer 503) even while Temporal is down.
        app.state.temporal = await connect(settings, identity="leasehold-api", lazy=True)
        yield

    app = FastAPI(
        title="leasehold",
        version="0.1.0",
        description="Video generation on preemptible GPUs and multi-tenant CI, on Temporal.",
        lifespan=lifespan,
    )
    install_error_handlers(app)

    @app.middleware("http")
    async def _metrics(request: Request, call_next) -> Response:  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        REQUESTS.labels(request.method, path, str(response.status_code)).inc()
        LATENCY.labels(request.method, path).observe(time.perf_counter() - start)
        return response

    app.include_router(health.router)
    app.include_router(files.router)
    for router in _product_routers():
        app.include_router(router)
    return app


def _product_routers() -> list:
    """Routers of the two products (videos, CI), registered here as they are built."""
    from api.routers import registry

    return registry.ROUTERS
