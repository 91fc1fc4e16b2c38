"""Replicate's HTTP API over the video jobs ``/v1/videos`` serves: one job model, two surfaces.

``POST /v1/predictions`` (``version``) and ``POST /v1/models/{owner}/{name}/predictions``
submit through the same path as ``POST /v1/videos`` (``VideoJobs.submit``: admission, the
outbox, fencing and checkpoints all follow); reads, listings, cancel and the event stream
answer from the same read model and views (``api.replicate.predictions`` renders a
``JobView`` as a prediction). Keys are leasehold's API keys, sent as ``Bearer`` or, as
Replicate's documentation shows, ``Token``. Errors are problem details
(``api.replicate.problems``).

``Prefer: wait[=n]`` holds the create's answer until the prediction ends or ``n`` seconds
(at most 60) pass. A prediction still running then is answered as ``starting``, as Replicate
answers it: its client takes any other status as final and would stop waiting
(``replicate.run``); the next GET tells the real status.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import UploadFile

from api.body_limits import BodyTooLarge
from api.deps import IdempotencyKeyHeader, get_principal
from api.errors import ApiError
from api.replicate import catalogue, files, inputs
from api.replicate.predictions import TERMINAL, prediction_of
from api.replicate.problems import Problem, ProblemRoute, invalid_input
from api.replicate.webhooks import EVENTS, PredictionWebhooks, Subscription, check_url, signing_secret
from api.video.jobs import SSE_KEEPALIVE_SECONDS, WATCH_INTERVAL_SECONDS, VideoJobs
from api.video.reference import MAX_REFERENCE_BYTES
from api.video.views import JobView
from leasehold.records.api_keys import Principal
from leasehold.webhook_urls import MAX_URL_LENGTH
from workflows.video.models import VideoModelSpec

# Out of the OpenAPI document, which describes every error as OpenAI's error object
# (api.openapi); these routes answer problem details, and Replicate's clients read no schema.
router = APIRouter(tags=["replicate"], route_class=ProblemRoute, include_in_schema=False)

# Replicate's longest hold, and how much earlier than asked the hold ends (its client reads
# for half a second longer than the wait it asked for).
MAX_WAIT_SECONDS = 60
WAIT_MARGIN_SECONDS = 0.5
# Replicate's page size.
PAGE_SIZE = 100
# A stream ends after this long; the client reconnects.
STREAM_MAX_SECONDS = 3600.0


async def replicate_principal(request: Request) -> Principal:
    """The caller of ``Authorization: Bearer <key>`` or ``Authorization: Token <key>``."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    credentials = None
    if scheme.lower() in ("bearer", "token") and token.strip():
        credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=token.strip())
    return await get_principal(request, credentials)


CallerDep = Annotated[Principal, Depends(replicate_principal)]
# ``Prefer: wait[=n]``: hold the create open until the prediction ends (at most n seconds).
PreferHeader = Annotated[str | None, Header(max_length=256)]


@dataclass(frozen=True)
class CreateHeaders:
    """The headers both creates read: ``Prefer`` and ``Idempotency-Key``."""

    prefer: str | None
    idempotency_key: str | None


def create_headers(prefer: PreferHeader = None, idempotency_key: IdempotencyKeyHeader = None) -> CreateHeaders:
    return CreateHeaders(prefer, idempotency_key)


CreateHeadersDep = Annotated[CreateHeaders, Depends(create_headers)]


class PredictionCreate(BaseModel):
    """Body of a create: Replicate's fields (``version`` only on ``POST /v1/predictions``)."""

    model_config = ConfigDict(extra="forbid")

    version: str | None = Field(default=None, max_length=256)
    input: dict[str, Any] = Field(default_factory=dict)
    webhook: str | None = Field(default=None, max_length=MAX_URL_LENGTH)
    # Replicate's older form of ``webhook`` with ``["completed"]``.
    webhook_completed: str | None = Field(default=None, max_length=MAX_URL_LENGTH)
    webhook_events_filter: list[str] | None = Field(default=None, max_length=len(EVENTS))
    # Every prediction streams; accepted for clients that still ask.
    stream: bool | None = None


# Parts --------------------------------------------------------------------------------------


def _base_url(request: Request) -> str:
    return request.app.state.settings.resolved_public_base_url


def _renderer(request: Request) -> Callable[[JobView], dict[str, Any]]:
    state = request.app.state
    base_url = _base_url(request)
    return lambda view: prediction_of(view, state.store, base_url, state.settings.signed_url_ttl_seconds)


