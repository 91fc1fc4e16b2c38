"""Errors in Replicate's shape: RFC 7807 problem details (``title``, ``detail``, ``status``).

The Replicate surface answers every failure this way (its client reads ``title`` and
``detail`` into ``ReplicateError``), where ``/v1/videos`` answers OpenAI's error object. The
two surfaces share the job code, which raises ``api.errors.ApiError``; ``ProblemRoute``
translates those, FastAPI's validation errors and a database outage at the edge of this
surface's routes, so no route converts by hand and nothing reaches a client as a 500 with
a stack trace. Invalid input is 422 with ``invalid_fields`` naming each field, as Replicate does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.errors import DATABASE_UNAVAILABLE_MESSAGE, ApiError, HttpFailure
from leasehold.db_retry import is_connection_error

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"

_TITLES = {
    400: "Bad request",
    401: "Unauthenticated",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    410: "Gone",
    413: "Request entity too large",
    415: "Unsupported media type",
    422: "Input validation failed",
    429: "Too many requests",
    499: "Client closed request",
    503: "Service unavailable",
}
# Database outages answer after this many seconds (the value /v1/videos sends by default).
DATABASE_RETRY_AFTER_SECONDS = 2


class Problem(HttpFailure):
    """A failure to answer as problem details."""

    def __init__(
        self,
        status: int,
        detail: str,
        title: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(status, detail, headers, extra)
        self.detail = detail
        self.title = title or _TITLES.get(status, "Error")

    def response(self) -> JSONResponse:
        body = {"title": self.title, "detail": self.detail, "status": self.status, **self.extra}
        return JSONResponse(body, status_code=self.status, headers=self.headers, media_type=PROBLEM_JSON)


def invalid_input(field: str, message: str) -> Problem:
    """422 naming one field of the request (``input.<name>`` for a model input)."""
    return Problem(
        422,
        f"- {field}: {message}",
        extra={"invalid_fields": [{"type": "invalid", "field": field, "description": message}]},
    )


def not_found(what: str) -> Problem:
    return Problem(404, f"{what} not found")


def from_api_error(exc: ApiError) -> Problem:
    """The problem for an ``ApiError`` the shared job code raised (same status and headers)."""
    extra: dict[str, Any] = {"code": exc.code}
    if exc.param is not None:
        extra["param"] = exc.param
    for key in ("retry_after",):
        if key in exc.extra:
            extra[key] = exc.extra[key]
    return Problem(exc.status, exc.message, headers=exc.headers, extra=extra)


def _field(loc: Any) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def from_validation(exc: RequestValidationError) -> Problem:
    fields = [
        {"type": str(e.get("type", "invalid")), "field": _field(e.get("loc", ())), "description": e.get("msg", "")}
        for e in exc.errors()
    ]
    detail = "\n".join(f"- {f['field']}: {f['description']}" for f in fields) or "invalid request"
    return Problem(422, detail, extra={"invalid_fields": fields})


class ProblemRoute(APIRoute):
    """A route whose failures answer as problem details (its dependencies' included)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except Problem as exc:
                return exc.response()
            except ApiError as exc:
                return from_api_error(exc).response()
            except RequestValidationError as exc:
                return from_validation(exc).response()
            except StarletteHTTPException as exc:
                return Problem(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None)).response()
            except (DBAPIError, PoolTimeoutError) as exc:
                if not is_connection_error(exc):
                    raise
                log.warning("%s %s: database unavailable: %s", request.method, request.url.path, type(exc).__name__)
                return Problem(
                    503, DATABASE_UNAVAILABLE_MESSAGE, headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)}
                ).response()

        return answer
