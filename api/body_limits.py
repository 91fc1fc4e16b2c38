"""Request-body limits, enforced while the body streams in and before any handler reads it.

A declared ``Content-Length`` over the limit is answered 413 at once, without reading a byte
of the body. Otherwise (chunked transfer encoding included) the bytes of ``http.request``
messages are counted as the application receives them, and the request fails with 413 as
soon as the count passes the limit: no body is ever held whole beyond its route's limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_body


def _too_large_message(limit: int) -> str:
    return f"the request body exceeds {limit} bytes"


class BodyTooLarge(HTTPException):
    """The body passed its route's limit (raised from ``receive``, so any reader stops).

    An ``HTTPException`` because FastAPI's own body parsing re-raises those and turns any
    other exception into a 400; the app's handler gives it the usual error shape.
    """

    def __init__(self, limit: int) -> None:
        # The rest of the body is never read, so the connection cannot carry another request.
        super().__init__(413, _too_large_message(limit), headers={"Connection": "close"})


@dataclass(frozen=True)
class BodyLimits:
    """The largest body per exact path, or per path pattern (a route with parameters, matched
    whole), and the limit of every other path."""

    default: int
    by_path: Mapping[str, int] = field(default_factory=dict)
    by_pattern: tuple[tuple[re.Pattern[str], int], ...] = ()

    def for_path(self, path: str) -> int:
        path = path.rstrip("/") or "/"
        if path in self.by_path:
            return self.by_path[path]
        for pattern, limit in self.by_pattern:
            if pattern.fullmatch(path):
                return limit
        return self.default


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            # The server has already refused a malformed or repeated Content-Length.
            return int(value) if value.isdigit() else None
    return None


class BodyLimitMiddleware:
    """Pure ASGI middleware: 413 for a body over its route's limit, counted as it arrives."""

    def __init__(self, app: ASGIApp, limits: BodyLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.for_path(scope["path"])
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await _reject(limit, scope, receive, send)
            return

        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            # Normally the app's error handler has answered already; this covers a reader
            # outside it. A response already under way cannot be replaced; the server closes it.
            if not started:
                await _reject(limit, scope, receive, send)


async def _reject(limit: int, scope: Scope, receive: Receive, send: Send) -> None:
    response = JSONResponse(
        error_body(413, "request_too_large", _too_large_message(limit), "body"),
        status_code=413,
        headers={"Connection": "close"},
    )
    await response(scope, receive, send)