def _webhooks(request: Request) -> PredictionWebhooks:
    state = request.app.state
    webhooks: PredictionWebhooks | None = getattr(state, "replicate_webhooks", None)
    if webhooks is None:
        webhooks = state.replicate_webhooks = PredictionWebhooks(state.settings)
    return webhooks


def wait_seconds(prefer: str | None) -> float | None:
    """How long ``Prefer: wait[=n]`` asks the create to hold its answer (``None``: not asked)."""
    if prefer is None:
        return None
    for token in prefer.replace(";", ",").split(","):
        name, _, value = token.strip().partition("=")
        if name.strip().lower() != "wait":
            continue
        if not value.strip():
            return float(MAX_WAIT_SECONDS)
        try:
            seconds = int(value.strip().strip('"'))
        except ValueError:
            seconds = 0
        if not 1 <= seconds <= MAX_WAIT_SECONDS:
            raise Problem(400, f"Prefer: wait=n takes n from 1 to {MAX_WAIT_SECONDS} seconds (got {value.strip()!r})")
        return float(seconds)
    return None


def _subscription(request: Request, body: PredictionCreate, principal: Principal) -> Subscription | None:
    url, field = (
        (body.webhook, "webhook") if body.webhook is not None else (body.webhook_completed, "webhook_completed")
    )
    if body.webhook is not None and body.webhook_completed is not None:
        raise invalid_input("webhook_completed", "give webhook or webhook_completed, not both")
    if url is None:
        if body.webhook_events_filter is not None:
            raise invalid_input("webhook_events_filter", "filters the events of a webhook; none was given")
        return None
    settings = request.app.state.settings
    refused = check_url(url, settings)
    if refused is not None:
        raise invalid_input(field, refused)
    if body.webhook_completed is not None:
        events = frozenset({"completed"})
    elif body.webhook_events_filter is None:
        events = frozenset(EVENTS)
    else:
        unknown = [event for event in body.webhook_events_filter if event not in EVENTS]
        if unknown or not body.webhook_events_filter:
            raise invalid_input(
                "webhook_events_filter", f"events are some of {', '.join(EVENTS)} (got {unknown or []})"
            )
        events = frozenset(body.webhook_events_filter)
    return Subscription(url=url, events=events, secret=signing_secret(settings, principal))


async def _hold(request: Request, jobs: VideoJobs, view: JobView, seconds: float) -> JobView:
    """The job once it ended, or as it stands when ``seconds`` (less the margin) passed."""
    deadline = time.monotonic() + max(WATCH_INTERVAL_SECONDS, seconds - WAIT_MARGIN_SECONDS)
    while not view.terminal:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or await request.is_disconnected():
            break
        await asyncio.sleep(min(WATCH_INTERVAL_SECONDS, remaining))
        view = await jobs.get(view.job_id)
    return view


async def _create(
    request: Request,
    principal: Principal,
    spec: VideoModelSpec,
    body: PredictionCreate,
    headers: CreateHeaders,
) -> JSONResponse:
    wait = wait_seconds(headers.prefer)
    idempotency_key = headers.idempotency_key
    subscription = _subscription(request, body, principal)
    create = inputs.create_request(body.input, spec)
    store, base_url = request.app.state.store, _base_url(request)
    image = inputs.image_input(body.input, lambda url: files.image_bytes(store, principal, base_url, url))
    source = inputs.video_input(body.input, spec, base_url)
    jobs = VideoJobs.of_app(request.app.state, principal)
    try:
        if source is not None:
            view = await jobs.remix(source, create, idempotency_key, request)
        else:
            view = await jobs.submit(create, idempotency_key, request, image)
    except ApiError as exc:
        # The shared checks against the model's limits: Replicate's invalid input.
        if exc.status == 400 and exc.code == "invalid_request" and exc.param != "Idempotency-Key":
            raise invalid_input(inputs.input_field(exc.param), exc.message) from None
        if source is not None and exc.status == 404:
            # Not the caller's (or no such prediction): said as about any id, never whose it is.
            raise invalid_input("input.video", f"no prediction {source} of yours to remix") from None
        raise
    render = _renderer(request)
    if subscription is not None:
        _webhooks(request).follow(jobs, view, subscription, render)
    if wait is not None:
        view = await _hold(request, jobs, view, wait)
    prediction = render(view)
    if wait is not None and prediction["status"] not in TERMINAL:
        prediction["status"] = "starting"  # Replicate's answer to a hold that ran out (module docstring)
    return JSONResponse(prediction, status_code=201)


# Models -------------------------------------------------------------------------------------


@router.get("/v1/models/{owner}/{name}")
async def get_model(owner: str, name: str, request: Request, _caller: CallerDep) -> dict[str, Any]:
    """A model of the catalogue, in Replicate's shape (its only version as ``latest_version``)."""
    spec = catalogue.by_name(request.app.state.settings, owner, name)
    return catalogue.model_object(spec, _base_url(request))


