"""The FastAPI application: one Temporal client, database and object store per process."""

from __future__ import annotations

import gc
import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth_throttle import FailedAuthThrottle
from api.body_limits import BodyLimitMiddleware, BodyLimits
from api.ci.startup import start_ci
from api.console import pages as console_pages
from api.console.render import STATIC_PATH as CONSOLE_STATIC_PATH
from api.console.render import static_files as console_static_files
from api.errors import install_error_handlers
from api.openapi import install_openapi
from api.principal_cache import PrincipalCache
from api.routers import files, health, replicate
from api.routers.ci import (
    artifacts,
    dispatches,
    environments,
    hooks,
    job_secrets,
    logs,
    repos,
    runs,
    secrets,
    status_reporter,
    variables,
)
from api.routers.video import capacity, models, videos, webhooks
from api.video.capacity_lifecycle import start_capacity, stop_capacity
from api.video.live import LiveProgress
from api.video.submit import start_submit, stop_submit
from leasehold.data_dir import secure_data_dir
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


class RequestMetricsMiddleware:
    """Counts and times every HTTP request by method, route and status (pure ASGI: it neither
    wraps the request body nor runs the app in another task, so errors keep their type)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            # The router puts the matched route into this same scope.
            path = getattr(scope.get("route"), "path", "unmatched")
            REQUESTS.labels(scope["method"], path, str(status)).inc()
            LATENCY.labels(scope["method"], path).observe(time.perf_counter() - start)


def create_app(settings: Settings) -> FastAPI:
    """Build the API for ``settings``; the Temporal connection is made in ``lifespan``."""
    # The model catalogue, before anything validates a request against it.
    models.serve_catalogue(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        secure_data_dir(settings.data_dir)
        app.state.settings = settings
        app.state.db = init_database(settings.resolved_database_url)
        app.state.store = open_store(settings)
        # Lazy: the API must start (and /healthz answer 503) even while Temporal is down.
        app.state.temporal = await connect(settings, identity="leasehold-api", lazy=True)
        # Running videos' live progress: one describe per job per second for all readers.
        app.state.video_live = LiveProgress(app.state.temporal)
        await start_ci(app)
        await start_capacity(app)
        await start_submit(app)
        # Everything built so far lives as long as the process: out of the collector's reach,
        # so a full collection walks only what requests allocate (it walked every module,
        # model and route at each one, tens of milliseconds during which no request moved).
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            await stop_submit(app)
            await stop_capacity(app)

    app = FastAPI(
        title="leasehold",
        version="0.1.0",
        description="Video generation on preemptible GPUs and multi-tenant CI, on Temporal.",
        lifespan=lifespan,
    )
    install_error_handlers(app, settings.api_database_retry_after_seconds)
    install_openapi(app)
    app.state.auth_throttle = FailedAuthThrottle(settings.api_auth_failures_per_minute)
    app.state.principals = PrincipalCache(settings.api_principal_cache_seconds)

    app.add_middleware(BodyLimitMiddleware, limits=body_limits(settings))
    # Added last, so outermost: it sees every answer, a body limit's early 413 included.
    app.add_middleware(RequestMetricsMiddleware)
    # Every router, listed here where the app is composed (the order is the OpenAPI order).
    app.include_router(health.router)
    app.include_router(files.router)
    app.include_router(repos.router)
    app.include_router(videos.router)
    app.include_router(webhooks.router)
    app.include_router(hooks.router)
    app.include_router(dispatches.router)
    app.include_router(runs.router)
    app.include_router(logs.router)
    app.include_router(artifacts.router)
    app.include_router(secrets.router)
    app.include_router(variables.router)
    # The secrets broker CI workers trade attempt tokens at (internal).
    app.include_router(job_secrets.router)
    app.include_router(environments.router)
    app.include_router(status_reporter.router)
    app.include_router(capacity.router)
    app.include_router(models.router)
    # Replicate's predictions API over the same jobs (api.replicate).
    app.include_router(replicate.router)
    # The web console: pages on the same origin and keys, its scripts and styles as static files.
    app.include_router(console_pages.router)
    app.mount(CONSOLE_STATIC_PATH, console_static_files(), name="console-static")
    return app


def body_limits(settings: Settings) -> BodyLimits:
    """Each route's largest request body: the webhook takes GitHub's largest payloads, a
    video create or a prediction a prompt, a few fields and at most one image (a file or a
    data URL), a Replicate file upload one image; everything else small JSON."""
    return BodyLimits(
        default=settings.api_max_body_bytes,
        by_path={
            hooks.GITHUB_WEBHOOK_PATH: settings.api_webhook_max_body_bytes,
            videos.router.prefix: videos.MAX_BODY_BYTES,
            "/v1/predictions": videos.MAX_BODY_BYTES,
            "/v1/files": videos.MAX_BODY_BYTES,
        },
        by_pattern=((re.compile(r"/v1/models/[^/]+/[^/]+/predictions"), videos.MAX_BODY_BYTES),),
    )
