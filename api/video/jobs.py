"""Video jobs as the API sees them: idempotent submit, state -> view, listing, cancel, delete.

Everything between the ``/v1/videos`` router and Temporal lives here. A job is one
``VideoJobWorkflow`` execution with workflow id ``video-<job id>`` (``workflows.video.ids``);
the API keeps no table of its own. What a job *is* (the request, its hash, who owns it) is
written once at start into the execution's memo and search attributes, so the API can answer
and list jobs from Temporal visibility even while no worker runs; what a job is *doing* comes
from the workflow's ``state`` query and, for live progress, from the pending generation
activity's heartbeat details (``DescribeWorkflowExecution``), which do not grow the history.
How those sources make one status is ``api.video.views``'s to say; the ETA is the capacity
tracker's.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta

from fastapi import Request
from sqlalchemy.orm import sessionmaker
from temporalio.api.common.v1 import WorkflowExecution as ExecutionRef
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError

from api.errors import ApiError, from_temporal, invalid, is_not_found, not_found
from api.schemas.video import VideoCreateRequest
from api.video.capacity import CapacityTracker
from api.video.memo import MEMO_KEY, WORKFLOW_TYPE, JobMemo
from api.video.submit import SubmitGate, VideoSubmission
from api.video.views import JobView, job_status, pending_generation, recorded_status
from leasehold.records.api_keys import Principal
from leasehold.records.video.deletions import deleted_by, is_deleted, record_deletion
from leasehold.settings import Settings
from leasehold.storage import ObjectStore
from workflows import search_attributes as sa
from workflows.video import models as video_models
from workflows.video.ids import derived_job_id, is_job_id, job_id_of, new_job_id, workflow_id
from workflows.video.job import VideoJobWorkflow
from workflows.video.models import VideoModelSpec
from workflows.video.types import (
    VideoJobState,
    VideoRequest,
    VideoStatus,
    job_object_prefix,
)

log = logging.getLogger(__name__)

# A GET must stay fast even when no orchestration worker can answer the state query; it then
# answers from the execution's description alone.
QUERY_TIMEOUT = timedelta(seconds=2)
# A download needs the result keys, which only the query has: worth waiting longer for.
CONTENT_QUERY_TIMEOUT = timedelta(seconds=10)
RPC_TIMEOUT = timedelta(seconds=5)
# A queued job's cancel is answered once the workflow has closed, which takes one workflow task.
CANCEL_WAIT_SECONDS = 5.0
# DELETE of a running job first lets the GPU stop and the workflow clean up its checkpoints.
DELETE_CANCEL_WAIT_SECONDS = 15.0
# Listing scans visibility; ascending order needs the whole range (SQL visibility cannot ORDER BY).
LIST_SCAN_LIMIT = 10_000
LIST_DESCRIBE_CONCURRENCY = 8
# How often the SSE stream and the cancel/delete waits look at a job.
WATCH_INTERVAL_SECONDS = 0.5


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
    """SHA-256 of the resolved request (defaults filled in): what "the same body" means."""
    return hashlib.sha256(request.model_dump_json().encode()).hexdigest()


# Validation -----------------------------------------------------------------------------


def _spec(model: str, settings: Settings) -> VideoModelSpec:
    spec = video_models.get_model(model) if model in settings.models else None
    if spec is None:
        raise invalid("model", f"unknown model {model!r}; served here: {', '.join(settings.models)}")
    return spec


def resolve_request(body: VideoCreateRequest, settings: Settings, job_id: str) -> VideoRequest:
    """The request with the model's defaults filled in; ``ApiError`` naming the field if out of range."""
    spec = _spec(body.model or settings.models[0], settings)
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
    seed = body.seed if body.seed is not None else default_seed(job_id)
    return VideoRequest(
        prompt=body.prompt,
        model=spec.name,
        seconds=seconds,
        width=width,
        height=height,
        seed=seed,
        steps=body.steps,
    )


# What a failed Temporal call tells the client (api.errors.from_temporal).
UNAVAILABLE = "the job service is temporarily unavailable; retry shortly"


