"""Log chunks: gap-free sequence numbers, and a chunk that could not be stored is a visible gap."""

from __future__ import annotations

import json
import time
from pathlib import Path

from activities.ci.logs import LogShipper
from leasehold.storage import LocalObjectStore
from workflows.ci.ids import log_chunk_key, log_end_key, log_gap_key, parse_log_key
from workflows.ci.types.job import AttemptStatus


class OutageStore(LocalObjectStore):
    """Refuses every write until ``outage_until`` (monotonic), then works."""

    def __init__(self, root: Path, outage_seconds: float) -> None:
        super().__init__(root, b"k", "http://x")
        self.outage_until = time.monotonic() + outage_seconds
        self.refused = 0

    def create(self, key: str, data: bytes, content_type: str | None = None) -> bool:
        if time.monotonic() < self.outage_until:
            self.refused += 1
            raise OSError("store unreachable")
        return super().create(key, data, content_type)


class FlakyStore(LocalObjectStore):
    """Refuses to store chunks whose seq is in ``broken``."""

    def __init__(self, root: Path, broken: set[int]) -> None:
        super().__init__(root, b"k", "http://x")
        self.broken = broken

    def create(self, key: str, data: bytes, content_type: str | None = None) -> bool:
        parsed = parse_log_key(key)
        if parsed and parsed[0] in self.broken:
            raise OSError("disk on fire")
        return super().create(key, data, content_type)


def test_chunks_are_gap_free_and_end_is_marked(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path, b"k", "http://x")
    shipper = LogShipper(store, "ci/t/run/job/attempt-1/", 1, flush_seconds=0.05, chunk_bytes=1000)
    payload = b"".join(b"line %05d\n" % i for i in range(2000))
    for i in range(0, len(payload), 777):
        shipper.write(payload[i : i + 777])
    summary = shipper.close(AttemptStatus.SUCCESS, 0)
    keys = [k for k in store.list("ci/t/run/job/attempt-1/") if k.endswith(".log")]
    assert keys == [log_chunk_key("ci/t/run/job/attempt-1/", s) for s in range(summary.next_seq)]
    assert b"".join(store.get(k) for k in keys) == payload
    assert all(len(store.get(k)) <= 1000 for k in keys)
    end = json.loads(store.get(log_end_key("ci/t/run/job/attempt-1/")))
    assert end["next_seq"] == summary.next_seq and end["gaps"] == [] and summary.ended


def test_unstorable_chunk_is_a_visible_gap(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path, broken={1})
    prefix = "ci/t/run/job/attempt-2/"
    shipper = LogShipper(store, prefix, 2, flush_seconds=0.05, chunk_bytes=10, retry_seconds=0.5)
    shipper.write(b"a" * 10 + b"b" * 10 + b"c" * 10)
    summary = shipper.close(AttemptStatus.FAILURE, 1)
    assert summary.gaps == [1] and summary.next_seq == 3
    assert store.get(log_chunk_key(prefix, 0)) == b"a" * 10
    assert not store.exists(log_chunk_key(prefix, 1))
    assert store.exists(log_gap_key(prefix, 1))
    assert store.get(log_chunk_key(prefix, 2)) == b"c" * 10
    assert json.loads(store.get(log_end_key(prefix)))["gaps"] == [1]


def test_an_outage_shorter_than_the_retry_window_loses_nothing(tmp_path: Path) -> None:
    store = OutageStore(tmp_path, outage_seconds=1.5)
    prefix = "ci/t/run/job/attempt-3/"
    shipper = LogShipper(store, prefix, 3, flush_seconds=0.05, chunk_bytes=10, retry_seconds=30)
    payload = bytes(range(97, 123)) * 3
    for i in range(0, len(payload), 7):
        shipper.write(payload[i : i + 7])
    summary = shipper.close(AttemptStatus.SUCCESS, 0)
    assert store.refused > 0, "the outage never hit a write"
    assert summary.gaps == [] and summary.ended
    keys = [k for k in store.list(prefix) if k.endswith(".log")]
    assert b"".join(store.get(k) for k in keys) == payload


class FullOutageStore(OutageStore):
    """Refuses chunks and the end marker alike until the outage ends."""

    def put(self, key: str, data: bytes, content_type: str | None = None) -> None:
        if time.monotonic() < self.outage_until:
            self.refused += 1
            raise OSError("store unreachable")
        super().put(key, data, content_type)


def test_closing_through_an_outage_keeps_the_job_heartbeating(tmp_path: Path) -> None:
    """At the job's end the log waits for the store (last chunks, then the end marker): the
    job's heartbeat goes on meanwhile, so the engine does not count the job lost and run it
    again while it only waits for the store."""
    store = FullOutageStore(tmp_path, outage_seconds=3.5)
    prefix = "ci/t/run/job/attempt-4/"
    shipper = LogShipper(store, prefix, 4, flush_seconds=0.05, chunk_bytes=10, retry_seconds=30)
    payload = b"the last lines of a job\n" * 3
    shipper.write(payload)
    beats: list[float] = []
    started = time.monotonic()
    summary = shipper.close(AttemptStatus.SUCCESS, 0, beat=lambda: beats.append(time.monotonic()))
    assert store.refused > 0 and time.monotonic() - started >= 3.0, "the outage never held the close"
    assert summary.gaps == [] and summary.ended
    assert b"".join(store.get(k) for k in store.list(prefix) if k.endswith(".log")) == payload
    assert json.loads(store.get(log_end_key(prefix)))["next_seq"] == summary.next_seq
    # Called all through the wait (every second; the slack is for a loaded host).
    assert len(beats) >= 3, beats
    spans = [b - a for a, b in zip([started, *beats], beats, strict=False)]
    assert max(spans) < 5.0, spans
