"""Job logs: stored chunks of one attempt (``/logs``) and a live SSE tail (``/logs/stream``).

Each attempt logs under its own object-store prefix as ``<seq:08d>.log`` chunks numbered from 0
without holes; a chunk that could not be stored leaves a ``.gap`` marker (and is listed in the
attempt's ``end.json``), so readers show lost output as a gap instead of silently skipping it.
``end.json`` marks the end of the attempt's log. An attempt whose worker was lost never writes
``end.json``; the run state (attempt no longer running) ends its stream instead.

The run state (which attempts exist, their prefixes, statuses and gaps) comes from the read
model, so logs are served after the engine forgets the run. Once a finished attempt is
compacted (its ``ci_attempts`` row names one object and an index of byte ranges), a page of
its log is one object read instead of one read per chunk.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response, StreamingResponse
from sqlalchemy.orm import sessionmaker
from temporalio.client import Client
from temporalio.service import RPCError

from activities.ci.log_compaction import read_compacted
from api.ci.attempt_ref import AttemptRefDep, astuple_ref
from api.ci.runs import attempt_prefix as _prefix
from api.ci.runs import chosen_attempt as _attempt
from api.ci.runs import load_job_run, load_run
from api.errors import ApiError
from api.schemas.ci.runs import LogChunkOut, LogPage
from leasehold.records.api_keys import Principal
from leasehold.records.ci.runs import CIAttemptRecord, get_attempt
from leasehold.storage import ObjectNotFound, ObjectStore
from workflows.ci.ids import log_chunk_key, log_end_key, parse_log_key
from workflows.ci.types.job import AttemptStatus, LogEnd
from workflows.ci.types.run import JOB_FINAL_STATUSES, CIRunState, JobAttemptState

router = APIRouter(tags=["ci"])
log = logging.getLogger(__name__)

MAX_CHUNKS_PER_PAGE = 1000
MAX_BYTES_PER_PAGE = 4 * 1024 * 1024
# How often a live stream looks for new chunks, and re-reads the run state (a lost attempt
# writes no end marker, so the state is what ends its stream).
POLL_SECONDS = 0.25
STATE_POLL_SECONDS = 2.0
WAIT_ATTEMPT_POLL_SECONDS = 1.0
KEEPALIVE_SECONDS = 15.0
# A stream is bounded; a client that wants more reconnects with Last-Event-ID.
MAX_STREAM_SECONDS = 3600.0


@dataclass
class LogRead:
    """What one read of an attempt's prefix found from ``from_seq`` on."""

    # (seq, text) for stored chunks and (seq, None) for gaps, in seq order without holes.
    items: list[tuple[int, str | None]] = field(default_factory=list)
    next_seq: int = 0
    end: LogEnd | None = None
    has_more: bool = False
    # A seq shown as a gap with no gap marker or reported gap, or a listed chunk that was gone
    # when read: what a reader sees when compaction deletes the chunks under it.
    unexplained: bool = False


def read_attempt_log(
    store: ObjectStore,
    prefix: str,
    from_seq: int,
    known_gaps: set[int] | frozenset[int] = frozenset(),
    final: bool = False,
    max_chunks: int = MAX_CHUNKS_PER_PAGE,
    max_bytes: int = MAX_BYTES_PER_PAGE,
) -> LogRead:
    """Chunks and gaps of one attempt from ``from_seq``, stopping at the first seq not yet known.

    A missing seq counts as a gap when a ``.gap`` marker, the end marker or ``known_gaps`` says
    so, or when a later chunk exists and the attempt is ``final`` (its writer is gone).
    """
    found: dict[int, str] = {}
    for key in store.list(prefix):
        parsed = parse_log_key(key)
        if parsed is not None and parsed[0] >= from_seq:
            # A chunk stored after all wins over a gap marker for the same seq.
            if parsed[1] == "log" or parsed[0] not in found:
                found[parsed[0]] = parsed[1]
    end: LogEnd | None = None
    try:
        end = LogEnd.model_validate_json(store.get(log_end_key(prefix)))
    except ObjectNotFound:
        pass
    gaps = set(known_gaps) | (set(end.gaps) if end else set())
    limit = end.next_seq if end is not None else (max(found) + 1 if found else from_seq)
    result = LogRead(end=end)

    def chunk(seq: int) -> bytes | Literal[False] | None:
        kind = found.get(seq)
        if kind == "log":
            try:
                return store.get(log_chunk_key(prefix, seq))
            except ObjectNotFound:
                result.unexplained = True
                return False
        if kind == "gap" or seq in gaps or end is not None or final:
            result.unexplained = result.unexplained or (kind != "gap" and seq not in gaps)
            return None
        return False  # not written yet: a live reader waits here

    return _fill_page(result, from_seq, limit, max_chunks, max_bytes, chunk)