@router.get("/v1/models/{owner}/{name}/versions")
async def list_versions(owner: str, name: str, request: Request, _caller: CallerDep) -> dict[str, Any]:
    """The model's versions: the one the catalogue serves."""
    spec = catalogue.by_name(request.app.state.settings, owner, name)
    return {"next": None, "previous": None, "results": [catalogue.version_object(spec)]}


@router.get("/v1/models/{owner}/{name}/versions/{version_id}")
async def get_version(owner: str, name: str, version_id: str, request: Request, _caller: CallerDep) -> dict[str, Any]:
    spec = catalogue.by_name(request.app.state.settings, owner, name)
    if version_id != catalogue.version_id(spec):
        raise Problem(404, f"version {version_id} of {owner}/{name} not found")
    return catalogue.version_object(spec)


@router.post("/v1/models/{owner}/{name}/predictions", status_code=201)
async def create_model_prediction(
    owner: str, name: str, body: PredictionCreate, request: Request, caller: CallerDep, headers: CreateHeadersDep
) -> JSONResponse:
    """Run the model's current version."""
    spec = catalogue.by_name(request.app.state.settings, owner, name)
    if body.version is not None:
        raise invalid_input("version", "the model's URL names what runs; drop version or use POST /v1/predictions")
    return await _create(request, caller, spec, body, headers)


# Predictions --------------------------------------------------------------------------------


@router.post("/v1/predictions", status_code=201)
async def create_prediction(
    body: PredictionCreate, request: Request, caller: CallerDep, headers: CreateHeadersDep
) -> JSONResponse:
    """Run a version (a version id, ``owner/name`` or ``owner/name:id``)."""
    if body.version is None:
        raise invalid_input("version", "is required: the version id (or owner/name) to run")
    spec = catalogue.by_version(request.app.state.settings, body.version)
    return await _create(request, caller, spec, body, headers)


def _cursor(direction: str, job_id: str) -> str:
    return base64.urlsafe_b64encode(f"{direction}:{job_id}".encode()).decode().rstrip("=")


def _parse_cursor(cursor: str) -> tuple[str, str]:
    try:
        direction, _, job_id = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        direction, job_id = "", ""
    if direction not in ("n", "p") or not job_id:
        raise Problem(400, "the cursor is not one this API gave out")
    return direction, job_id


@router.get("/v1/predictions")
async def list_predictions(
    request: Request,
    caller: CallerDep,
    cursor: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_SIZE)] = PAGE_SIZE,
) -> dict[str, Any]:
    """The caller's predictions, newest first; ``next`` and ``previous`` are page URLs."""
    jobs = VideoJobs.of_app(request.app.state, caller)
    direction, anchor = _parse_cursor(cursor) if cursor is not None else ("n", None)
    try:
        if direction == "p":
            views, more = await jobs.page(anchor, limit, "asc")
            views.reverse()
            has_previous, has_next = more, True
        else:
            views, more = await jobs.page(anchor, limit, "desc")
            has_previous, has_next = anchor is not None, more
    except ApiError as exc:
        if exc.param == "after":
            raise Problem(400, "the cursor names no prediction of yours") from None
        raise
    render = _renderer(request)

    def page_url(to: str, job_id: str) -> str:
        extra = f"&limit={limit}" if limit != PAGE_SIZE else ""
        return f"{_base_url(request)}/v1/predictions?cursor={_cursor(to, job_id)}{extra}"

    return {
        "previous": page_url("p", views[0].job_id) if views and has_previous else None,
        "next": page_url("n", views[-1].job_id) if views and has_next else None,
        "results": [render(view) for view in views],
    }


@router.get("/v1/predictions/{prediction_id}")
async def get_prediction(prediction_id: str, request: Request, caller: CallerDep) -> dict[str, Any]:
    """One prediction of the caller's (404 for anyone else's)."""
    jobs = VideoJobs.of_app(request.app.state, caller)
    return _renderer(request)(await jobs.get(prediction_id))


# A cancel that meets a job whose workflow is about to start tries again this often.
CANCEL_TRIES = 10


@router.post("/v1/predictions/{prediction_id}/cancel")
async def cancel_prediction(prediction_id: str, request: Request, caller: CallerDep) -> dict[str, Any]:
    """Cancel; a prediction that already ended is answered as it is, as Replicate does."""
    jobs = VideoJobs.of_app(request.app.state, caller)
    for _ in range(CANCEL_TRIES):
        try:
            view = await jobs.cancel(prediction_id)
            break
        except ApiError as exc:
            if exc.code == "invalid_state":
                view = await jobs.get(prediction_id)
                break
            if exc.code != "not_started":
                raise
            await asyncio.sleep(WATCH_INTERVAL_SECONDS)
    else:
        raise Problem(409, "the prediction is being started; retry the cancel in a moment")
    return _renderer(request)(view)


