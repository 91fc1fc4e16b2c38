"""The submit path of video jobs: a reservation in SQL, then one engine call.

A submit is acknowledged once its ``video_jobs`` row is committed; the workflow start follows.

1. **Idempotency from SQL.** An Idempotency-Key derives the job id (``job_id_for``). If that
   job's row exists, the same body gets the job back from the row and the engine is not called;
   another body, or a deleted job's key, is a 409.
2. **Reservation.** One transaction per submit, serialised per user across every API replica:
   ``pg_advisory_xact_lock`` of the user on Postgres, ``BEGIN IMMEDIATE`` on SQLite (one writer
   at a time, whichever process). Inside it: the user's queued jobs are counted (the per-user
   cap, exact however many replicas race) and the row is inserted (version 0, ``queued``,
   ``engine_started`` false). Nothing slow runs under the lock.
3. **Start.** ``start_workflow`` with ``USE_EXISTING``, the only engine call on this path; the
   row is then marked started. If Temporal does not answer, the submit is still acknowledged
   (200 and the queued job, the OpenAI shape as always): the row is committed, so the job is in
   its owner's list and counts against the cap, and the outbox starter (``OutboxStarter``)
   starts it within seconds of Temporal's return.

The outbox starter runs in every API process. Several replicas may start the same row; the
start is idempotent by workflow id, so the job starts once. A client that went away before its
reservation starts nothing; a process with too many submits in flight sheds new ones with 503
and ``Retry-After`` instead of making them wait past their client's patience.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import FastAPI
from sqlalchemy import exists, func, select, text, update
from sqlalchemy.orm import Session, sessionmaker
from temporalio.client import Client
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from api.background import stop_state_task
from api.errors import ApiError
from api.video.admission import admit, check_queued_cap, route
from api.video.capacity import CapacityTracker
from api.video.memo import MEMO_KEY, JobMemo
from api.video.views import JobView, row_view
from leasehold.db_retry import is_connection_error
from leasehold.records.api_keys import Principal
from leasehold.records.video.deletions import VideoDeletion
from leasehold.records.video.jobs import VideoJobRecord
from leasehold.settings import Settings
from leasehold.storage import ObjectStore
from video_policy.admission import Admission, queued_limit
from workflows import search_attributes as sa
from workflows.queues import capacity_order, orchestration_queue, video_queue
from workflows.video.ids import workflow_id
from workflows.video.job import VideoJobWorkflow
from workflows.video.types import InputReference, VideoJobInput, VideoJobState, VideoRequest, VideoStatus

log = logging.getLogger(__name__)

START_TIMEOUT = timedelta(seconds=5)
# A shed submit is worth retrying about this soon: a burst passes in a second or two.
SHED_RETRY_AFTER_SECONDS = 2
# Rows the outbox starter takes per pass.
OUTBOX_BATCH = 200
# The client closed the connection before its job was reserved (nginx's code for it).
CLIENT_CLOSED = 499


def user_lock_key(tenant_id: str, user_id: str) -> int:
    """The user's 64-bit advisory lock key (signed, as Postgres takes it)."""
    digest = hashlib.sha256(f"video-submit\n{tenant_id}\n{user_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _aware(value: datetime) -> datetime:
    # SQLite hands back naive datetimes for timezone-aware columns; they were written in UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


# Overload -------------------------------------------------------------------------------


class SubmitGate:
    """Submits in flight in this process; past ``limit`` a new one is shed with 503.

    Queueing it instead would answer after the client gave up, and a timed-out client retries,
    adding load exactly when there is too much.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        if self.in_flight >= self.limit:
            raise ApiError(
                503,
                "overloaded",
                "too many videos are being submitted right now; retry shortly",
                headers={"Retry-After": str(SHED_RETRY_AFTER_SECONDS)},
                extra={"retry_after": SHED_RETRY_AFTER_SECONDS},
            )
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1


# The start ------------------------------------------------------------------------------


def _owner(job_id: str, principal: Principal | VideoJobRecord) -> dict[str, Any]:
    """Whose job it is, as its state, its row and (from the row) its start input name it."""
    return {"job_id": job_id, "tenant_id": principal.tenant_id, "user_id": principal.user_id, "tier": principal.tier}


def job_input_of(record: VideoJobRecord, settings: Settings) -> VideoJobInput:
    """The workflow's start input, from the job's row (the submit and the outbox start alike)."""
    request = VideoRequest.model_validate(record.state["request"])
    gpu_class = record.state.get("gpu_class")
    # Reserved and preemptible capacity: the job's tier picks its first queue, the other is its fallback.
    first, then = capacity_order(record.tier) if settings.video_capacity_types else (None, None)
    return VideoJobInput(
        **_owner(record.job_id, record),
        request=request,
        request_hash=record.request_hash,
        created_at=_aware(record.created_at),
        gpu_class=gpu_class,
        generate_queue=video_queue(request.model, settings.queue_prefix, gpu_class, first),
        fallback_queue=video_queue(request.model, settings.queue_prefix, gpu_class, then) if then else None,
        fallback_after_seconds=settings.video_capacity_fallback_seconds,
        housekeeping_queue=orchestration_queue(settings.queue_prefix),
        heartbeat_timeout_seconds=settings.video_heartbeat_timeout_seconds,
        checkpoint_interval_seconds=settings.checkpoint_interval_seconds,
        fairness_key=record.fairness_key,
        fairness_weight=record.fairness_weight,
    )


def memo_of(job_input: VideoJobInput) -> JobMemo:
    """The execution's memo (what listings of the engine show) for ``job_input``."""
    return JobMemo(
        **job_input.request.model_dump(),
        request_hash=job_input.request_hash,
        created_at=job_input.created_at.timestamp(),
        expires_after_seconds=job_input.expires_after_seconds,
        fairness_key=job_input.fairness_key,
        fairness_weight=job_input.fairness_weight,
    )


async def start_job(client: Client, settings: Settings, job_input: VideoJobInput) -> None:
    """Start the job's workflow, or find it started: idempotent by workflow id. Raises ``RPCError``."""
    memo = memo_of(job_input)
    try:
        await client.start_workflow(
            VideoJobWorkflow.run,
            job_input,
            id=workflow_id(job_input.job_id),
            task_queue=orchestration_queue(settings.queue_prefix),
            # Started already and running -> that run; started and closed -> refused below. Either
            # way never a second job for one id.
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            memo={MEMO_KEY: memo.model_dump(mode="json")},
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(sa.TENANT_ID, job_input.tenant_id),
                    SearchAttributePair(sa.USER_ID, job_input.user_id),
                    SearchAttributePair(sa.MODEL_VERSION, job_input.request.model),
                    SearchAttributePair(sa.TIER, job_input.tier),
                    SearchAttributePair(sa.JOB_STATE, VideoStatus.QUEUED.value),
                ]
            ),
            rpc_timeout=START_TIMEOUT,
        )
    except WorkflowAlreadyStartedError:
        pass  # it ran and closed already: started is what we wanted to know


