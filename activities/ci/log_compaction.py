"""Compacting a finished attempt's log chunks into one object, and reading it back.

A running attempt ships its output as many small chunks (``<prefix><seq:08d>.log``); reading a
long log back chunk by chunk costs one object read per chunk. Once the attempt is final, its
chunks become ONE object, ``<prefix>compacted.log.gz``: consecutive gzip members (frames), each
holding the raw text of a run of chunks (about ``FRAME_BYTES`` of text). Frames are compressed
independently, so a reader that starts at a later sequence number fetches one byte range from
the frame that holds it to the end and never inflates what came before; and the whole object
is still a plain gzip file (``zcat`` prints the log).

The index (the attempt row's ``log_index``) says where everything is::

    {"next_seq": n, "gaps": [seq, ...],
     "ranges": [[first_seq, last_seq, offset, length], ...],   # one per frame
     "sizes": [bytes of seq 0, bytes of seq 1, ...]}            # 0 for a gap

Chunk boundaries live in ``sizes`` rather than inside the frames, so a frame is the log's own
bytes and nothing else. A chunk the store no longer has (and the attempt's recorded gaps) is a
gap of the compacted log: a reader sees a hole, never a splice.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from typing import Any, Protocol

from leasehold.storage import ObjectNotFound, ObjectStore
from workflows.ci.ids import log_chunk_key

COMPACTED_NAME = "compacted.log.gz"
# Raw text per frame: small enough that a read from a late seq inflates little it does not
# return, large enough that compression and per-frame overhead stay good.
FRAME_BYTES = 256 << 10


def compacted_key(log_prefix: str) -> str:
    """``<attempt prefix>compacted.log.gz``: where an attempt's compacted log lives."""
    return f"{log_prefix}{COMPACTED_NAME}"


class ObjectReader(Protocol):
    """What reading a compacted log needs of the store."""

    def get(self, key: str) -> bytes: ...

    def get_range(self, key: str, offset: int, length: int) -> bytes: ...


@dataclass
class CompactedLog:
    """One compacted log: its object's bytes and its index."""

    data: bytes
    index: dict[str, Any]


def build_compacted(chunks: list[tuple[int, bytes | None]], next_seq: int) -> CompactedLog:
    """Frame ``chunks`` ((seq, bytes, or ``None`` for a gap), seq ascending) into one object.

    Every seq below ``next_seq`` without bytes is a gap of the index: those the attempt
    reported and any chunk the store lost since.
    """
    sizes = [0] * next_seq
    ranges: list[list[int]] = []
    out = bytearray()
    frame = bytearray()
    first: int | None = None
    last = 0

    def close_frame() -> None:
        nonlocal first
        if first is None:
            return
        member = gzip.compress(bytes(frame), compresslevel=6, mtime=0)
        ranges.append([first, last, len(out), len(member)])
        out.extend(member)
        frame.clear()
        first = None

    for seq, data in chunks:
        if not data or not 0 <= seq < next_seq:
            continue
        if first is None:
            first = seq
        frame.extend(data)
        sizes[seq] = len(data)
        last = seq
        if len(frame) >= FRAME_BYTES:
            close_frame()
    close_frame()
    gaps = [seq for seq in range(next_seq) if sizes[seq] == 0]
    return CompactedLog(bytes(out), {"next_seq": next_seq, "gaps": gaps, "ranges": ranges, "sizes": sizes})


def read_chunks(store: ObjectStore, log_prefix: str, next_seq: int, gaps: list[int]) -> list[tuple[int, bytes | None]]:
    """Every chunk 0..next_seq-1 from the store (``None`` for a gap or a chunk it lacks)."""
    known_gaps = set(gaps)
    chunks: list[tuple[int, bytes | None]] = []
    for seq in range(next_seq):
        if seq in known_gaps:
            chunks.append((seq, None))
            continue
        try:
            chunks.append((seq, store.get(log_chunk_key(log_prefix, seq))))
        except ObjectNotFound:
            chunks.append((seq, None))
    return chunks


def read_compacted(
    store: ObjectReader, object_key: str, log_index: dict[str, Any], from_seq: int = 0
) -> list[tuple[int, bytes]]:
    """``(seq, chunk bytes)`` for every stored seq >= ``from_seq``, in order.

    One object read: the whole object when ``from_seq`` is in the first frame, else one range
    read from the frame that holds ``from_seq`` to the end. Raises ``ObjectNotFound`` when the
    object is gone (retention deleted it).
    """
    ranges: list[list[int]] = log_index.get("ranges") or []
    sizes: list[int] = log_index.get("sizes") or []
    start = next((i for i, r in enumerate(ranges) if r[1] >= from_seq), None)
    if start is None:
        return []
    wanted = ranges[start:]
    base = wanted[0][2]
    if start == 0 and base == 0:
        blob = store.get(object_key)
    else:
        end = wanted[-1][2] + wanted[-1][3]
        blob = store.get_range(object_key, base, end - base)
    out: list[tuple[int, bytes]] = []
    for first_seq, last_seq, offset, length in wanted:
        member = blob[offset - base : offset - base + length]
        # wbits=31: exactly one gzip member, so a corrupt frame fails here instead of bleeding
        # into the next.
        raw = zlib.decompress(member, wbits=31)
        pos = 0
        for seq in range(first_seq, last_seq + 1):
            size = sizes[seq] if seq < len(sizes) else 0
            if size == 0:
                continue
            if seq >= from_seq:
                out.append((seq, raw[pos : pos + size]))
            pos += size
    return out