def _event(event_id: int, event: str, data: str) -> str:
    lines = "".join(f"data: {line}\n" for line in data.split("\n"))
    return f"event: {event}\nid: {event_id}\n{lines}\n"


@router.get("/v1/predictions/{prediction_id}/stream", response_model=None)
async def stream_prediction(prediction_id: str, request: Request, caller: CallerDep) -> StreamingResponse:
    """Server-sent events as Replicate sends them: ``logs`` lines as they change, ``output``
    once the video exists, ``error`` if it failed, then ``done``."""
    jobs = VideoJobs.of_app(request.app.state, caller)
    await jobs.get(prediction_id)  # 404 before the stream starts, not inside it
    render = _renderer(request)

    async def events() -> AsyncIterator[str]:
        count = 0
        sent: list[str] = []
        try:
            async for view in jobs.watch(prediction_id, None, STREAM_MAX_SECONDS, SSE_KEEPALIVE_SECONDS):
                prediction = render(view)
                lines = prediction["logs"].splitlines()
                said = count
                # The progress line is rewritten as it grows (as tqdm's is): send what changed.
                for index, line in enumerate(lines):
                    if index >= len(sent) or sent[index] != line:
                        count += 1
                        yield _event(count, "logs", line)
                sent = lines
                status = prediction["status"]
                if status not in TERMINAL:
                    if count == said:
                        # Nothing new for a while: a comment (the client skips it) keeps it open.
                        yield ": keep-alive\n\n"
                    continue
                if prediction["output"] is not None:
                    count += 1
                    yield _event(count, "output", prediction["output"])
                if status == "failed":
                    count += 1
                    yield _event(count, "error", json.dumps({"detail": prediction["error"]}))
                reason = {"succeeded": {}, "failed": {"reason": "error"}, "canceled": {"reason": "canceled"}}[status]
                yield _event(count + 1, "done", json.dumps(reason))
                return
        except ApiError as exc:
            yield _event(count + 1, "error", json.dumps({"detail": exc.message}))

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


# Files --------------------------------------------------------------------------------------


@router.post("/v1/files", status_code=201)
async def create_file(request: Request, caller: CallerDep) -> dict[str, Any]:
    """Upload a file to pass as a model input (what ``client.files.create`` and a file in
    ``input`` send): multipart ``content``, optional ``metadata`` (JSON)."""
    try:
        form = await request.form(max_files=1, max_fields=4)
    except BodyTooLarge:
        raise
    except Exception as exc:  # Starlette reports malformed multipart as several types
        raise Problem(400, "the form body could not be parsed") from exc
    content = form.get("content")
    if not isinstance(content, UploadFile):
        raise invalid_input("content", "is required: the file, as a multipart file field")
    data = await content.read(MAX_REFERENCE_BYTES + 1)
    if len(data) > MAX_REFERENCE_BYTES:
        raise Problem(413, f"a file holds at most {MAX_REFERENCE_BYTES} bytes here")
    metadata: Any = {}
    raw_metadata = form.get("metadata")
    if isinstance(raw_metadata, str) and raw_metadata:
        try:
            metadata = json.loads(raw_metadata)
        except ValueError:
            raise invalid_input("metadata", "must be a JSON object") from None
    name = content.filename or "file"
    kind = content.content_type or "application/octet-stream"
    state = request.app.state
    return await asyncio.to_thread(files.create, state.store, caller, _base_url(request), data, name, kind, metadata)


@router.get("/v1/files/{file_id}")
async def get_file(file_id: str, request: Request, caller: CallerDep) -> dict[str, Any]:
    return await asyncio.to_thread(files.get, request.app.state.store, caller, _base_url(request), file_id)


@router.delete("/v1/files/{file_id}", status_code=204)
async def delete_file(file_id: str, request: Request, caller: CallerDep) -> Response:
    await asyncio.to_thread(files.delete, request.app.state.store, caller, file_id)
    return Response(status_code=204)


# Webhooks -----------------------------------------------------------------------------------


@router.get("/v1/webhooks/default/secret")
async def default_webhook_secret(request: Request, caller: CallerDep) -> dict[str, str]:
    """The secret the caller's prediction webhooks are signed with (``replicate.webhooks.validate``)."""
    return {"key": signing_secret(request.app.state.settings, caller)}