def mark_started(db: sessionmaker, job_ids: list[str]) -> None:
    """Record that these jobs' workflows exist (the outbox has nothing left to do for them)."""
    if not job_ids:
        return
    with db.begin() as session:
        session.execute(update(VideoJobRecord).where(VideoJobRecord.job_id.in_(job_ids)).values(engine_started=True))


# The submit -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredReference:
    """An image-to-video job's image or a remix's source video, to store under the job once the
    job is about to be reserved."""

    store: ObjectStore
    data: bytes

    def put(self, reference: InputReference) -> bool:
        """Store it; whether this call created the object (``False``: a replay already had)."""
        if self.store.exists(reference.key):
            # Named by its content: the object there is these bytes, and another job's row may
            # point at it (a replayed key), so this submit must not remove it on a refusal.
            return False
        self.store.put(reference.key, self.data, reference.content_type)
        return True

    def remove(self, reference: InputReference) -> None:
        try:
            self.store.delete(reference.key)
        except Exception as exc:  # a leftover image is only a stray object under the job's prefix
            log.warning("removing %s of a refused submit failed: %s", reference.key, exc)


@dataclass(eq=False)
class CallerVideos:
    """What serving one caller's videos takes (one instance per request, scoped to one principal)."""

    client: Client
    settings: Settings
    db: sessionmaker
    principal: Principal
    # Admission and ETAs.
    capacity: CapacityTracker