def read_compacted_log(
    store: ObjectStore,
    object_key: str,
    log_index: dict[str, Any],
    from_seq: int,
    max_chunks: int = MAX_CHUNKS_PER_PAGE,
    max_bytes: int = MAX_BYTES_PER_PAGE,
) -> LogRead:
    """Chunks and gaps of a compacted attempt from ``from_seq``: one object read. The attempt
    is final, so every seq below the index's ``next_seq`` is either a chunk or a gap."""
    stored = dict(read_compacted(store, object_key, log_index, from_seq))
    limit = int(log_index.get("next_seq", max(stored, default=from_seq - 1) + 1))
    return _fill_page(LogRead(), from_seq, limit, max_chunks, max_bytes, stored.get)


def _fill_page(
    result: LogRead,
    seq: int,
    limit: int,
    max_chunks: int,
    max_bytes: int,
    chunk: Callable[[int], bytes | Literal[False] | None],
) -> LogRead:
    """``result`` with the items from ``seq`` on: each seq's chunk, or a gap where ``chunk``
    gives None, up to ``limit``, a full page (``has_more``) or a seq ``chunk`` refuses (False)."""
    size = 0
    while seq < limit:
        if len(result.items) >= max_chunks or size >= max_bytes:
            result.has_more = True
            break
        data = chunk(seq)
        if data is False:
            break
        if data is None:
            result.items.append((seq, None))
        else:
            size += len(data)
            result.items.append((seq, data.decode("utf-8", errors="replace")))
        seq += 1
    result.next_seq = seq
    return result


def read_log(
    store: ObjectStore,
    attempt_row: Callable[[], CIAttemptRecord | None],
    state: CIRunState,
    job: str,
    chosen: JobAttemptState,
    seq: int,
) -> LogRead:
    """One read of the chosen attempt's log: the compacted object when its row (``attempt_row``)
    names one, else its chunks.

    Compaction writes the object and names it on the attempt's row before it deletes the
    chunks, so a chunk read that finds chunks missing without a reason reads the row again:
    if it now names a compacted object, the page comes from there.
    """
    compacted = _read_compacted(store, attempt_row(), seq)
    if compacted is not None:
        return compacted
    read = read_attempt_log(store, _prefix(state, job, chosen), seq, _known_gaps(chosen), _attempt_final(chosen))
    if read.unexplained and _attempt_final(chosen):
        compacted = _read_compacted(store, attempt_row(), seq)
        if compacted is not None:
            return compacted
    return read


def _read_compacted(store: ObjectStore, record: CIAttemptRecord | None, seq: int) -> LogRead | None:
    if record is None or not record.log_object_key or record.log_index is None:
        return None
    try:
        return read_compacted_log(store, record.log_object_key, record.log_index, seq)
    except ObjectNotFound:
        log.warning("compacted log %s is gone; reading chunks", record.log_object_key)
        return None


def _attempt_record(
    db: sessionmaker, principal: Principal, state: CIRunState, job: str, chosen: JobAttemptState
) -> CIAttemptRecord | None:
    """The attempt's row (where compaction put its log); only a finished attempt can have one."""
    if not _attempt_final(chosen):
        return None
    return get_attempt(db, principal.tenant_id, state.run_id, job, chosen.attempt)


