"""``get_range`` on both backends: a local directory and S3 over HTTP (moto)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from leasehold.storage import LocalObjectStore, ObjectNotFound, ObjectStore, S3ObjectStore


@pytest.fixture(params=["local", "s3"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "local":
        yield LocalObjectStore(tmp_path / "objects", b"k" * 32, "http://127.0.0.1:1")
    else:
        yield S3ObjectStore(
            bucket=f"lh-{uuid.uuid4().hex[:12]}",
            region="us-east-1",
            endpoint_url=request.getfixturevalue("s3_endpoint"),
            access_key_id="testing",
            secret_access_key="testing",
            create_bucket=True,
        )


def test_get_range_returns_exactly_the_bytes_asked_for(any_store: ObjectStore) -> None:
    payload = bytes(range(256)) * 64
    any_store.put("logs/a/compacted.log.gz", payload)
    assert any_store.get_range("logs/a/compacted.log.gz", 0, len(payload)) == payload
    assert any_store.get_range("logs/a/compacted.log.gz", 1000, 300) == payload[1000:1300]
    # Past the end: what there is, then nothing.
    assert any_store.get_range("logs/a/compacted.log.gz", len(payload) - 10, 100) == payload[-10:]
    assert any_store.get_range("logs/a/compacted.log.gz", len(payload) + 5, 10) == b""
    assert any_store.get_range("logs/a/compacted.log.gz", 7, 0) == b""


def test_get_range_refuses_missing_objects_and_bad_ranges(any_store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound):
        any_store.get_range("logs/none/compacted.log.gz", 0, 10)
    any_store.put("logs/b/x", b"abc")
    with pytest.raises(ValueError):
        any_store.get_range("logs/b/x", -1, 2)
    with pytest.raises(ValueError):
        any_store.get_range("logs/b/x", 0, -2)