@dataclass(eq=False)
class VideoSubmission(CallerVideos):
    """Submits of one caller (one instance per request)."""

    gate: SubmitGate

    async def submit(
        self,
        job_id: str,
        request: VideoRequest,
        digest: str,
        keyed: bool,
        disconnected: Callable[[], Awaitable[bool]] | None = None,
        reference: StoredReference | None = None,
    ) -> JobView:
        """Accept ``request`` as job ``job_id`` (or answer the job a replayed key made).
        ``reference``: the bytes of ``request.input_reference`` (or ``source_video``), stored only
        if the job is accepted."""
        with self.gate.slot():
            if keyed:
                replay = await asyncio.to_thread(self._replay, job_id, digest)
                if replay is not None:
                    replay.estimate = self.capacity.estimate(replay)
                    return replay
            await self.capacity.ready()
            # Refusals for size (no GPU class holds it) and capacity (no worker, a free wait too
            # long) come first: they need no lock.
            gpu_class = route(self.capacity, self.settings, request)
            admission = admit(self.capacity, self.settings, self.principal, request.model, gpu_class)
            if disconnected is not None and await disconnected():
                raise ApiError(CLIENT_CLOSED, "client_closed_request", "the client went away; nothing was started")
            now = datetime.now(UTC)
            stored = request.input_reference or request.source_video
            created = False
            if reference is not None and stored is not None:
                # Before the row: a committed job always finds its input.
                created = await asyncio.to_thread(reference.put, stored)
            try:
                reserved = await asyncio.to_thread(self._reserve, job_id, request, digest, admission, now, gpu_class)
            except BaseException:
                if created and reference is not None and stored is not None:
                    await asyncio.to_thread(reference.remove, stored)
                raise
            if isinstance(reserved, JobView):
                # The same key raced in from another replica and won: that job, as a replay.
                reserved.estimate = self.capacity.estimate(reserved)
                return reserved
            job_input, view = reserved
            self.capacity.record_submit(view)
            try:
                await start_job(self.client, self.settings, job_input)
            except RPCError as exc:
                # Acknowledged all the same: the row is committed and the outbox starts it.
                log.warning("start of %s deferred to the outbox: %s", job_id, exc.status)
            else:
                try:
                    await asyncio.to_thread(mark_started, self.db, [job_id])
                except Exception as exc:
                    if not is_connection_error(exc):
                        raise
                    # The job was accepted and started: answer it. Its row still says "not
                    # started", so the outbox starts it again later, which finds the workflow
                    # running (same id) and marks it; a 503 here would invite a second submit.
                    log.warning("marking %s started deferred to the outbox: %s", job_id, type(exc).__name__)
            view.estimate = self.capacity.estimate(view)
            return view

    def _replay(self, job_id: str, digest: str) -> JobView | None:
        with self.db() as session:
            return self._existing(session, job_id, digest)

    def _existing(self, session: Session, job_id: str, digest: str) -> JobView | None:
        """The job an earlier submit with this key made, if any; 409 for a deleted one or another body."""
        if session.get(VideoDeletion, job_id) is not None:
            raise ApiError(
                409,
                "idempotency_key_reused",
                "the video created with this Idempotency-Key was deleted; use a new key",
                "Idempotency-Key",
            )
        record = session.get(VideoJobRecord, job_id)
        if record is None:
            return None
        # Derived ids include the owner, so the row is the caller's; checked all the same.
        if record.tenant_id != self.principal.tenant_id or record.user_id != self.principal.user_id:
            raise ApiError(409, "idempotency_key_reused", "this Idempotency-Key cannot be used", "Idempotency-Key")
        if record.request_hash != digest:
            raise ApiError(
                409,
                "idempotency_key_reused",
                "this Idempotency-Key was already used with a different request body; "
                "use a new key for a different video",
                "Idempotency-Key",
            )
        return row_view(record, self.principal)

    def _lock_user(self, session: Session) -> None:
        connection = session.connection()
        if connection.dialect.name == "postgresql":
            key = user_lock_key(self.principal.tenant_id, self.principal.user_id)
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
        else:
            # SQLite has no row locks; an IMMEDIATE transaction takes the write lock now, so
            # count-then-insert runs one writer at a time across every process on the file.
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    def _reserve(
        self,
        job_id: str,
        request: VideoRequest,
        digest: str,
        admission: Admission,
        now: datetime,
        gpu_class: str | None = None,
    ) -> tuple[VideoJobInput, JobView] | JobView:
        principal = self.principal
        with self.db() as session:
            self._lock_user(session)
            existing = self._existing(session, job_id, digest)
            if existing is not None:
                return existing
            queued = session.scalar(
                select(func.count())
                .select_from(VideoJobRecord)
                .where(
                    VideoJobRecord.tenant_id == principal.tenant_id,
                    VideoJobRecord.user_id == principal.user_id,
                    VideoJobRecord.status == VideoStatus.QUEUED.value,
                )
            )
            check_queued_cap(queued or 0, queued_limit(self.settings, principal.tier))
            owner = _owner(job_id, principal)
            state = VideoJobState(
                **owner,
                request=request,
                request_hash=digest,
                gpu_class=gpu_class,
                status=VideoStatus.QUEUED,
                created_at=now,
            )
            record = VideoJobRecord(
                **owner,
                model=request.model,
                status=VideoStatus.QUEUED.value,
                version=0,
                request_hash=digest,
                engine_started=False,
                attempts_started=0,
                created_at=now,
                updated_at=now,
                state=state.model_dump(mode="json"),
                fairness_key=admission.fairness_key,
                fairness_weight=admission.fairness_weight,
            )
            session.add(record)
            session.flush()
            # Read before the commit expires the row's attributes.
            reserved = job_input_of(record, self.settings), row_view(record, principal)
            session.commit()
            return reserved