class VideoJobs:
    """The caller's video jobs (one instance per request, scoped to one principal)."""

    def __init__(
        self,
        client: Client,
        settings: Settings,
        store: ObjectStore,
        db: sessionmaker,
        principal: Principal,
        capacity: CapacityTracker,
    ) -> None:
        self.client = client
        self.settings = settings
        self.store = store
        self.db = db
        self.principal = principal
        # Admission and ETAs.
        self.capacity = capacity

    # Submit -----------------------------------------------------------------------------

    async def submit(
        self, body: VideoCreateRequest, idempotency_key: str | None, request: Request | None = None
    ) -> JobView:
        """Accept a job (or answer the one this idempotency key already made): ``api.video.submit``."""
        if idempotency_key is not None and not 1 <= len(idempotency_key) <= 255:
            raise ApiError(400, "invalid_request", "Idempotency-Key must be 1-255 characters", "Idempotency-Key")
        job_id = job_id_for(self.principal, idempotency_key)
        resolved = resolve_request(body, self.settings, job_id)
        gate = request.app.state.video_submit_gate if request is not None else SubmitGate(1)
        submission = VideoSubmission(self.client, self.settings, self.db, self.principal, self.capacity, gate)
        return await submission.submit(
            job_id,
            resolved,
            request_hash(resolved),
            keyed=idempotency_key is not None,
            disconnected=request.is_disconnected if request is not None else None,
        )

    # Read -------------------------------------------------------------------------------

    def _handle(self, job_id: str) -> WorkflowHandle:
        return self.client.get_workflow_handle(workflow_id(job_id))

    async def _describe_owned(self, job_id: str) -> tuple[WorkflowExecutionDescription, JobMemo]:
        """The execution if it exists and belongs to the caller; 404 otherwise (never 403)."""
        if not is_job_id(job_id):
            raise not_found("video")
        try:
            desc = await self._handle(job_id).describe(rpc_timeout=RPC_TIMEOUT)
        except RPCError as exc:
            raise from_temporal(exc, UNAVAILABLE, missing=not_found("video")) from None
        memo = await self._owned_memo(desc)
        if memo is None or await asyncio.to_thread(is_deleted, self.db, job_id):
            raise not_found("video")
        return desc, memo

    async def _owned_memo(self, execution: WorkflowExecution) -> JobMemo | None:
        attrs = execution.typed_search_attributes
        if (
            execution.workflow_type != WORKFLOW_TYPE
            or attrs.get(sa.TENANT_ID) != self.principal.tenant_id
            or attrs.get(sa.USER_ID) != self.principal.user_id
        ):
            return None
        memo: JobMemo | None = await execution.memo_value(MEMO_KEY, None, type_hint=JobMemo)
        return memo

    async def _query_state(self, job_id: str, query_timeout: timedelta) -> VideoJobState | None:
        try:
            return await self._handle(job_id).query(VideoJobWorkflow.state, rpc_timeout=query_timeout)
        except (RPCError, WorkflowQueryFailedError) as exc:
            log.info("state query of %s unanswered (%s); answering from the description", job_id, exc)
            return None

    async def get(self, job_id: str, with_query: bool = True, query_timeout: timedelta = QUERY_TIMEOUT) -> JobView:
        """The caller's job ``job_id`` (404 if it is missing, deleted, or someone else's)."""
        desc, memo = await self._describe_owned(job_id)
        state = await self._query_state(job_id, query_timeout) if with_query else None
        if state is not None and state.deleted:
            raise not_found("video")
        return await self._view(job_id, memo, desc, state)

    async def _view(
        self,
        job_id: str,
        memo: JobMemo,
        execution: WorkflowExecution,
        state: VideoJobState | None,
    ) -> JobView:
        """The view of one job from what was read of it: the execution (from a listing, or
        described), and the workflow's ``state`` when the query was asked and answered."""
        desc = execution if isinstance(execution, WorkflowExecutionDescription) else None
        generation = await pending_generation(self.client.data_converter, desc) if desc is not None else None
        recorded = (
            state.status if state is not None else recorded_status(execution.typed_search_attributes.get(sa.JOB_STATE))
        )
        # Described and open: the pending generation activity says whether an attempt runs.
        generating = None
        if desc is not None and execution.status == WorkflowExecutionStatus.RUNNING:
            generating = generation is not None and generation.started
        view = JobView(
            job_id=job_id,
            memo=memo,
            owner=self.principal,
            status=job_status(execution.status, recorded, generating),
            start_time=execution.start_time,
            completed_at=execution.close_time,
        )
        if state is not None:
            view.attempt = state.attempts_started
            view.state = state
            view.completed_at = state.completed_at or view.completed_at
            view.expires_at = state.expires_at
            if state.result is not None:
                view.attempt = max(view.attempt, state.result.attempt)
        if generation is not None and not view.terminal:
            view.attempt = max(view.attempt, generation.attempts_started)
            view.attempt_started_at = generation.started_at
            progress = generation.progress
            if progress is not None and progress.total_steps > 0:
                step = progress.step if generation.started else progress.checkpoint_step
                # 100 means done; a job at its last step is still encoding.
                view.progress = min(99, int(100 * step / progress.total_steps))
        if view.status is VideoStatus.COMPLETED:
            view.progress = 100
            if view.expires_at is None and view.completed_at is not None:
                view.expires_at = view.completed_at + timedelta(seconds=memo.expires_after_seconds)
        view.estimate = self.capacity.estimate(view)
        return view

    # List -------------------------------------------------------------------------------

    def _list_query(self) -> str:
        # Tenant and user ids are restricted to [A-Za-z0-9_.-] when keys are created, so they
        # need no escaping inside the quotes; the check keeps that assumption explicit.
        for value in (self.principal.tenant_id, self.principal.user_id):
            if '"' in value or "\\" in value:
                raise ApiError(400, "invalid_request", "caller id cannot be used in a visibility query")
        return (
            f'WorkflowType = "{WORKFLOW_TYPE}" AND TenantId = "{self.principal.tenant_id}" '
            f'AND UserId = "{self.principal.user_id}"'
        )

    async def page(self, after: str | None, limit: int, order: str) -> tuple[list[JobView], bool]:
        """One page of the caller's jobs by creation time, and whether more follow."""
        query = self._list_query()
        after_key: tuple[datetime, str] | None = None
        if after is not None:
            try:
                desc, _memo = await self._describe_owned(after)
            except ApiError as exc:
                if exc.status == 404:
                    raise invalid("after", f"no video {after!r} to list after") from None
                raise
            after_key = (desc.start_time, after)
            bound = _visibility_time(desc.start_time)
            query += f' AND StartTime {"<=" if order == "desc" else ">="} "{bound}"'
        rows: list[tuple[tuple[datetime, str], WorkflowExecution]] = []
        # Deleted jobs may linger in visibility until Temporal removes them.
        deleted = await asyncio.to_thread(deleted_by, self.db, self.principal.tenant_id, self.principal.user_id)
        try:
            # Visibility returns newest first and cannot sort otherwise; a page in ascending
            # order therefore reads the whole range (up to a cap).
            async for execution in self.client.list_workflows(
                query, limit=LIST_SCAN_LIMIT, page_size=min(1000, limit + 1) if order == "desc" else 1000
            ):
                key = (execution.start_time, job_id_of(execution.id))
                if key[1] in deleted:
                    continue
                if after_key is not None and (key >= after_key if order == "desc" else key <= after_key):
                    continue
                if order == "desc" and len(rows) > limit and execution.start_time != rows[-1][0][0]:
                    break  # enough rows, and the last start time's ties are all in
                rows.append((key, execution))
        except RPCError as exc:
            raise from_temporal(exc, UNAVAILABLE) from exc
        rows.sort(key=lambda row: row[0], reverse=order == "desc")
        has_more = len(rows) > limit
        page = rows[:limit]
        views = await self._list_views([execution for _key, execution in page])
        return views, has_more

    async def _list_views(self, executions: Sequence[WorkflowExecution]) -> list[JobView]:
        gate = asyncio.Semaphore(LIST_DESCRIBE_CONCURRENCY)

        async def one(execution: WorkflowExecution) -> JobView | None:
            memo = await self._owned_memo(execution)
            if memo is None:
                return None
            job_id = job_id_of(execution.id)
            if execution.status != WorkflowExecutionStatus.RUNNING:
                return await self._view(job_id, memo, execution, None)
            # Running jobs: their live progress is one cheap describe away.
            async with gate:
                try:
                    desc = await self._handle(job_id).describe(rpc_timeout=RPC_TIMEOUT)
                except RPCError:
                    return await self._view(job_id, memo, execution, None)
            return await self._view(job_id, memo, desc, None)

        views = await asyncio.gather(*(one(e) for e in executions))
        return [v for v in views if v is not None]

    # Cancel and delete ------------------------------------------------------------------

    async def cancel(self, job_id: str) -> JobView:
        """Request cancellation; a queued job is answered once cancelled, a running one at once."""
        view = await self.get(job_id)
        if view.terminal:
            if view.status is VideoStatus.CANCELLED:
                return view
            raise ApiError(409, "invalid_state", f"the video is already {view.status.value}; nothing to cancel")
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
        # The tombstone makes the job 404 at once; Temporal forgets the execution on its own
        # schedule (asynchronously, or at retention on a dev server).
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
            log.warning("could not delete the execution of %s: %s", job_id, exc.status)

    def _delete_objects(self, job_id: str) -> None:
        # The video, the thumbnail, and anything a stale attempt left behind.
        removed = self.store.delete_prefix(job_object_prefix(job_id) + "/")
        log.info("deleted %d objects of %s", removed, job_id)

    # Content and events -----------------------------------------------------------------

    async def content_key(self, job_id: str, variant: str) -> str:
        """The store key of a completed job's video or thumbnail."""
        view = await self.get(job_id, query_timeout=CONTENT_QUERY_TIMEOUT)
        result = view.state.result if view.state is not None else None
        if view.status is VideoStatus.COMPLETED and result is None:
            raise ApiError(503, "temporarily_unavailable", "the video's location cannot be read right now; retry")
        if view.status is not VideoStatus.COMPLETED or result is None:
            raise ApiError(
                409, "video_not_ready", f"the video is {view.status.value}; content exists once it is completed"
            )
        return result.video_key if variant == "video" else result.thumbnail_key

    async def watch(self, job_id: str, last_event_id: str | None, max_seconds: float) -> AsyncIterator[JobView]:
        """Snapshots of the job whenever status, progress or attempt change, until it ends.

        Each event is a full snapshot, so resuming needs only the latest one: the snapshot whose
        id the client already has (``Last-Event-ID``) is not sent again.
        """
        last = last_event_id
        deadline = time.monotonic() + max_seconds
        while True:
            view = await self.get(job_id)
            if view.event_id() != last:
                last = view.event_id()
                yield view
            if view.terminal or time.monotonic() >= deadline:
                return
            await asyncio.sleep(WATCH_INTERVAL_SECONDS)


def _visibility_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
