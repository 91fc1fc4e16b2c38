"""``/v1/videos``: the OpenAI Videos API (create, retrieve, list, delete, content) plus cancel and SSE."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, StreamingResponse
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.datastructures import FormData, UploadFile

from api.body_limits import BodyTooLarge
from api.content_types import content_type_for
from api.deps import IdempotencyKeyHeader, PrincipalDep, SettingsDep, StoreDep
from api.errors import DATABASE_UNAVAILABLE_MESSAGE, SERVICE_UNAVAILABLE, ApiError, invalid
from api.forms import string_fields
from api.schemas.video import Video, VideoCreateRequest, VideoDeleted, VideoList
from api.video.jobs import SSE_KEEPALIVE_SECONDS, VideoJobs
from api.video.live import LiveProgress
from api.video.reference import FIELD as REFERENCE_FIELD
from api.video.reference import MAX_DATA_URL_CHARS, MAX_REFERENCE_BYTES, data_url_bytes, read_image
from api.video.views import JobView, poll_after_ms
from leasehold.db_retry import is_connection_error
from leasehold.storage import LocalObjectStore, ObjectNotFound

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/videos", tags=["videos"])

# A create body is a prompt and a few short fields, and at most one image (``input_reference``,
# as a file or a base64 data URL): anything much larger is not a create request.
MAX_FIELD_BYTES = 64 * 1024
MAX_BODY_BYTES = MAX_DATA_URL_CHARS + MAX_FIELD_BYTES
MAX_FORM_FIELDS = 16
# An SSE stream ends after this long; the client reconnects with Last-Event-ID.
SSE_MAX_SECONDS = 3600.0


async def get_live(request: Request) -> LiveProgress:
    """The process's cache of running jobs' live progress (created in the app's lifespan)."""
    return request.app.state.video_live


async def get_jobs(request: Request, principal: PrincipalDep) -> VideoJobs:
    """The caller's jobs. One dependency that reads the process's parts from ``app.state``
    (as ``api.deps``' getters do): FastAPI solves every dependency of a route on every
    request, and a status read is the API's hottest request, so it solves two, not eight."""
    return VideoJobs.of_app(request.app.state, principal)


JobsDep = Annotated[VideoJobs, Depends(get_jobs)]

_CREATE_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": VideoCreateRequest.model_json_schema()},
            "multipart/form-data": {"schema": VideoCreateRequest.model_json_schema()},
        },
    }
}


def _reference_object(value: Any) -> bytes:
    """The image of OpenAI's reference object (``{"image_url": ...}``) or of a bare data URL."""
    if isinstance(value, str):
        return data_url_bytes(value)
    if not isinstance(value, dict) or not value:
        raise invalid(REFERENCE_FIELD, "give a file upload, or an object with image_url (a base64 data URL)")
    if "file_id" in value:
        raise invalid(REFERENCE_FIELD, "file_id is not served here (no Files API): upload the image or send image_url")
    unknown = sorted(set(value) - {"image_url"})
    if unknown or not isinstance(value.get("image_url"), str):
        raise invalid(REFERENCE_FIELD, f"the reference object takes image_url (a string); got {unknown or value}")
    return data_url_bytes(value["image_url"])


async def _form_fields(request: Request) -> dict[str, Any]:
    """The fields and the uploaded image of a form body (what the SDK sends)."""
    try:
        form = await request.form(max_files=1, max_fields=MAX_FORM_FIELDS, max_part_size=MAX_BODY_BYTES)
    except BodyTooLarge:
        raise  # the body limit (413), not a malformed form
    except Exception as exc:
        # Starlette reports malformed multipart as several exception types; all mean one thing.
        raise ApiError(400, "invalid_request", "the form body could not be parsed", "body") from exc
    upload = form.get(REFERENCE_FIELD)
    image: bytes | None = None
    if isinstance(upload, UploadFile):
        # One byte past the limit is enough to refuse it (api.video.reference).
        image = await upload.read(MAX_REFERENCE_BYTES + 1)
        form = FormData([(name, value) for name, value in form.multi_items() if name != REFERENCE_FIELD])
    fields: dict[str, Any] = string_fields(form, "unsupported_parameter", "{name} (a file upload) is not taken here")
    # A reference object flattened into a form (input_reference[image_url] / [file_id]), as
    # OpenAI's form encoding writes nested fields; the SDK itself sends only a file.
    prefix = f"{REFERENCE_FIELD}["
    nested = {name[len(prefix) : -1]: fields.pop(name) for name in list(fields) if name.startswith(prefix)}
    if nested:
        fields[REFERENCE_FIELD] = nested
    if image is not None:
        fields[REFERENCE_FIELD] = image
    return fields


