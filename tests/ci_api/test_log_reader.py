"""Reading an attempt's log chunks from the object store: order, gaps, the end marker."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from api.routers.ci.logs import read_attempt_log
from leasehold.storage import LocalObjectStore
from workflows.ci.ids import attempt_log_prefix, log_chunk_key, log_end_key, log_gap_key
from workflows.ci.types.job import AttemptStatus, LogEnd


def _store(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects", b"k" * 32, "http://127.0.0.1:1")


def test_live_log_stops_at_the_first_unwritten_seq(tmp_path: Path) -> None:
    store = _store(tmp_path)
    prefix = attempt_log_prefix("t", "run_1", "build", 1)
    store.put(log_chunk_key(prefix, 0), b"one\n")
    store.put(log_chunk_key(prefix, 1), b"two\n")
    store.put(log_chunk_key(prefix, 3), b"four\n")  # 2 still in flight: not a gap yet

    read = read_attempt_log(store, prefix, 0)
    assert read.items == [(0, "one\n"), (1, "two\n")] and read.next_seq == 2 and read.end is None
    assert read_attempt_log(store, prefix, 1).items == [(1, "two\n")]

    # A gap marker makes the lost seq visible, and reading goes on past it.
    store.put(log_gap_key(prefix, 2), b"")
    read = read_attempt_log(store, prefix, 0)
    assert read.items == [(0, "one\n"), (1, "two\n"), (2, None), (3, "four\n")] and read.next_seq == 4

    # Another attempt's log is separate.
    assert read_attempt_log(store, attempt_log_prefix("t", "run_1", "build", 2), 0).items == []


def test_end_marker_bounds_the_log_and_names_gaps_without_markers(tmp_path: Path) -> None:
    store = _store(tmp_path)
    prefix = attempt_log_prefix("t", "run_1", "test", 1)
    store.put(log_chunk_key(prefix, 0), b"a")
    store.put(log_chunk_key(prefix, 2), b"c")
    end = LogEnd(attempt=1, next_seq=4, gaps=[1, 3], status=AttemptStatus.SUCCESS, finished_at=datetime.now(UTC))
    store.put(log_end_key(prefix), end.model_dump_json().encode())

    read = read_attempt_log(store, prefix, 0)
    assert read.items == [(0, "a"), (1, None), (2, "c"), (3, None)]
    assert read.next_seq == 4 and read.end is not None and not read.has_more
    assert read_attempt_log(store, prefix, 4).items == []


def test_pages_are_bounded(tmp_path: Path) -> None:
    store = _store(tmp_path)
    prefix = attempt_log_prefix("t", "run_1", "big", 1)
    for seq in range(5):
        store.put(log_chunk_key(prefix, seq), f"{seq}\n".encode())
    first = read_attempt_log(store, prefix, 0, max_chunks=2)
    assert [s for s, _ in first.items] == [0, 1] and first.has_more and first.next_seq == 2
    rest = read_attempt_log(store, prefix, first.next_seq, max_chunks=10)
    assert [s for s, _ in rest.items] == [2, 3, 4] and not rest.has_more


def test_a_lost_attempt_shows_missing_seqs_as_gaps(tmp_path: Path) -> None:
    store = _store(tmp_path)
    prefix = attempt_log_prefix("t", "run_1", "crash", 1)
    store.put(log_chunk_key(prefix, 0), b"x")
    store.put(log_chunk_key(prefix, 2), b"z")
    # The writer is gone (final) and wrote no end marker: seq 1 will never come.
    read = read_attempt_log(store, prefix, 0, final=True)
    assert read.items == [(0, "x"), (1, None), (2, "z")] and read.end is None
