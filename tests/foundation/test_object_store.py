"""The object-store contract, run against both backends: a local directory and S3 over HTTP (moto)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from leasehold.storage import InvalidKey, LocalObjectStore, ObjectNotFound, ObjectStore, S3ObjectStore


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "local":
        yield LocalObjectStore(tmp_path / "objects", b"k" * 32, "http://127.0.0.1:1")
    else:
        endpoint: str = request.getfixturevalue("s3_endpoint")
        bucket = f"lh-{uuid.uuid4().hex[:12]}"
        yield S3ObjectStore(
            bucket=bucket,
            region="us-east-1",
            endpoint_url=endpoint,
            access_key_id="testing",
            secret_access_key="testing",
            create_bucket=True,
        )


def test_put_get_overwrite(store: ObjectStore) -> None:
    store.put("videos/a/out.mp4", b"first", content_type="video/mp4")
    assert store.get("videos/a/out.mp4") == b"first"
    store.put("videos/a/out.mp4", b"second version")
    assert store.get("videos/a/out.mp4") == b"second version"
    assert store.size("videos/a/out.mp4") == len(b"second version")
    assert store.exists("videos/a/out.mp4")
    assert b"".join(store.open_stream("videos/a/out.mp4", chunk_size=4)) == b"second version"


def test_put_file(store: ObjectStore, tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    payload = bytes(range(256)) * 1000
    source.write_bytes(payload)
    store.put_file("checkpoints/x/attempt-1/step-1.pt", source)
    assert store.get("checkpoints/x/attempt-1/step-1.pt") == payload


def test_put_is_atomic_for_readers(store: ObjectStore) -> None:
    """A concurrent reader sees one whole version or the other, never a prefix or a mix."""
    old, new = b"a" * 300_000, b"b" * 400_000
    store.put("atomic/obj", old)
    seen: list[bytes] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set() and len(seen) < 200:
            seen.append(store.get("atomic/obj"))

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(6):
        store.put("atomic/obj", new if i % 2 == 0 else old)
    stop.set()
    reader.join(timeout=30)
    assert seen, "the reader never read"
    assert all(blob in (old, new) for blob in seen)


def test_put_leaves_no_temporary_objects(store: ObjectStore) -> None:
    for i in range(3):
        store.put("tmpcheck/obj", str(i).encode())
    assert store.list("tmpcheck/") == ["tmpcheck/obj"]


def test_create_is_write_once(store: ObjectStore) -> None:
    assert store.create("results/job-1/final.json", b"winner") is True
    assert store.create("results/job-1/final.json", b"loser") is False
    assert store.get("results/job-1/final.json") == b"winner"


def test_concurrent_creates_exactly_one_wins(store: ObjectStore) -> None:
    key = f"results/{uuid.uuid4().hex}/final.json"
    n = 8
    barrier = threading.Barrier(n)
    outcomes: dict[int, bool] = {}

    def attempt(i: int) -> None:
        barrier.wait(timeout=10)
        outcomes[i] = store.create(key, f"writer-{i}".encode())

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(outcomes) == n
    winners = [i for i, won in outcomes.items() if won]
    assert len(winners) == 1, outcomes
    assert store.get(key) == f"writer-{winners[0]}".encode()


def test_missing_object(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound):
        store.get("nope/missing.bin")
    with pytest.raises(ObjectNotFound):
        store.size("nope/missing.bin")
    with pytest.raises(ObjectNotFound):
        store.open_stream("nope/missing.bin")
    assert not store.exists("nope/missing.bin")
    store.delete("nope/missing.bin")  # deleting a missing key is not an error


def test_list_by_prefix_and_delete(store: ObjectStore) -> None:
    keys = ["logs/run-1/job-a/0001.txt", "logs/run-1/job-a/0002.txt", "logs/run-1/job-b/0001.txt"]
    for key in [*keys, "logs/run-10/job-a/0001.txt", "other/x.txt"]:
        store.put(key, b"x")
    assert store.list("logs/run-1/") == sorted(keys)
    assert store.list("logs/run-1/job-a/") == keys[:2]
    # A prefix need not end at a separator.
    assert store.list("logs/run-1") == sorted([*keys, "logs/run-10/job-a/0001.txt"])
    assert store.list("absent/") == []
    store.delete(keys[0])
    assert not store.exists(keys[0])
    assert store.delete_prefix("logs/run-1/") == 2
    assert store.list("logs/run-1/") == []
    assert store.list("logs/") == ["logs/run-10/job-a/0001.txt"]
    assert store.get("other/x.txt") == b"x"


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "./a", "a/.", "a\\b", "nul\x00l"])
def test_invalid_keys_rejected(store: ObjectStore, key: str) -> None:
    with pytest.raises(InvalidKey):
        store.put(key, b"x")
    with pytest.raises(InvalidKey):
        store.get(key)
    with pytest.raises(InvalidKey):
        store.signed_url(key, 60)


def test_s3_signed_url_downloads_with_plain_http(s3_endpoint: str) -> None:
    bucket = f"lh-{uuid.uuid4().hex[:12]}"
    store = S3ObjectStore(bucket, "us-east-1", s3_endpoint, "testing", "testing", create_bucket=True)
    store.put("videos/v1/video.mp4", b"\x00mp4 bytes", content_type="video/mp4")
    url = store.signed_url("videos/v1/video.mp4", 60, filename="clip.mp4")
    assert "X-Amz-Signature=" in url
    resp = httpx.get(url, timeout=10)
    assert resp.status_code == 200
    assert resp.content == b"\x00mp4 bytes"
    assert 'filename="clip.mp4"' in resp.headers["content-disposition"]


def test_s3_signed_url_for_public_endpoint(s3_endpoint: str) -> None:
    """Links are signed for the address users reach (compose: localhost), not the internal one."""
    bucket = f"lh-{uuid.uuid4().hex[:12]}"
    public = s3_endpoint.replace("127.0.0.1", "localhost")
    store = S3ObjectStore(
        bucket, "us-east-1", s3_endpoint, "testing", "testing", create_bucket=True, public_endpoint_url=public
    )
    store.put("a/b.txt", b"public bytes")
    url = store.signed_url("a/b.txt", 60)
    assert url.startswith(f"{public}/{bucket}/a/b.txt?")
    assert httpx.get(url, timeout=10).content == b"public bytes"
