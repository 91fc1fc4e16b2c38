"""Reading a finished CI attempt's log: its compacted object vs its chunks one by one.

    python -m bench.compacted_log            # 100,000 lines, 5 reads per way per store
    python -m bench.compacted_log --append   # ... and append the table to bench/RESULTS.md

One run, side by side, on the same log and the same stores: a 100,000-line attempt is shipped
by the real ``LogShipper`` (64 KiB chunks, as a CI worker ships them), then read back whole
(a) chunk by chunk, listing the attempt's prefix and fetching each chunk (the baseline: how a
log is read before compaction), (b) from its compacted object with ``read_compacted`` (one
object read), and (c) from a late sequence number (one range read). Both stores are measured:
the local directory, and S3 over real HTTP (moto on loopback: every request pays a round trip,
as against MinIO or S3, though a real network adds more). Reads alternate between the ways, so
drift of the shared host's load falls on all of them. Numbers, not assertions.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx

from activities.ci.log_compaction import build_compacted, compacted_key, read_chunks, read_compacted
from activities.ci.logs import LogShipper
from bench.report import Table, machine, ms
from leasehold.devserver import free_port
from leasehold.storage import LocalObjectStore, ObjectStore, S3ObjectStore
from workflows.ci.ids import parse_log_key
from workflows.ci.types.job import AttemptStatus

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


@contextmanager
def moto_server(log: Path) -> Iterator[str]:
    """moto's S3 server on a free loopback port (benchmarks do not import the tests' helper)."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(endpoint, timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"moto did not start:\n{log.read_text()}") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class CountingStore:
    """Wraps a store and counts object reads (whole and ranged) and listings."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.reads = 0

    def get(self, key: str) -> bytes:
        self.reads += 1
        return self.inner.get(key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        self.reads += 1
        return self.inner.get_range(key, offset, length)

    def list(self, prefix: str) -> list[str]:
        self.reads += 1
        return self.inner.list(prefix)


def ship(store: ObjectStore, prefix: str, lines: int) -> tuple[bytes, int]:
    shipper = LogShipper(store, prefix, attempt=1, flush_seconds=0.05)
    # Build output with a digest per line: repeated words and incompressible ids, as real logs have.
    text = b"".join(
        f"{i:06d} compiling module {i % 997} ... ok {hashlib.sha1(str(i).encode()).hexdigest()[:16]}\n".encode()
        for i in range(lines)
    )
    for start in range(0, len(text), 8192):
        shipper.write(text[start : start + 8192])
    return text, shipper.close(AttemptStatus.SUCCESS, 0).next_seq


def by_chunks(store: CountingStore, prefix: str) -> bytes:
    keys = sorted(k for k in store.list(prefix) if (p := parse_log_key(k)) is not None and p[1] == "log")
    return b"".join(store.get(k) for k in keys)


def measure(name: str, store: ObjectStore, lines: int, reads: int) -> tuple[list[list[str]], str]:
    prefix = f"ci/bench/run_{uuid.uuid4().hex[:8]}/build/attempt-1/"
    text, next_seq = ship(store, prefix, lines)
    began = time.perf_counter()
    compacted = build_compacted(read_chunks(store, prefix, next_seq, []), next_seq)
    key = compacted_key(prefix)
    store.put(key, compacted.data)
    compaction_s = time.perf_counter() - began
    late = max(0, next_seq - 4)
    counting = CountingStore(store)
    ways: dict[str, Callable[[], bytes]] = {
        "chunks one by one (baseline)": lambda: by_chunks(counting, prefix),
        "compacted, from seq 0": lambda: b"".join(d for _, d in read_compacted(counting, key, compacted.index, 0)),
        f"compacted, from seq {late}": lambda: b"".join(
            d for _, d in read_compacted(counting, key, compacted.index, late)
        ),
    }
    times: dict[str, list[float]] = {w: [] for w in ways}
    calls: dict[str, int] = {}
    for _ in range(reads):
        for way, read in ways.items():
            counting.reads = 0
            t0 = time.perf_counter()
            data = read()
            times[way].append(time.perf_counter() - t0)
            calls[way] = counting.reads
            if way.endswith("seq 0") or way.endswith("(baseline)"):
                assert data == text, f"{way} read back other bytes"
    rows = []
    for way in ways:
        rows.append(
            [
                name,
                way,
                str(calls[way]),
                ms(statistics.median(times[way])),
                ms(min(times[way])),
            ]
        )
    sizes = (
        f"{name}: the log is {lines:,} lines, {len(text) / 2**20:.1f} MiB in {next_seq} chunks; compacted "
        f"{len(compacted.data) / 2**20:.2f} MiB in {len(compacted.index['ranges'])} frames, built (chunks read, "
        f"framed, stored) in {compaction_s:.2f} s"
    )
    return rows, sizes


def run(lines: int, reads: int) -> Table:
    table = Table(
        f"Log read of a finished {lines:,}-line CI attempt: compacted object vs chunks",
        ["store", "read", "store requests", "p50 ms", "min ms"],
    )
    with tempfile.TemporaryDirectory(prefix="leasehold-bench-log-") as tmp:
        local = LocalObjectStore(Path(tmp) / "objects", b"k" * 32, "http://127.0.0.1:1")
        rows, sizes = measure("local dir", local, lines, reads)
        table.rows += rows
        notes = [sizes]
        with moto_server(Path(tmp) / "moto.log") as endpoint:
            s3 = S3ObjectStore(
                bucket=f"bench-{uuid.uuid4().hex[:8]}",
                region="us-east-1",
                endpoint_url=endpoint,
                access_key_id="bench",
                secret_access_key="bench",
                create_bucket=True,
            )
            rows, sizes = measure("S3 (moto, loopback HTTP)", s3, lines, reads)
            table.rows += rows
            notes.append(sizes)
    table.notes = [
        *notes,
        "The log is synthetic build output: repeated words and a 16-hex-digit id per line.",
        "Locally the chunks sit in the page cache, so reading them is cheap and inflating the compacted "
        "object costs more than it saves; the gain is in requests, which is what a remote store charges for.",
        f"{reads} reads per way per store, alternating; p50 and min of wall time for the whole log (or its tail).",
        "Store requests: object reads, range reads and listings per log read. The baseline lists the "
        "attempt's prefix and fetches every chunk, as the logs API did before compaction; the compacted "
        "reads are `read_compacted` (one object read from seq 0, one range read from a late seq).",
        "Every whole read is checked to return the shipped log byte for byte.",
        "Compacted: independent gzip members of ~256 KiB of text each (the object is one gzip file), with "
        "an index of byte offsets per seq range and chunk sizes in the attempt's read-model row.",
    ]
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compacted_log", description=__doc__)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--reads", type=int, default=5)
    parser.add_argument("--append", action="store_true", help="append the table to bench/RESULTS.md")
    args = parser.parse_args(argv)
    began = time.monotonic()
    table = run(args.lines, args.reads)
    print(table.text())
    if args.append:
        info = machine()
        header = (
            f"\n## CI log compaction (issue 13)\n\nProduced by `python -m bench.compacted_log` on "
            f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC in {time.monotonic() - began:.0f} s; {info['nproc']} x "
            f"{info['cpu']}, Python {info['python']}. Shared with other work while measured.\n\n"
        )
        with RESULTS.open("a") as out:
            out.write(header + table.markdown() + "\n")
        print(f"appended to {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
