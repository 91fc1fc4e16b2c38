"""Shipping a job attempt's output to the object store as numbered chunks.

Each flush (every ``flush_seconds`` or ``chunk_bytes``) takes the next sequence number, so seqs
are gap-free by construction; a chunk is written once (``create``) under the attempt's prefix.
A chunk that cannot be stored is retried with back-off for up to ``retry_seconds`` (an object
store outage of that length loses nothing: output keeps buffering meanwhile). Only then does
it keep its seq as a gap (in ``end.json``, in the ``LogSummary`` the run state holds, and best
effort as a ``.gap`` marker), so a reader sees a hole, never a silent splice. Once a chunk has
exhausted the window, later chunks get only a few quick tries until one succeeds, so a store
that stays down costs the job seconds, not the window again per chunk.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from actions_language.masking import StreamMasker
from leasehold.retry import retry_within
from leasehold.storage import ObjectStore
from workflows.ci.ids import log_chunk_key, log_end_key, log_gap_key
from workflows.ci.types.job import AttemptStatus, LogEnd, LogSummary

log = logging.getLogger(__name__)

# Tries a write always gets, even while the store is known to be down.
PUT_MIN_ATTEMPTS = 3
DEFAULT_RETRY_SECONDS = 120.0
# Producers block above this many unshipped bytes, so a chatty job cannot exhaust memory.
MAX_BUFFERED_BYTES = 8 << 20


# While ``close`` waits on the store, it calls its ``beat`` at least this often.
BEAT_SECONDS = 1.0


def _join_beating(thread: threading.Thread, timeout: float, beat: Callable[[], None] | None) -> None:
    """Join ``thread`` for up to ``timeout`` seconds, calling ``beat`` between short joins."""
    deadline = time.monotonic() + timeout
    while thread.is_alive():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        thread.join(min(left, BEAT_SECONDS))
        if beat is not None and thread.is_alive():
            beat()


@dataclass(eq=False)
class LogShipper:
    """Thread-safe: the output reader calls ``write``; a background thread flushes."""

    store: ObjectStore
    prefix: str
    attempt: int
    flush_seconds: float = 0.5
    chunk_bytes: int = 64 << 10
    max_bytes: int = 64 << 20
    # Every byte passes the job's secret masker before it is buffered, stored or streamed.
    masker: StreamMasker | None = None
    retry_seconds: float = DEFAULT_RETRY_SECONDS
    summary: LogSummary = field(init=False)
    # False after a write exhausted the retry window, until a write succeeds again.
    _store_up: bool = field(default=True, init=False)
    _buffer: bytearray = field(default_factory=bytearray, init=False)
    _cond: threading.Condition = field(default_factory=threading.Condition, init=False)
    _closed: bool = field(default=False, init=False)
    _truncated: bool = field(default=False, init=False)
    _accepted: int = field(default=0, init=False)
    _thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.summary = LogSummary(prefix=self.prefix)
        self._thread = threading.Thread(target=self._run, name=f"log-{self.prefix}", daemon=True)
        self._thread.start()

    def write(self, data: bytes) -> None:
        if not data:
            return
        with self._cond:
            # Masked before anything else (truncation included), so no cut can split a secret
            # into pieces the masker no longer recognises.
            self._append(self.masker.feed(data) if self.masker is not None else data)

    def _append(self, data: bytes) -> None:
        if data:
            if self._accepted >= self.max_bytes:
                if not self._truncated:
                    self._truncated = True
                    self._buffer += f"\n[leasehold: log truncated at {self.max_bytes} bytes]\n".encode()
                    self._cond.notify_all()
                return
            data = data[: self.max_bytes - self._accepted]
            self._accepted += len(data)
            deadline = time.monotonic() + 60
            while len(self._buffer) > MAX_BUFFERED_BYTES and not self._closed and time.monotonic() < deadline:
                self._cond.wait(0.5)
            self._buffer += data
            if len(self._buffer) >= self.chunk_bytes:
                self._cond.notify_all()

    def line(self, text: str) -> None:
        """A line of leasehold's own (step headers, results)."""
        self.write(text.encode() + b"\n")

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._closed and len(self._buffer) < self.chunk_bytes:
                    self._cond.wait(self.flush_seconds)
                if self._closed and not self._buffer:
                    return
                data = bytes(self._buffer[: self.chunk_bytes])
                del self._buffer[: len(data)]
                self._cond.notify_all()
            if data:
                self._ship(data)

    def _write(self, what: str, write: Callable[[], object], between: Callable[[], None] | None = None) -> bool:
        """Run ``write`` until it succeeds or the retry window closes (``between`` before each
        retry); ``True`` on success."""
        window = self.retry_seconds if self._store_up else 0.0
        self._store_up = retry_within(write, window, what, log, min_tries=PUT_MIN_ATTEMPTS, between=between) is None
        return self._store_up

    def _ship(self, data: bytes) -> None:
        seq = self.summary.next_seq
        self.summary.next_seq += 1
        key = log_chunk_key(self.prefix, seq)

        def create() -> None:
            # A retry after a write that landed but timed out finds its own chunk: same bytes.
            if not self.store.create(key, data, "text/plain"):
                log.warning("log chunk %s already existed; kept the first", key)

        if self._write(f"log chunk {key}", create):
            self.summary.bytes += len(data)
            return
        self.summary.gaps.append(seq)
        try:
            self.store.put(log_gap_key(self.prefix, seq), f'{{"seq": {seq}, "bytes": {len(data)}}}'.encode())
        except Exception as exc:  # the gap is also in end.json and the run state
            log.warning("storing gap marker for %s failed: %s", key, exc)

    def close(self, status: AttemptStatus, exit_code: int | None, beat: Callable[[], None] | None = None) -> LogSummary:
        """Flush everything, then write ``end.json``; returns what was stored.

        Through a store outage this waits up to the retry window (twice: the last chunks, then
        the end marker), calling ``beat`` meanwhile (every ``BEAT_SECONDS`` while the flush
        thread ships, before each retry of the end marker): the job's heartbeat, so the engine
        does not take a job that is only waiting for the store for a lost one and run it again.
        """
        with self._cond:
            if self.masker is not None:
                self._append(self.masker.flush())
            self._closed = True
            self._cond.notify_all()
        # Long enough for chunks still waiting out an outage of the full retry window.
        _join_beating(self._thread, self.retry_seconds + 60, beat)
        end = LogEnd(
            attempt=self.attempt,
            next_seq=self.summary.next_seq,
            gaps=list(self.summary.gaps),
            status=status,
            exit_code=exit_code,
            finished_at=datetime.now(UTC),
        )
        payload = end.model_dump_json().encode()
        if self._write(
            f"end of log {self.prefix}",
            lambda: self.store.put(log_end_key(self.prefix), payload, "application/json"),
            between=beat,
        ):
            self.summary.ended = True
        return self.summary.model_copy()
