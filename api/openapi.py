"""The OpenAPI document: bearer auth where a key is needed, and every error a route can
answer, in the shape clients really get (``{"error": {...}}``, not FastAPI's ``{"detail": ...}``).

Which errors a route documents follows from what it is (takes input, needs a key, names a
resource in its path, takes a body), plus the few listed in ``ROUTE_ERRORS``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from api.errors import OPENAI_SURFACE, ErrorResponse

REF = "#/components/schemas/"
BODY_METHODS = ("post", "put", "patch")
METHODS = ("get", "head", "options", *BODY_METHODS, "delete")

DESCRIPTIONS = {
    400: "The request is malformed: an unparseable body or a bad parameter.",
    401: "No valid credential (API key, or the webhook's signature).",
    404: "No such resource for this caller (another tenant's resources are not found either).",
    409: "The request conflicts with the resource's current state.",
    413: "The request body is over this route's limit.",
    415: "The body's content type is not accepted here.",
    422: "A field fails validation; `error.param` names it and `error.details` lists every failure.",
    429: "Too many failed authentication attempts from this address, or a quota; see `Retry-After`.",
    503: "A dependency (Temporal, the database, GPU capacity) is unavailable; retry later.",
}

# Errors a route answers beyond those its shape implies: (method, path) -> statuses.
ROUTE_ERRORS: dict[tuple[str, str], frozenset[int]] = {
    ("post", "/v1/hooks/github"): frozenset({400, 401, 429, 503}),
    ("post", "/v1/hooks/push"): frozenset({404}),
    ("get", "/v1/runs"): frozenset({404}),
    ("post", "/v1/repos"): frozenset({409}),
    ("post", "/v1/repos/{repo_id}/dispatches"): frozenset({409}),
    ("post", "/v1/videos"): frozenset({409, 415}),
    ("post", "/v1/videos/{video_id}/cancel"): frozenset({409}),
    ("post", "/v1/runs/{run}/jobs/{job}/retry"): frozenset({409}),
    ("post", "/v1/runs/{run}/jobs/{job}/approve"): frozenset({409}),
    ("post", "/v1/runs/{run}/jobs/{job}/reject"): frozenset({409}),
}


def error_statuses(method: str, path: str, operation: dict[str, Any]) -> set[int]:
    """The error statuses ``method path`` can answer."""
    statuses = set(ROUTE_ERRORS.get((method, path), ()))
    if operation.get("parameters") or "requestBody" in operation or "422" in operation.get("responses", {}):
        # The OpenAI-compatible routes answer every invalid request 400, as OpenAI does.
        statuses |= {400} if path.startswith(OPENAI_SURFACE) else {400, 422}
    if operation.get("security"):
        statuses |= {401, 429, 503}
    if "{" in path:
        statuses.add(404)
    if method in BODY_METHODS:
        statuses.add(413)
    return statuses


def document_errors(schema: dict[str, Any]) -> None:
    """Add every route's error responses to ``schema``, all pointing at ``ErrorResponse``."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    error_schema = ErrorResponse.model_json_schema(ref_template=REF + "{model}")
    components.update(error_schema.pop("$defs", {}))
    components["ErrorResponse"] = error_schema
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            if method not in METHODS:
                continue
            responses = operation.setdefault("responses", {})
            statuses = error_statuses(method, path, operation)
            if 422 not in statuses:
                # FastAPI's own 422, on a route that answers validation failures 400.
                responses.pop("422", None)
            for status in sorted(statuses):
                responses[str(status)] = {
                    "description": DESCRIPTIONS[status],
                    "content": {"application/json": {"schema": {"$ref": REF + "ErrorResponse"}}},
                }
    # FastAPI's own 422 schema, now referenced nowhere.
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)


def install_openapi(app: FastAPI) -> None:
    """Serve the document built above (once, on first request) at ``app.openapi_url``."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            document_errors(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