async def _create_fields(request: Request) -> dict[str, Any]:
    """The create fields from a JSON or form body (the SDK sends multipart form);
    ``input_reference`` as the image's bytes, or the object or data URL a client sent."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
        return await _form_fields(request)
    if content_type not in ("application/json", ""):
        raise ApiError(415, "unsupported_media_type", "send application/json or multipart/form-data", "Content-Type")
    # BodyLimitMiddleware (api/app.py) holds this route to MAX_BODY_BYTES while the body streams.
    raw = await request.body()
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        # RecursionError: nested deeper than the decoder recurses (``[[[[...``).
        raise ApiError(400, "invalid_json", "the request body is not valid JSON", "body") from None
    if not isinstance(parsed, dict):
        raise ApiError(400, "invalid_request", "the request body must be a JSON object", "body")
    return parsed


# Video operations of OpenAI's API (and its SDK) that leasehold does not serve: a clear 400 naming
# the operation, where a 404 or 405 would look like a wrong base URL.
UNSUPPORTED_OPERATIONS = (
    ("POST", "/characters", "videos.create_character"),
    ("GET", "/characters/{character_id}", "videos.get_character"),
    ("POST", "/edits", "videos.edit"),
    ("POST", "/extensions", "videos.extend"),
)


def _unsupported(operation: str) -> Callable[..., Awaitable[Response]]:
    async def answer(_principal: PrincipalDep) -> Response:
        raise ApiError(
            400,
            "unsupported_endpoint",
            f"{operation} is not supported by this server (it serves videos.create, remix, retrieve, "
            "list, delete, download_content and cancel)",
        )

    answer.__name__ = f"unsupported_{operation.replace('.', '_')}"
    return answer


for _method, _path, _operation in UNSUPPORTED_OPERATIONS:
    router.add_api_route(
        _path, _unsupported(_operation), methods=[_method], include_in_schema=False, response_model=None
    )


@router.post("", response_model=Video, openapi_extra=_CREATE_BODY)
async def create_video(
    request: Request,
    jobs: JobsDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> Video:
    """Accept a generation job and return it queued; never waits for generation."""
    fields = await _create_fields(request)
    reference = fields.pop(REFERENCE_FIELD, None)
    image = None
    if reference not in (None, ""):
        image = read_image(reference if isinstance(reference, bytes) else _reference_object(reference))
    # The request, so a client that went away starts nothing (api.video.submit).
    view = await jobs.submit(_create_body(fields), idempotency_key, request, image)
    return view.to_video()


@router.post("/{video_id}/remix", response_model=Video, openapi_extra=_CREATE_BODY)
async def remix_video(
    video_id: str,
    request: Request,
    jobs: JobsDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> Video:
    """A new video from the caller's completed video ``video_id`` and a new prompt (the
    source's model, size and seconds unless the body gives others); queued, like a create."""
    fields = await _create_fields(request)
    if fields.pop(REFERENCE_FIELD, None) not in (None, ""):
        raise invalid(REFERENCE_FIELD, "a remix starts from its video and takes no input_reference")
    view = await jobs.remix(video_id, _create_body(fields), idempotency_key, request)
    return view.to_video()


def _create_body(fields: dict[str, Any]) -> VideoCreateRequest:
    try:
        return VideoCreateRequest.model_validate(fields)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**err, "loc": ("body", *err.get("loc", ()))} for err in exc.errors(include_url=False)]
        ) from None


@router.get("", response_model=VideoList)
async def list_videos(
    jobs: JobsDep,
    after: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Annotated[Literal["asc", "desc"], Query()] = "desc",
) -> VideoList:
    """The caller's videos, newest first by default; ``after`` is the previous page's ``last_id``."""
    views, has_more = await jobs.page(after, limit, order)
    data = [v.to_video() for v in views]
    return VideoList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=has_more,
    )


@router.get("/{video_id}", response_model=Video)
async def retrieve_video(video_id: str, jobs: JobsDep, response: Response) -> Video:
    """One video; ``openai-poll-after-ms`` tells pollers when to ask again."""
    view = await jobs.get(video_id)
    if not view.terminal:
        response.headers["openai-poll-after-ms"] = str(poll_after_ms(view))
    return view.to_video()


