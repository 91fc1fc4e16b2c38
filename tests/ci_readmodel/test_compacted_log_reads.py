"""The log reader on a compacted attempt: the same chunks and gaps, page by page, as reading the
attempt's chunks, in one object read per page; an attempt row without a compacted object (or
whose object is gone) is read from its chunks."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from activities.ci.lifecycle import delete_chunks
from activities.ci.log_compaction import build_compacted, compacted_key
from api.routers.ci.logs import read_attempt_log, read_compacted_log, read_log
from leasehold.records.ci.runs import CIAttemptRecord
from leasehold.storage import LocalObjectStore
from workflows.ci.ids import attempt_log_prefix, log_chunk_key, log_end_key, log_gap_key
from workflows.ci.types.job import AttemptStatus, LogEnd
from workflows.ci.types.run import CIRunState, JobAttemptState, JobState

RUN = "run_" + "ab" * 16
PREFIX = attempt_log_prefix("tenant-a", RUN, "build", 1)
CHUNKS = 40
GAP = 7


class CountingStore(LocalObjectStore):
    """A local store that counts reads: whole objects, ranges and listings."""

    reads = 0
    lists = 0

    def get(self, key: str) -> bytes:
        self.reads += 1
        return super().get(key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        self.reads += 1
        return super().get_range(key, offset, length)

    def list(self, prefix: str) -> list[str]:
        self.lists += 1
        return super().list(prefix)


@pytest.fixture
def store(tmp_path: Path) -> CountingStore:
    """An attempt's log as a worker leaves it (one chunk lost, marked), then compacted."""
    store = CountingStore(tmp_path / "objects", b"k" * 32, "http://127.0.0.1:1")
    chunks: list[tuple[int, bytes | None]] = []
    for seq in range(CHUNKS):
        if seq == GAP:
            store.put(log_gap_key(PREFIX, seq), b"")
            chunks.append((seq, None))
            continue
        data = "".join(f"chunk {seq} line {n} é\n" for n in range(200)).encode()
        store.put(log_chunk_key(PREFIX, seq), data)
        chunks.append((seq, data))
    end = LogEnd(attempt=1, next_seq=CHUNKS, gaps=[GAP], status=AttemptStatus.SUCCESS, finished_at=datetime.now(UTC))
    store.put(log_end_key(PREFIX), end.model_dump_json().encode())
    compacted = build_compacted(chunks, CHUNKS)
    store.put(compacted_key(PREFIX), compacted.data)
    store.compacted_index = compacted.index  # type: ignore[attr-defined]
    return store


def record(store: CountingStore, key: str | None = None) -> CIAttemptRecord:
    return CIAttemptRecord(
        run_id=RUN,
        job_id="build",
        attempt=1,
        tenant_id="tenant-a",
        status="success",
        log_prefix=PREFIX,
        log_object_key=key if key is not None else compacted_key(PREFIX),
        log_index=store.compacted_index,  # type: ignore[attr-defined]
    )


def run_state() -> tuple[CIRunState, JobAttemptState]:
    attempt = JobAttemptState(attempt=1, round=0, status=AttemptStatus.SUCCESS, log_prefix=PREFIX)
    job = JobState(job_id="build", name="build", attempt=1, attempts=[attempt])
    state = CIRunState(
        run_id=RUN,
        tenant_id="tenant-a",
        repo_id="repo-a",
        commit_sha="c" * 40,
        ref="refs/heads/main",
        workflow_path=".github/workflows/ci.yml",
        created_at=datetime.now(UTC),
        jobs=[job],
    )
    return state, attempt


@pytest.mark.parametrize("from_seq", [0, 1, GAP, GAP + 1, CHUNKS - 1, CHUNKS])
def test_a_compacted_read_matches_the_chunks_in_one_object_read(store: CountingStore, from_seq: int) -> None:
    chunked = read_attempt_log(store, PREFIX, from_seq, final=True)
    store.reads = store.lists = 0
    compacted = read_compacted_log(store, compacted_key(PREFIX), store.compacted_index, from_seq)  # type: ignore[attr-defined]
    assert compacted.items == chunked.items
    assert (compacted.next_seq, compacted.has_more) == (chunked.next_seq, chunked.has_more) == (CHUNKS, False)
    assert (GAP, None) in compacted.items or from_seq > GAP
    assert (store.reads, store.lists) == ((1, 0) if from_seq < CHUNKS else (0, 0))