def _known_gaps(attempt: JobAttemptState) -> set[int]:
    return set(attempt.log.gaps) if attempt.log is not None else set()


def _attempt_final(attempt: JobAttemptState) -> bool:
    return attempt.status != AttemptStatus.RUNNING


@router.get("/v1/runs/{run}/jobs/{job}/logs")
async def get_logs(ref: AttemptRefDep, from_seq: int = Query(0, ge=0)) -> LogPage:
    """Stored chunks of one attempt from ``from_seq``; gaps are listed, never hidden."""
    run, job, principal, client, db, store, attempt = astuple_ref(ref)
    state = await load_job_run(db, client, principal, run, job)
    chosen = _attempt(state, job, attempt)
    job_state = state.job(job)
    assert job_state is not None
    attempts = [a.attempt for a in job_state.attempts]
    if chosen is None:
        # The job has not started: nothing logged yet (and nothing ever if it gets skipped).
        return LogPage(
            run_id=run,
            job_id=job,
            attempt=0,
            attempts=attempts,
            from_seq=from_seq,
            next_seq=from_seq,
            ended=False,
            status=job_state.status.value,
        )
    row = functools.partial(_attempt_record, db, principal, state, job, chosen)
    read = await asyncio.to_thread(read_log, store, row, state, job, chosen, from_seq)
    ended = not read.has_more and (read.end is not None or _attempt_final(chosen))
    return LogPage(
        run_id=run,
        job_id=job,
        attempt=chosen.attempt,
        attempts=attempts,
        from_seq=from_seq,
        next_seq=read.next_seq,
        ended=ended,
        status=chosen.status.value,
        chunks=[LogChunkOut(seq=s, text=t) for s, t in read.items if t is not None],
        gaps=[s for s, t in read.items if t is None],
        has_more=read.has_more,
    )


# The most one download holds (a log is at most ci_log_max_bytes, 64 MiB by default).
MAX_DOWNLOAD_PAGES = 10_000


@router.get(
    "/v1/runs/{run}/jobs/{job}/logs.txt",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "the attempt's whole log"}},
)
async def download_log(ref: AttemptRefDep) -> Response:
    """The attempt's whole stored log as text (lost chunks marked where they were), to save."""
    run, job, principal, client, db, store, attempt = astuple_ref(ref)
    state = await load_job_run(db, client, principal, run, job)
    chosen = _attempt(state, job, attempt)
    parts: list[str] = []
    if chosen is not None:
        row = functools.partial(_attempt_record, db, principal, state, job, chosen)
        seq = 0
        for _ in range(MAX_DOWNLOAD_PAGES):
            read = await asyncio.to_thread(read_log, store, row, state, job, chosen, seq)
            parts += [t if t is not None else f"[output lost: chunk {s} could not be stored]\n" for s, t in read.items]
            seq = read.next_seq
            if not read.has_more:
                break
    name = f"{run}-{job}-attempt-{chosen.attempt if chosen else 0}.log"
    return Response(
        "".join(parts),
        media_type="text/plain; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"', "X-Content-Type-Options": "nosniff"},
    )


