"""Rendering console pages: one autoescaping Jinja2 environment, the security headers every
console answer carries, the job graph's layout, and the route class that turns a failure into
an HTML page (the same status and message the JSON API would give, never a stack trace)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.types import Scope

from api.console.session import SignInRequired, csrf_token, session_key
from api.errors import ApiError, database_unavailable
from leasehold.db_retry import is_connection_error
from leasehold.settings import Settings

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"
STATIC_PATH = "/console/static"

_env = Environment(
    loader=FileSystemLoader(TEMPLATES),
    # Every tenant-written string (prompts, job names, log lines, summaries) is escaped.
    autoescape=select_autoescape(["html"], default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def content_security_policy(settings: Settings) -> str:
    """No inline script or style, nothing from other origins except the S3 endpoint videos are
    redirected to; no framing (clickjacking), forms post only here."""
    media = "'self'"
    if settings.store_backend == "s3" and settings.s3_endpoint_url:
        parts = urlsplit(settings.s3_endpoint_url)
        media += f" {parts.scheme}://{parts.netloc}"
    elif settings.store_backend == "s3":
        media += " https:"
    return (
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        f"img-src {media}; media-src {media}; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )


def secure_headers(response: Response, settings: Settings) -> None:
    response.headers["Content-Security-Policy"] = content_security_policy(settings)
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers.setdefault("Cache-Control", "no-store")


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render ``template`` with the session's CSRF token and the console's settings."""
    settings: Settings = request.app.state.settings
    key = session_key(request)
    html = _env.get_template(template).render(
        request_path=request.url.path,
        csrf=csrf_token(key) if key else "",
        static=STATIC_PATH,
        signed_in=key is not None,
        **context,
    )
    response = HTMLResponse(html, status_code=status_code)
    secure_headers(response, settings)
    return response


def error_page(request: Request, status: int, code: str, message: str, param: str | None = None) -> HTMLResponse:
    return page(request, "error.html", status_code=status, status=status, code=code, message=message, param=param)


class ConsoleRoute(APIRoute):
    """Answers a console route's failures as pages: sign-in redirects, the API's errors with
    their status, an unreachable database as a 503 page with ``Retry-After``, anything
    unexpected as a plain 500 page (logged here, never shown)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def console_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInRequired:
                if request.method == "GET" and not request.url.path.endswith(("/events", "/stream")):
                    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                    return RedirectResponse(f"/console/sign-in?next={quote(target, safe='')}", status_code=303)
                return error_page(request, 401, "unauthorized", "sign in first")
            except ApiError as exc:
                response = error_page(request, exc.status, exc.code, exc.message, exc.param)
                for name, value in (exc.headers or {}).items():
                    response.headers[name] = value
                return response
            except RequestValidationError as exc:
                first = exc.errors()[0] if exc.errors() else {"loc": ("query",), "msg": "invalid request"}
                param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
                return error_page(request, 400, "invalid_request", str(first.get("msg", "invalid")), param)
            except Exception as exc:
                if is_connection_error(exc):
                    # An outage, not a bug: the API's 503 with Retry-After, as a page.
                    log.warning("console: %s %s: database unavailable", request.method, request.url.path)
                    settings: Settings = request.app.state.settings
                    unavailable = database_unavailable(settings.api_database_retry_after_seconds)
                    response = error_page(request, unavailable.status, unavailable.code, unavailable.message)
                    response.headers.update(unavailable.headers or {})
                    return response
                log.exception("console: unhandled error on %s %s", request.method, request.url.path)
                return error_page(request, 500, "internal_error", "internal server error")

        return console_handler


# Formatting --------------------------------------------------------------------------------


def duration(start: datetime | None, end: datetime | None) -> str:
    if start is None:
        return "-"
    if end is None:
        return "running"
    seconds = int((end - start).total_seconds())
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def when(moment: datetime | None) -> str:
    """A moment as people read it in a list (to the minute, UTC: the API's clock and zone)."""
    if moment is None:
        return "-"
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


_env.filters["eta"] = eta_text
_env.globals["duration"] = duration
_env.globals["when"] = when


# The job graph -------------------------------------------------------------------------------

NODE_WIDTH = 168
NODE_HEIGHT = 44
COLUMN_GAP = 56
ROW_GAP = 18
MARGIN = 8


@dataclass
class GraphNode:
    id: str
    name: str
    status: str
    x: int
    y: int


@dataclass
class GraphEdge:
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass
class Graph:
    """A left-to-right layered drawing of the jobs' ``needs``: a job's column is one more than
    the deepest job it needs, rows in declaration order."""

    nodes: list[GraphNode]
    edges: list[GraphEdge]
    width: int
    height: int


def layout_graph(jobs: list[tuple[str, str, str, list[str]]]) -> Graph:
    """``jobs`` as (id, name, status, needs); needs naming unknown jobs are ignored, and a
    cycle (refused by the parser anyway) cannot loop here: depth is bounded by the job count."""
    ids = {job_id for job_id, _, _, _ in jobs}
    needs = {job_id: [n for n in deps if n in ids and n != job_id] for job_id, _, _, deps in jobs}
    depth: dict[str, int] = {}

    def depth_of(job_id: str, seen: frozenset[str]) -> int:
        if job_id in depth:
            return depth[job_id]
        if job_id in seen:
            return 0
        value = max((depth_of(n, seen | {job_id}) + 1 for n in needs[job_id]), default=0)
        depth[job_id] = value
        return value

    rows: dict[int, int] = {}
    nodes: dict[str, GraphNode] = {}
    for job_id, name, status, _ in jobs:
        column = depth_of(job_id, frozenset())
        row = rows.get(column, 0)
        rows[column] = row + 1
        x = MARGIN + column * (NODE_WIDTH + COLUMN_GAP)
        y = MARGIN + row * (NODE_HEIGHT + ROW_GAP)
        nodes[job_id] = GraphNode(job_id, name, status, x, y)
    edges = [
        GraphEdge(
            nodes[n].x + NODE_WIDTH,
            nodes[n].y + NODE_HEIGHT // 2,
            nodes[job_id].x,
            nodes[job_id].y + NODE_HEIGHT // 2,
        )
        for job_id, deps in needs.items()
        for n in deps
    ]
    columns = max(depth.values(), default=0) + 1
    width = MARGIN * 2 + columns * NODE_WIDTH + (columns - 1) * COLUMN_GAP
    height = MARGIN * 2 + max(rows.values(), default=1) * (NODE_HEIGHT + ROW_GAP) - ROW_GAP
    return Graph(list(nodes.values()), edges, width, height)


# Static files ----------------------------------------------------------------------------------

STATIC_DIR = Path(__file__).parent / "static"


class _ConsoleStatic(StaticFiles):
    """The console's scripts and styles, with ``nosniff`` so nothing else is run as script."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Cache-Control"] = "no-cache"
        return response


def static_files() -> StaticFiles:
    return _ConsoleStatic(directory=STATIC_DIR)
