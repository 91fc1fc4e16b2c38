"""CI log compaction: a finished attempt's chunks become one object that reads back byte for byte."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from sqlalchemy.orm import sessionmaker
from temporalio.testing import ActivityEnvironment

from activities.ci.lifecycle import CILifecycleActivities, delete_chunks, write_compacted
from activities.ci.log_compaction import FRAME_BYTES, compacted_key, read_compacted
from activities.ci.logs import LogShipper
from leasehold.storage import LocalObjectStore
from tests.lifecycle.conftest import add_ci_run, attempt_row
from workflows.ci.ids import log_chunk_key, parse_log_key
from workflows.ci.types.job import AttemptStatus
from workflows.lifecycle.types import LifecycleBatch, LifecycleInput

LINES = 100_000


class CountingStore(LocalObjectStore):
    """The local store, counting whole-object and range reads."""

    gets = 0
    ranges = 0

    def get(self, key: str) -> bytes:
        self.gets += 1
        return super().get(key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        self.ranges += 1
        return super().get_range(key, offset, length)


@pytest.fixture
def counting_store(tmp_path: Path) -> CountingStore:
    return CountingStore(tmp_path / "objects", b"k" * 32, "http://127.0.0.1:1")


def ship_log(store: LocalObjectStore, prefix: str, lines: int) -> tuple[bytes, dict]:
    """Ship ``lines`` lines through the real log shipper; the bytes and the stored summary."""
    shipper = LogShipper(store, prefix, attempt=1, flush_seconds=0.05)
    text = b"".join(f"line {i:06d} of the build output, some padding to be realistic\n".encode() for i in range(lines))
    for start in range(0, len(text), 4096):
        shipper.write(text[start : start + 4096])
    summary = shipper.close(AttemptStatus.SUCCESS, 0)
    return text, summary.model_dump(mode="json")


def chunk_keys(store: LocalObjectStore, prefix: str) -> list[str]:
    return [k for k in store.list(prefix) if (p := parse_log_key(k)) is not None and p[1] == "log"]


def compact(store: LocalObjectStore, db: sessionmaker) -> int:
    batch = LifecycleBatch(input=LifecycleInput(batch_size=10))
    result = ActivityEnvironment().run(CILifecycleActivities(store, db).compact_ci_logs, batch)
    return result.processed


def test_compacting_a_100000_line_log_reads_back_every_byte(counting_store: CountingStore, db: sessionmaker) -> None:
    store = counting_store
    prefix = "ci/tenant-a/run_big/build/attempt-1/"
    text, summary = ship_log(store, prefix, LINES)
    chunks_before = chunk_keys(store, prefix)
    assert len(chunks_before) == summary["next_seq"] > 50
    add_ci_run(db, "run_big", attempts=[{"attempt": 1, "status": "success", "log": summary}])

    assert compact(store, db) == 1

    row = attempt_row(db, "run_big", 1)
    assert row is not None and row.compacted_at is not None
    assert row.log_object_key == compacted_key(prefix)
    assert row.log_index is not None and row.log_index["next_seq"] == summary["next_seq"]
    assert row.log_index["gaps"] == []
    assert len(row.log_index["ranges"]) >= len(text) // FRAME_BYTES
    assert chunk_keys(store, prefix) == [], "the chunks are gone once the compacted object is recorded"
    # The object is one gzip file of the log's own bytes.
    assert gzip.decompress(store.get(row.log_object_key)) == text

    store.gets = store.ranges = 0
    chunks = read_compacted(store, row.log_object_key, row.log_index, 0)
    assert (store.gets, store.ranges) == (1, 0), "a read from the start is one object read"
    assert [seq for seq, _ in chunks] == list(range(summary["next_seq"]))
    assert b"".join(data for _, data in chunks) == text
    assert b"".join(data for _, data in chunks).count(b"\n") == LINES

    # A later start is one range read, and returns exactly the chunks from there on.
    start = summary["next_seq"] - 7
    store.gets = store.ranges = 0
    tail = read_compacted(store, row.log_object_key, row.log_index, start)
    assert (store.gets, store.ranges) == (0, 1)
    assert [seq for seq, _ in tail] == list(range(start, summary["next_seq"]))
    assert b"".join(d for _, d in tail) == b"".join(d for s, d in chunks if s >= start)
    assert read_compacted(store, row.log_object_key, row.log_index, summary["next_seq"]) == []

    # Idempotent: a second tick finds nothing to do and changes nothing.
    assert compact(store, db) == 0
    assert b"".join(d for _, d in read_compacted(store, row.log_object_key, row.log_index, 0)) == text


def test_gaps_stay_holes(store: LocalObjectStore, db: sessionmaker) -> None:
    prefix = "ci/tenant-a/run_gap/build/attempt-1/"
    for seq in range(6):
        if seq not in (2, 4):
            store.put(log_chunk_key(prefix, seq), f"chunk {seq}\n".encode())
    # seq 2 was reported lost by the shipper; seq 4 went missing from the store since.
    summary = {"prefix": prefix, "next_seq": 6, "gaps": [2], "bytes": 0, "ended": True}
    add_ci_run(db, "run_gap", attempts=[{"attempt": 1, "status": "failure", "log": summary}])
    assert compact(store, db) == 1
    row = attempt_row(db, "run_gap", 1)
    assert row is not None and row.log_object_key and row.log_index
    assert row.log_index["gaps"] == [2, 4]
    got = read_compacted(store, row.log_object_key, row.log_index, 0)
    assert got == [(s, f"chunk {s}\n".encode()) for s in (0, 1, 3, 5)]
    assert read_compacted(store, row.log_object_key, row.log_index, 2) == [(3, b"chunk 3\n"), (5, b"chunk 5\n")]


def test_a_crash_between_recording_and_deleting_resumes_without_loss(store: LocalObjectStore, db: sessionmaker) -> None:
    prefix = "ci/tenant-a/run_crash/build/attempt-1/"
    text, summary = ship_log(store, prefix, 20_000)
    add_ci_run(db, "run_crash", attempts=[{"attempt": 1, "status": "success", "log": summary}])
    row = attempt_row(db, "run_crash", 1)
    assert row is not None
    # The first tick recorded the object, deleted some chunks and died.
    assert write_compacted(
        store, db, row, {"jobs": [{"job_id": "build", "attempts": [{"attempt": 1, "log": summary}]}]}
    )
    for key in chunk_keys(store, prefix)[::2]:
        store.delete(key)
    assert attempt_row(db, "run_crash", 1).compacted_at is None  # type: ignore[union-attr]

    assert compact(store, db) == 1
    row = attempt_row(db, "run_crash", 1)
    assert row is not None and row.compacted_at is not None and row.log_object_key and row.log_index
    assert chunk_keys(store, prefix) == []
    # Not compacted again from the half-deleted chunks: the log is whole.
    assert b"".join(d for _, d in read_compacted(store, row.log_object_key, row.log_index, 0)) == text
    assert delete_chunks(store, prefix) == 0


def test_running_attempts_and_open_runs_are_left_alone(store: LocalObjectStore, db: sessionmaker) -> None:
    for run_id, run_status, attempt_status in (
        ("run_open", "in_progress", "success"),
        ("run_live", "success", "running"),
    ):
        prefix = f"ci/tenant-a/{run_id}/build/attempt-1/"
        store.put(log_chunk_key(prefix, 0), b"hello\n")
        summary = {"prefix": prefix, "next_seq": 1, "gaps": [], "bytes": 6, "ended": False}
        add_ci_run(db, run_id, status=run_status, attempts=[{"attempt": 1, "status": attempt_status, "log": summary}])
    assert compact(store, db) == 0
    for run_id in ("run_open", "run_live"):
        row = attempt_row(db, run_id, 1)
        assert row is not None and row.log_object_key is None and row.compacted_at is None
        assert store.get(log_chunk_key(f"ci/tenant-a/{run_id}/build/attempt-1/", 0)) == b"hello\n"
