"""One mapping from domain errors to HTTP, and error bodies in the OpenAI shape.

Every error a client sees is ``{"error": {"code", "message", "param", "type"}}``; no stack
trace ever reaches a client. Failed Temporal calls are turned into ``ApiError`` here too
(``from_temporal``, ``from_update_rejection``), so every router answers an unreachable
engine, a missing execution or a refused Update alike. A database that cannot be reached (a
failover, a restart, a SQLite file locked past its busy timeout) is an outage, not a bug: 503
``service_unavailable`` with ``Retry-After`` from whichever route met it
(``leasehold.db_retry.is_connection_error`` tells the two apart).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from leasehold.db_retry import is_connection_error

log = logging.getLogger(__name__)


class HttpFailure(Exception):
    """A failure answered with an HTTP ``status`` (and ``headers``); ``extra`` adds fields to
    the body. Each API surface answers in its own shape: ``ApiError`` (OpenAI's error object)
    and ``api.replicate.problems.Problem`` (problem details)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None, extra: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers
        self.extra = extra or {}


class ApiError(HttpFailure):
    """A failure to report to the client with a status, a stable code and a message."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(status, message, headers, extra)
        self.code = code
        self.message = message
        self.param = param


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} not found")


def invalid(param: str, message: str) -> ApiError:
    return ApiError(400, "invalid_request", message, param=param)


# The OpenAI-compatible routes: every invalid request there is a 400, as OpenAI answers.
OPENAI_SURFACE = "/v1/videos"


# The database -> HTTP -----------------------------------------------------------------------

SERVICE_UNAVAILABLE = "service_unavailable"
DATABASE_UNAVAILABLE_MESSAGE = "the database is unavailable for a moment; retry after the Retry-After delay"


def database_unavailable(retry_after_seconds: int) -> ApiError:
    """503: the database did not answer (down, failing over, locked); nothing was changed by
    this request, and the client retries after ``Retry-After``."""
    return ApiError(
        503, SERVICE_UNAVAILABLE, DATABASE_UNAVAILABLE_MESSAGE, headers={"Retry-After": str(retry_after_seconds)}
    )


# Temporal -> HTTP ------------------------------------------------------------------------

TEMPORAL_UNAVAILABLE = "temporal_unavailable"


def is_not_found(exc: BaseException) -> bool:
    """Whether a Temporal call failed because the execution does not exist (or no longer runs)."""
    return isinstance(exc, RPCError) and exc.status == RPCStatusCode.NOT_FOUND


def temporal_unavailable(message: str) -> ApiError:
    """503: the engine did not answer (down, slow, or no worker for a query); the client retries."""
    return ApiError(503, TEMPORAL_UNAVAILABLE, message)


def from_temporal(
    exc: BaseException, unavailable: str, missing: ApiError | None = None, call: str = "temporal call"
) -> ApiError:
    """The answer to a failed Temporal call (an ``RPCError`` or a timeout).

    ``missing`` when the execution does not exist and the caller says what that means (a 404,
    or a 409 for an execution that closed); a 503 with ``unavailable`` as message otherwise.
    ``call`` names the call in the log line.
    """
    if missing is not None and is_not_found(exc):
        return missing
    log.warning("%s failed: %s", call, exc.status if isinstance(exc, RPCError) else type(exc).__name__)
    return temporal_unavailable(unavailable)


def from_update_rejection(
    exc: WorkflowUpdateFailedError,
    statuses: Mapping[str, tuple[int, str]],
    refused: ApiError,
    param: str,
    call: str = "update",
) -> ApiError:
    """The answer to an Update the workflow rejected: the ``(status, code)`` its
    ``ApplicationError.type`` maps to in ``statuses``, with the workflow's message; ``refused``
    for any other failure."""
    cause = exc.cause
    if isinstance(cause, ApplicationError) and (mapped := statuses.get(cause.type or "")) is not None:
        status, code = mapped
        return ApiError(status, code, cause.message, param=param)
    log.warning("%s failed: %s", call, cause)
    return refused


class ErrorDetail(BaseModel):
    """What went wrong: a stable ``code`` to match on, a message for people, the offending input.

    Some errors add fields (``details`` of a 422, ``retry_after`` of a refusal)."""

    model_config = ConfigDict(extra="allow")

    code: str
    message: str
    param: str | None = None
    type: str


class ErrorResponse(BaseModel):
    """The body of every error response (documents ``error_body``'s shape in OpenAPI)."""

    error: ErrorDetail


_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_error",
    500: "server_error",
}


def error_body(status: int, code: str, message: str, param: str | None = None, **extra: Any) -> dict:
    body = {"code": code, "message": message, "param": param, "type": _TYPES.get(status, "api_error")}
    body.update(extra)
    return {"error": body}


def _field_name(loc: Any) -> str:
    # ("body", "seconds") -> "seconds"; ("query", "limit") -> "limit".
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header", "form")]
    return ".".join(parts) or "body"


# Stable codes for the errors Starlette and FastAPI raise themselves (body parsing, routing).
_HTTP_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
}


def install_error_handlers(app: FastAPI, database_retry_after_seconds: int = 2) -> None:
    """Route every failure through one JSON error shape."""

    async def _database(request: Request, exc: Exception) -> JSONResponse:
        if not is_connection_error(exc):
            return await _unexpected(request, exc)
        # One line, no traceback: an outage would otherwise log one per request.
        log.warning("%s %s: database unavailable: %s", request.method, request.url.path, type(exc).__name__)
        unavailable = database_unavailable(database_retry_after_seconds)
        return JSONResponse(
            error_body(unavailable.status, unavailable.code, unavailable.message),
            status_code=unavailable.status,
            headers=unavailable.headers,
        )

    # Handled by the exception middleware (not the catch-all below), so a 503 is an answer,
    # not an error re-raised to the server; both families a failover raises are covered.
    app.add_exception_handler(DBAPIError, _database)
    app.add_exception_handler(PoolTimeoutError, _database)

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(
            error_body(exc.status, exc.code, exc.message, exc.param, **exc.extra),
            status_code=exc.status,
            headers=exc.headers,
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
        field = _field_name(first.get("loc", ("body",)))
        message = f"{field}: {first.get('msg', 'invalid value')}"
        details = [{"param": _field_name(e.get("loc", ())), "message": e.get("msg", "")} for e in errors]
        # OpenAI answers every invalid request 400, so its SDK raises one exception type for one
        # kind of mistake; the rest of this API keeps FastAPI's 422 for a body that does not fit.
        status = 400 if request.url.path.startswith(OPENAI_SURFACE) else 422
        return JSONResponse(error_body(status, "invalid_request", message, field, details=details), status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "error")
        return JSONResponse(
            error_body(exc.status_code, code, str(exc.detail), "body" if exc.status_code in (400, 413) else None),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(RecursionError)
    async def _too_deep(request: Request, _exc: RecursionError) -> JSONResponse:
        # In a request this means input nested deeper than a parser recurses (``[[[[...``): a
        # client error, logged on one line: a traceback per hostile request would flood the log.
        log.warning("%s %s: input nested too deeply", request.method, request.url.path)
        return JSONResponse(
            error_body(400, "invalid_request", "the request body is nested too deeply", "body"), status_code=400
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body(500, "internal_error", "internal server error"), status_code=500)