def test_pages_of_a_compacted_log_are_the_pages_of_its_chunks(store: CountingStore) -> None:
    index = store.compacted_index  # type: ignore[attr-defined]
    seq, pages = 0, []
    while True:
        store.reads = 0
        page = read_compacted_log(store, compacted_key(PREFIX), index, seq, max_chunks=6)
        assert store.reads == 1, "each page is one object read"
        assert page.items == read_attempt_log(store, PREFIX, seq, final=True, max_chunks=6).items
        pages.append(page)
        seq = page.next_seq
        if not page.has_more:
            break
    assert [s for p in pages for s, _ in p.items] == list(range(CHUNKS))
    assert len(pages) == -(-CHUNKS // 6)


def test_the_reader_picks_the_compacted_object_and_falls_back_to_chunks(store: CountingStore) -> None:
    state, attempt = run_state()
    expected = read_attempt_log(store, PREFIX, 0, final=True).items
    store.reads = store.lists = 0
    assert read_log(store, lambda: record(store), state, "build", attempt, 0).items == expected
    assert (store.reads, store.lists) == (1, 0)
    # No row (or a row not compacted yet): the chunks, listed and read one by one.
    store.reads = store.lists = 0
    assert read_log(store, lambda: None, state, "build", attempt, 0).items == expected
    assert store.lists == 1 and store.reads > CHUNKS - 1
    # A row naming an object that is gone: read from the chunks instead of failing.
    gone = record(store, key=f"{PREFIX}missing.log.gz")
    assert read_log(store, lambda: gone, state, "build", attempt, 0).items == expected


class CompactingStore(CountingStore):
    """Compaction's step 2 (delete the chunks) runs while a reader reads: right after the
    reader's listing (``during_list``) or before it (``before_list``)."""

    when = "during_list"
    compacting = False

    def list(self, prefix: str) -> list[str]:
        if self.compacting:
            return super().list(prefix)
        if self.when == "before_list":
            self._compact(prefix)
        keys = super().list(prefix)
        if self.when == "during_list":
            self._compact(prefix)
        return keys

    def _compact(self, prefix: str) -> None:
        self.compacting = True
        try:
            assert delete_chunks(self, prefix) == CHUNKS
        finally:
            self.compacting = False


@pytest.mark.parametrize("when", ["before_list", "during_list"])
def test_a_read_racing_compaction_serves_the_compacted_object(tmp_path: Path, when: str) -> None:
    """The reader saw the attempt's row before compaction named its object, then compaction
    deleted the chunks under it: the read takes the row again and serves the whole log from the
    compacted object, not false gaps or a log cut short."""
    plain = CountingStore(tmp_path / "objects", b"k" * 32, "http://127.0.0.1:1")
    for seq in range(CHUNKS):
        plain.put(log_chunk_key(PREFIX, seq), f"chunk {seq}\n".encode())
    end = LogEnd(attempt=1, next_seq=CHUNKS, gaps=[], status=AttemptStatus.SUCCESS, finished_at=datetime.now(UTC))
    plain.put(log_end_key(PREFIX), end.model_dump_json().encode())
    expected = read_attempt_log(plain, PREFIX, 0, final=True).items
    assert [t for _, t in expected] == [f"chunk {seq}\n" for seq in range(CHUNKS)]
    compacted = build_compacted([(s, f"chunk {s}\n".encode()) for s in range(CHUNKS)], CHUNKS)
    plain.put(compacted_key(PREFIX), compacted.data)
    plain.compacted_index = compacted.index  # type: ignore[attr-defined]

    racing = CompactingStore(tmp_path / "objects", b"k" * 32, "http://127.0.0.1:1")
    racing.when = when
    racing.compacted_index = compacted.index  # type: ignore[attr-defined]
    state, attempt = run_state()
    # The row as the reader finds it: not compacted yet, then (read again) naming the object
    # that compaction's step 1 wrote before its step 2 deleted the chunks.
    rows: list[CIAttemptRecord | None] = [None, record(racing)]
    reads: list[CIAttemptRecord | None] = []

    def attempt_row() -> CIAttemptRecord | None:
        reads.append(rows[len(reads)])
        return reads[-1]

    read = read_log(racing, attempt_row, state, "build", attempt, 0)
    assert read.items == expected and (read.next_seq, read.has_more) == (CHUNKS, False)
    assert len(reads) == 2, "the row is read again once"


def test_a_lost_chunk_of_an_uncompacted_attempt_stays_a_gap(store: CountingStore) -> None:
    """Missing chunks with no compacted object to turn to are still shown as gaps."""
    state, attempt = run_state()
    store.delete(log_chunk_key(PREFIX, 3))
    read = read_log(store, lambda: None, state, "build", attempt, 0)
    assert (3, None) in read.items and (GAP, None) in read.items
    assert read.next_seq == CHUNKS