def _event(kind: str, data: dict, event_id: int | None = None) -> bytes:
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append(f"event: {kind}")
    lines.append("data: " + json.dumps(data, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode()


async def _waiting_for(request: Request, state: CIRunState, job: str) -> dict[str, Any] | None:
    """``waiting`` event data: the job's status and its queue explanation's message."""
    found = state.job(job)
    if found is None:
        return None
    message = f"job {job} is {found.status.value}"
    explainer = getattr(request.app.state, "ci_queue_explainer", None)
    if explainer is not None:
        try:
            queue = (await explainer.explain(state, only=job)).get(job)
        except (ApiError, RPCError):
            queue = None
        if queue is not None:
            message = queue.message
    return {"status": found.status.value, "message": message}


async def _follow(
    request: Request,
    client: Client,
    db: sessionmaker,
    principal: Principal,
    store: ObjectStore,
    state: CIRunState,
    job: str,
    attempt_no: int | None,
    seq: int,
) -> AsyncIterator[bytes]:
    """Replay from ``seq``, then follow the attempt live until its log ends."""
    deadline = time.monotonic() + MAX_STREAM_SECONDS
    last_state = last_sent = time.monotonic()
    chosen = _attempt(state, job, attempt_no)
    said: dict[str, Any] | None = None
    explained: CIRunState | None = None
    yield b"retry: 1000\n\n"
    while time.monotonic() < deadline:
        now = time.monotonic()
        waiting = chosen is None
        interval = WAIT_ATTEMPT_POLL_SECONDS if waiting else STATE_POLL_SECONDS
        if (chosen is None or not _attempt_final(chosen)) and now - last_state >= interval:
            # Re-read the run: the job may have started an attempt, or its attempt was lost.
            try:
                state = await load_run(db, client, principal, state.run_id)
                chosen = _attempt(state, job, attempt_no if chosen is None else chosen.attempt)
            except (ApiError, RPCError):
                pass  # transient; the next poll tries again
            last_state = now
        if chosen is None:
            job_state = state.job(job)
            if job_state is not None and job_state.status in JOB_FINAL_STATUSES:
                # Finished without ever running (skipped, or cancelled while waiting).
                yield _event("end", {"attempt": 0, "status": job_state.status.value, "next_seq": seq})
                return
            # What the job waits for, each time that changes (not a blank screen): asked once
            # per read of the run, not at every poll.
            if state is not explained:
                explained = state
                waiting_for = await _waiting_for(request, state, job)
                if waiting_for is not None and waiting_for != said:
                    said = waiting_for
                    yield _event("waiting", waiting_for)
                    last_sent = time.monotonic()
            if await request.is_disconnected():
                return
            await asyncio.sleep(POLL_SECONDS)
            continue
        final = _attempt_final(chosen)
        row = functools.partial(_attempt_record, db, principal, state, job, chosen)
        read = await asyncio.to_thread(read_log, store, row, state, job, chosen, seq)
        for item_seq, text in read.items:
            if text is None:
                yield _event("gap", {"seq": item_seq, "attempt": chosen.attempt}, item_seq)
            else:
                yield _event("log", {"seq": item_seq, "attempt": chosen.attempt, "text": text}, item_seq)
            last_sent = time.monotonic()
        seq = read.next_seq
        if not read.has_more and (read.end is not None or final):
            status = read.end.status.value if read.end is not None else chosen.status.value
            yield _event("end", {"attempt": chosen.attempt, "status": status, "next_seq": seq})
            return
        if read.has_more:
            continue
        if await request.is_disconnected():
            return
        if time.monotonic() - last_sent >= KEEPALIVE_SECONDS:
            yield b": keep-alive\n\n"
            last_sent = time.monotonic()
        await asyncio.sleep(POLL_SECONDS)


@router.get("/v1/runs/{run}/jobs/{job}/logs/stream")
async def stream_logs(
    request: Request,
    ref: AttemptRefDep,
    from_seq: int = Query(0, ge=0),
    last_event_id: str | None = Header(None),
) -> StreamingResponse:
    """Server-sent events: ``log`` (id = seq) and ``gap`` events, then one ``end`` event; while
    the job has no attempt yet, a ``waiting`` event (``status``, ``message``: what it waits for,
    as the run's queue explanation says) each time that changes.

    A reconnecting client sends ``Last-Event-ID`` (the last seq it saw) and continues after it.
    """
    run, job, principal, client, db, store, attempt = astuple_ref(ref)
    state = await load_job_run(db, client, principal, run, job)
    _attempt(state, job, attempt)  # 404 for an unknown job or attempt before the stream opens
    seq = from_seq
    if last_event_id is not None:
        if not last_event_id.strip().isdigit():
            raise ApiError(400, "invalid_request", "Last-Event-ID must be a sequence number", param="Last-Event-ID")
        seq = int(last_event_id) + 1
    return StreamingResponse(
        _follow(request, client, db, principal, store, state, job, attempt, seq),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