@router.delete("/{video_id}", response_model=VideoDeleted)
async def delete_video(video_id: str, jobs: JobsDep) -> VideoDeleted:
    """Cancel if running, delete the video, thumbnail and checkpoints, and forget the job."""
    await jobs.delete(video_id)
    return VideoDeleted(id=video_id)


@router.post("/{video_id}/cancel", response_model=Video)
async def cancel_video(video_id: str, jobs: JobsDep) -> Video:
    """Cancel a queued or running job (a running one stops at its next heartbeat)."""
    view = await jobs.cancel(video_id)
    return view.to_video()


@router.get("/{video_id}/content", response_model=None)
async def download_content(
    video_id: str,
    jobs: JobsDep,
    store: StoreDep,
    settings: SettingsDep,
    variant: Annotated[Literal["video", "thumbnail", "spritesheet", "preview"], Query()] = "video",
) -> Response:
    """The MP4 (or thumbnail): streamed from a local store, a redirect to a signed URL otherwise;
    410 once the video expired. ``preview``: the newest preview of a running job (404 before the
    first one and once the job ended)."""
    if variant == "preview":
        key = await jobs.preview_key(video_id)
        filename = f"{video_id}-preview.{key.rsplit('.', 1)[-1]}"
    elif variant == "spritesheet":
        key = await jobs.content_key(video_id, "spritesheet")
        filename = f"{video_id}-spritesheet.jpg"
    else:
        key = await jobs.content_key(video_id, variant)
        filename = f"{video_id}{'.mp4' if variant == 'video' else '.' + key.rsplit('.', 1)[-1]}"
    if not isinstance(store, LocalObjectStore):
        url = store.signed_url(key, settings.signed_url_ttl_seconds, filename=filename)
        return RedirectResponse(url, status_code=302)
    try:
        size = store.size(key)
        body = store.open_stream(key)
    except ObjectNotFound:
        raise ApiError(404, "not_found", "the video's content is gone") from None
    return StreamingResponse(
        body,
        media_type=content_type_for(key),
        headers={
            "Content-Length": str(size),
            "Content-Disposition": f'attachment; filename="{filename}"',
        },
    )


def _preview_event(view: JobView) -> dict[str, Any]:
    return {
        "object": "video.preview",
        "id": view.job_id,
        "attempt": view.attempt,
        "step": view.preview_step,
        "progress": view.progress,
        "url": f"{router.prefix}/{view.job_id}/content?variant=preview",
    }


@router.get("/{video_id}/events", response_model=None)
async def video_events(
    video_id: str,
    jobs: JobsDep,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=64)] = None,
) -> StreamingResponse:
    """Server-sent events: one ``video.updated`` snapshot per change, and a ``video.preview`` when
    a new preview lands (fetch it from ``content?variant=preview``); ends when the job does."""
    await jobs.get(video_id)  # 404 before the stream starts, not inside it

    async def stream() -> AsyncIterator[str]:
        yield "retry: 1000\n\n"
        sent = last_event_id
        sent_preview: str | None = None
        try:
            # Starlette cancels this generator when the client goes away.
            async for view in jobs.watch(video_id, last_event_id, SSE_MAX_SECONDS, SSE_KEEPALIVE_SECONDS):
                said = False
                if view.event_id() != sent:
                    sent = view.event_id()
                    payload = view.to_video().model_dump_json()
                    said = True
                    yield f"id: {sent}\nevent: video.updated\ndata: {payload}\n\n"
                if view.preview_key is not None and view.preview_key != sent_preview:
                    sent_preview = view.preview_key
                    said = True
                    # No id: a reconnect resumes from the last snapshot and gets the newest preview again.
                    yield f"event: video.preview\ndata: {json.dumps(_preview_event(view))}\n\n"
                if not said:
                    yield ": keep-alive\n\n"
        except ApiError as exc:
            # The job vanished (deleted) or Temporal went away mid-stream: say so and end.
            yield f"event: error\ndata: {json.dumps({'code': exc.code, 'message': exc.message})}\n\n"
        except (DBAPIError, PoolTimeoutError) as exc:
            if not is_connection_error(exc):
                raise
            # The database went away mid-stream: the headers are sent, so no 503; the client
            # reconnects (``retry:``) with Last-Event-ID and resumes.
            gone = {"code": SERVICE_UNAVAILABLE, "message": DATABASE_UNAVAILABLE_MESSAGE}
            yield f"event: error\ndata: {json.dumps(gone)}\n\n"

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
