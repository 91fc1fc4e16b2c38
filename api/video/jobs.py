"""Video jobs as the API sees them: submit, row -> view, listing, cancel, delete, content, events.

Everything between the ``/v1/videos`` router and its stores lives here. A job is one
``VideoJobWorkflow`` execution with workflow id ``video-<job id>`` (``workflows.video.ids``),
and one row of the read model (``video_jobs``): the API inserts it when it accepts the job,
the workflow writes its state there at every transition, the lifecycle marks it expired. Every
read answers from that row (one indexed query that checks the owner), so status, listings and
content outlive the engine's retention; only the live progress of a running job comes from the
engine (the pending generation activity's heartbeat details, ``api.video.live``, described at
most once a second per job). Cancel and delete still ask the engine to act. How those sources
make one status is ``api.video.views``'s to say; the ETA is the capacity tracker's.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from fastapi import Request
from temporalio.api.common.v1 import WorkflowExecution as ExecutionRef
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError

from api.errors import ApiError, from_temporal, invalid, is_not_found, not_found
from api.schemas.video import VideoCreateRequest
from api.video.live import LiveProgress
from api.video.reference import ReferenceImage, job_reference
from api.video.remix import FIELD as REMIX_FIELD
from api.video.remix import check_remixes, remix_body, remixable, source_video
from api.video.spritesheet import spritesheet_of
from api.video.submit import CallerVideos, StoredReference, SubmitGate, VideoSubmission
from api.video.views import JobView, row_view
from leasehold.records.api_keys import Principal
from leasehold.records.video.deletions import record_deletion
from leasehold.records.video.job_reads import CursorNotFound, JobRow, owned_job, owned_page
from leasehold.settings import Settings
from leasehold.storage import ObjectNotFound, ObjectStore
from workflows.video import models as video_models
from workflows.video.ids import derived_job_id, is_job_id, new_job_id, workflow_id
from workflows.video.models import VideoModelSpec
from workflows.video.types import SourceVideo, VideoRequest, VideoStatus, job_object_prefix

log = logging.getLogger(__name__)

RPC_TIMEOUT = timedelta(seconds=5)
# A queued job's cancel is answered once the workflow has closed, which takes one workflow task.
CANCEL_WAIT_SECONDS = 5.0
# DELETE of a running job first lets the GPU stop and the workflow clean up its checkpoints.
DELETE_CANCEL_WAIT_SECONDS = 15.0
# How often the SSE stream and the cancel/delete waits look at a job.
WATCH_INTERVAL_SECONDS = 0.5
# A stream with nothing new says it is alive this often (an SSE comment, which clients skip),
# so neither a client's read timeout nor a proxy's idle timeout ends it while a job waits.
SSE_KEEPALIVE_SECONDS = 15.0


# Ids ------------------------------------------------------------------------------------


def job_id_for(principal: Principal, idempotency_key: str | None) -> str:
    """A fresh random id, or one derived from the caller and the key (the same key -> the same job)."""
    if idempotency_key is None:
        return new_job_id()
    return derived_job_id(principal.tenant_id, principal.user_id, idempotency_key)


def default_seed(job_id: str) -> int:
    """A seed fixed by the job id, so an idempotent retry without a seed asks for the same video."""
    return int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:8], "big") & (2**63 - 1)


def request_hash(request: VideoRequest) -> str:
    """SHA-256 of the resolved request (defaults filled in): what "the same body" means.

    A text-to-video request hashes as it did before ``input_reference`` and ``source_video``
    existed, so keys used before then still replay; an image's or a source video's hash (in
    its reference) is part of the body."""
    exclude = {name for name in ("input_reference", "source_video") if getattr(request, name) is None}
    return hashlib.sha256(request.model_dump_json(exclude=exclude or None).encode()).hexdigest()


# Validation -----------------------------------------------------------------------------


def _spec(model: str, settings: Settings) -> VideoModelSpec:
    spec = video_models.get_model(model) if model in settings.models else None
    if spec is None:
        raise invalid("model", f"unknown model {model!r}; served here: {', '.join(settings.models)}")
    return spec


def resolve_request(
    body: VideoCreateRequest,
    settings: Settings,
    job_id: str,
    image: ReferenceImage | None = None,
    source: SourceVideo | None = None,
) -> VideoRequest:
    """The request with the model's defaults filled in; ``ApiError`` naming the field if out of range
    (``input_reference``: an image the model cannot take, or one not of the video's size;
    ``model``: a remix's model that cannot remix)."""
    spec = _spec(body.model or settings.models[0], settings)
    if source is not None:
        check_remixes(spec)
    size = body.size or spec.default_size
    if not spec.accepts_size(size):
        raise invalid("size", f"size {size} is not offered by {spec.name}; allowed: {', '.join(spec.sizes)}")
    seconds = body.seconds if body.seconds is not None else spec.default_seconds
    if not spec.accepts_seconds(seconds):
        raise invalid(
            "seconds",
            f"seconds must be between {spec.min_seconds} and {spec.max_seconds} for {spec.name} (got {seconds})",
        )
    if body.steps is not None and body.steps > spec.max_steps:
        raise invalid("steps", f"steps must be at most {spec.max_steps} for {spec.name} (got {body.steps})")
    width, height = video_models.parse_size(size)
    reference = job_reference(job_id, spec, image, size)
    seed = body.seed if body.seed is not None else default_seed(job_id)
    return VideoRequest(
        prompt=body.prompt,
        model=spec.name,
        seconds=seconds,
        width=width,
        height=height,
        seed=seed,
        steps=body.steps,
        input_reference=reference,
        source_video=source,
    )


# What a failed Temporal call tells the client (api.errors.from_temporal).
UNAVAILABLE = "the job service is temporarily unavailable; retry shortly"


@dataclass(eq=False)
class VideoJobs(CallerVideos):
    """The caller's video jobs (one instance per request, scoped to one principal)."""

    store: ObjectStore
    # The process's cache of describes of running jobs (live progress).
    live: LiveProgress

    @classmethod
    def of_app(cls, state: Any, principal: Principal) -> VideoJobs:
        """The caller's jobs over the process's parts in ``app.state`` (both API surfaces)."""
        return cls(
            state.temporal, state.settings, state.db, principal, state.video_capacity, state.store, state.video_live
        )

    # Submit -----------------------------------------------------------------------------

    async def submit(
        self,
        body: VideoCreateRequest,
        idempotency_key: str | None,
        request: Request | None = None,
        image: ReferenceImage | None = None,
    ) -> JobView:
        """Accept a job (or answer the one this idempotency key already made): ``api.video.submit``.
        ``image``: an image-to-video job's first frame (``api.video.reference``)."""
        job_id = self._job_id(idempotency_key)
        resolved = resolve_request(body, self.settings, job_id, image)
        stored = None if image is None else image.data
        return await self._submit(job_id, resolved, idempotency_key, request, stored)

    async def remix(
        self, video_id: str, body: VideoCreateRequest, idempotency_key: str | None, request: Request | None = None
    ) -> JobView:
        """A new job remixing the caller's finished video ``video_id`` (``api.video.remix``)."""
        source = await self.get(video_id)
        result = remixable(source)
        job_id = self._job_id(idempotency_key)
        try:
            data = await asyncio.to_thread(self.store.get, result.video_key)
        except ObjectNotFound:
            raise invalid(REMIX_FIELD, f"video {video_id}'s content is gone: it cannot be remixed") from None
        resolved = resolve_request(
            remix_body(source, result, body), self.settings, job_id, source=source_video(job_id, source, result, data)
        )
        return await self._submit(job_id, resolved, idempotency_key, request, data)

    def _job_id(self, idempotency_key: str | None) -> str:
        if idempotency_key is not None and not 1 <= len(idempotency_key) <= 255:
            raise ApiError(400, "invalid_request", "Idempotency-Key must be 1-255 characters", "Idempotency-Key")
        return job_id_for(self.principal, idempotency_key)

    async def _submit(
        self,
        job_id: str,
        resolved: VideoRequest,
        idempotency_key: str | None,
        request: Request | None,
        stored: bytes | None,
    ) -> JobView:
        """Submit ``resolved``; ``stored``: the bytes of its input (image or source video)."""
        gate = request.app.state.video_submit_gate if request is not None else SubmitGate(1)
        submission = VideoSubmission(self.client, self.settings, self.db, self.principal, self.capacity, gate)
        return await submission.submit(
            job_id,
            resolved,
            request_hash(resolved),
            keyed=idempotency_key is not None,
            disconnected=request.is_disconnected if request is not None else None,
            reference=None if stored is None else StoredReference(self.store, stored),
        )

    # Read -------------------------------------------------------------------------------

    def _handle(self, job_id: str) -> WorkflowHandle:
        return self.client.get_workflow_handle(workflow_id(job_id))

    async def _record(self, job_id: str) -> JobRow:
        """The caller's row of ``job_id``; 404 if it is missing, deleted, or someone else's."""
        if not is_job_id(job_id):
            raise not_found("video")
        record = await asyncio.to_thread(owned_job, self.db, job_id, self.principal.tenant_id, self.principal.user_id)
        if record is None:
            raise not_found("video")
        return record

    async def get(self, job_id: str) -> JobView:
        """The caller's job ``job_id`` (404 if it is missing, deleted, or someone else's)."""
        return await self._view(await self._record(job_id))

    async def _view(self, record: JobRow) -> JobView:
        """The view of a row; a running job's live progress is added from the engine (cached)."""
        live = await self.live.of(record.job_id) if record.status == VideoStatus.IN_PROGRESS.value else None
        if live is not None and live.status is not None:
            view = row_view(record, self.principal, live.status, live.generation, live.closed_at)
        else:
            view = row_view(record, self.principal)
        view.estimate = self.capacity.estimate(view)
        return view

    # List -------------------------------------------------------------------------------

    async def page(self, after: str | None, limit: int, order: str) -> tuple[list[JobView], bool]:
        """One page of the caller's jobs by creation time, and whether more follow."""
        if after is not None and not is_job_id(after):
            raise invalid("after", f"no video {after!r} to list after")
        try:
            records = await asyncio.to_thread(
                owned_page,
                self.db,
                self.principal.tenant_id,
                self.principal.user_id,
                after,
                limit,
                order == "desc",
            )
        except CursorNotFound:
            raise invalid("after", f"no video {after!r} to list after") from None
        views = await asyncio.gather(*(self._view(record) for record in records[:limit]))
        return list(views), len(records) > limit

    # Cancel and delete ------------------------------------------------------------------

    async def cancel(self, job_id: str) -> JobView:
        """Request cancellation; a queued job is answered once cancelled, a running one at once."""
        record = await self._record(job_id)
        view = await self._view(record)
        if view.terminal:
            if view.status is VideoStatus.CANCELLED:
                return view
            raise ApiError(409, "invalid_state", f"the video is already {view.status.value}; nothing to cancel")
        if not record.engine_started:
            # Accepted, and its workflow not started yet (the submit's outbox starts it shortly).
            raise ApiError(409, "not_started", "the video is being started; retry the cancel in a moment")
        try:
            await self._handle(job_id).cancel(rpc_timeout=RPC_TIMEOUT)
        except RPCError as exc:
            raise from_temporal(exc, UNAVAILABLE, missing=not_found("video")) from None
        if view.status is VideoStatus.QUEUED:
            view = await self._wait_terminal(job_id, CANCEL_WAIT_SECONDS) or view
        return view

    async def _wait_terminal(self, job_id: str, wait_seconds: float) -> JobView | None:
        deadline = time.monotonic() + wait_seconds
        latest: JobView | None = None
        while time.monotonic() < deadline:
            latest = await self.get(job_id)
            if latest.terminal:
                return latest
            await asyncio.sleep(WATCH_INTERVAL_SECONDS)
        return latest

    async def delete(self, job_id: str) -> None:
        """Cancel if running, delete the stored assets, then forget the job (GET -> 404)."""
        view = await self.get(job_id)
        handle = self._handle(job_id)
        if not view.terminal:
            try:
                await handle.cancel(rpc_timeout=RPC_TIMEOUT)
            except RPCError as exc:
                if not is_not_found(exc):
                    raise from_temporal(exc, UNAVAILABLE) from exc
            # Let the GPU stop and the workflow delete its checkpoints before the execution goes.
            await self._wait_terminal(job_id, DELETE_CANCEL_WAIT_SECONDS)
        await asyncio.to_thread(self._delete_objects, job_id)
        # The tombstone makes the job 404 at once, and keeps it so when a late snapshot of the
        # workflow lands in its row; Temporal forgets the execution on its own schedule.
        await asyncio.to_thread(record_deletion, self.db, job_id, self.principal.tenant_id, self.principal.user_id)
        try:
            await self.client.workflow_service.delete_workflow_execution(
                DeleteWorkflowExecutionRequest(
                    namespace=self.client.namespace,
                    workflow_execution=ExecutionRef(workflow_id=workflow_id(job_id)),
                ),
                retry=True,
                timeout=RPC_TIMEOUT,
            )
        except RPCError as exc:
            # The job is already deleted for every caller; the execution goes at retention.
            if not is_not_found(exc):
                log.warning("could not delete the execution of %s: %s", job_id, exc.status)

    def _delete_objects(self, job_id: str) -> None:
        # The video, the thumbnail, and anything a stale attempt left behind.
        removed = self.store.delete_prefix(job_object_prefix(job_id) + "/")
        log.info("deleted %d objects of %s", removed, job_id)

    # Content and events -----------------------------------------------------------------

    async def content_key(self, job_id: str, variant: str) -> str:
        """The store key of a completed job's video, thumbnail or spritesheet (from its row's
        result; 404 for a spritesheet of a job made before they were kept)."""
        view = await self.get(job_id)
        if view.status is VideoStatus.EXPIRED:
            raise ApiError(
                410, "video_expired", "the video expired and its content was deleted; the job's record remains"
            )
        result = view.state.result if view.state is not None else None
        if view.status is VideoStatus.COMPLETED and result is None:
            raise ApiError(503, "temporarily_unavailable", "the video's location cannot be read right now; retry")
        if view.status is not VideoStatus.COMPLETED or result is None:
            raise ApiError(
                409, "video_not_ready", f"the video is {view.status.value}; content exists once it is completed"
            )
        if variant == "spritesheet":
            return spritesheet_of(result.spritesheet_key)
        return result.video_key if variant == "video" else result.thumbnail_key

    async def preview_key(self, job_id: str) -> str:
        """The store key of a running job's newest preview; 404 before the first one and after the end."""
        view = await self.get(job_id)
        if view.terminal:
            raise ApiError(
                404,
                "preview_not_available",
                f"the video is {view.status.value}; previews exist only while it generates",
            )
        if view.preview_key is None:
            raise ApiError(404, "preview_not_available", "no preview yet; the first comes a few steps into generation")
        return view.preview_key

    async def watch(
        self, job_id: str, last_event_id: str | None, max_seconds: float, idle_seconds: float | None = None
    ) -> AsyncIterator[JobView]:
        """Snapshots of the job whenever status, progress, attempt or preview change, until it ends.

        Each event is a full snapshot, so resuming needs only the latest one: the snapshot whose
        id the client already has (``Last-Event-ID``) is not sent again. Each look is one
        indexed row read, plus the cached describe while the job runs. With ``idle_seconds``,
        an unchanged snapshot is yielded again after that long without a change, so that a
        stream can say it is alive (a queued job may wait minutes without one).
        """
        last = last_event_id
        last_preview: str | None = None
        deadline = time.monotonic() + max_seconds
        yielded = time.monotonic()
        while True:
            view = await self.get(job_id)
            changed = view.event_id() != last or view.preview_key != last_preview
            if changed or (idle_seconds is not None and time.monotonic() - yielded >= idle_seconds):
                last = view.event_id()
                last_preview = view.preview_key
                yielded = time.monotonic()
                yield view
            if view.terminal or time.monotonic() >= deadline:
                return
            await asyncio.sleep(WATCH_INTERVAL_SECONDS)