# The outbox -----------------------------------------------------------------------------


class OutboxStarter:
    """Starts the workflows of committed jobs that no submit started (one per API process)."""

    def __init__(self, client: Client, settings: Settings, db: sessionmaker) -> None:
        self.client = client
        self.settings = settings
        self.db = db
        self.identity = f"{socket.gethostname()}:{os.getpid()}"

    async def run(self) -> None:
        """Start what is due, forever (until cancelled)."""
        while True:
            try:
                await self.start_due()
            except Exception as exc:
                if not is_connection_error(exc):
                    log.exception("outbox pass failed")
                else:
                    # An outage, not a bug: one line per pass until the database is back.
                    log.warning("outbox pass skipped, database unavailable: %s", type(exc).__name__)
            await asyncio.sleep(self.settings.video_outbox_interval_seconds)

    def _due(self) -> tuple[list[VideoJobInput], list[str]]:
        """Rows due for a start, and rows of deleted jobs that must never start."""
        before = datetime.now(UTC) - timedelta(seconds=self.settings.video_outbox_delay_seconds)
        deleted = exists().where(VideoDeletion.job_id == VideoJobRecord.job_id)
        with self.db() as session:
            rows = session.execute(
                select(VideoJobRecord, deleted.label("deleted"))
                .where(VideoJobRecord.engine_started.is_(False), VideoJobRecord.created_at <= before)
                .order_by(VideoJobRecord.created_at)
                .limit(OUTBOX_BATCH)
            ).all()
            due = [job_input_of(record, self.settings) for record, gone in rows if not gone]
            return due, [record.job_id for record, gone in rows if gone]

    async def start_due(self) -> int:
        """One pass: start every due job (bounded concurrency); how many were started."""
        due, deleted = await asyncio.to_thread(self._due)
        await asyncio.to_thread(mark_started, self.db, deleted)
        if not due:
            return 0
        gate = asyncio.Semaphore(self.settings.video_outbox_concurrency)

        async def one(job_input: VideoJobInput) -> str | None:
            async with gate:
                try:
                    await start_job(self.client, self.settings, job_input)
                except RPCError as exc:
                    log.info("outbox start of %s failed (%s); retried next pass", job_input.job_id, exc.status)
                    return None
                return job_input.job_id

        started = [job_id for job_id in await asyncio.gather(*(one(j) for j in due)) if job_id is not None]
        await asyncio.to_thread(mark_started, self.db, started)
        if started:
            log.info("outbox started %d job(s)", len(started))
        return len(started)


# Lifespan -------------------------------------------------------------------------------


async def start_submit(app: FastAPI) -> None:
    """The process's submit gate and outbox starter (``app.state``); call once the client and database exist."""
    settings: Settings = app.state.settings
    app.state.video_submit_gate = SubmitGate(settings.video_submit_max_in_flight)
    starter = OutboxStarter(app.state.temporal, settings, app.state.db)
    app.state.video_outbox_task = asyncio.create_task(starter.run(), name="video-outbox")


async def stop_submit(app: FastAPI) -> None:
    """Stop the outbox starter ``start_submit`` started (a no-op when none runs)."""
    await stop_state_task(app, "video_outbox_task")
