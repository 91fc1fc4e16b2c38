"""The object store: one small interface, two backends (a local directory and S3).

Videos, thumbnails, checkpoints and log chunks live here; workflow payloads carry keys,
never bytes. Keys are ``/``-separated relative paths such as
``videos/<job>/attempt-3/checkpoint-000120.pt``.

Guarantees both backends keep:

* ``put`` is atomic: a reader sees the old object or the whole new one, never a prefix.
  Locally the bytes go to a temporary file that is renamed into place; on S3 a PUT (single
  or multipart) becomes visible only once complete, which is the same promise.
* ``create`` is write-once: it returns ``False`` and changes nothing if the key exists.

A write killed half-way (SIGKILL, a lost machine) leaves what the atomic write was building:
locally a ``.tmp-*`` file beside the key, on S3 an incomplete multipart upload. Neither is an
object (``list`` never shows it), so sweeps that delete what ``list`` shows would keep it
forever; ``delete_interrupted`` removes those older than a write could still be running.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from leasehold.settings import Settings

# A temporary older than this is an interrupted write, not one in progress: no single object
# takes an hour to write (the largest, a video or a checkpoint, takes seconds to minutes).
INTERRUPTED_WRITE_AGE_SECONDS = 3600.0


class ObjectNotFound(KeyError):
    """The key does not exist in the store."""


class InvalidKey(ValueError):
    """A key that could escape the store or is empty."""


def check_key(key: str) -> str:
    """Reject keys that are empty, absolute, or climb out of the store."""
    if not key or key.startswith("/") or "\\" in key or "\x00" in key:
        raise InvalidKey(f"invalid object key: {key!r}")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise InvalidKey(f"invalid object key: {key!r}")
    return key


def _check_range(offset: int, length: int) -> None:
    if offset < 0 or length < 0:
        raise ValueError(f"invalid byte range: offset {offset}, length {length}")


class ObjectStore(Protocol):
    """What the rest of leasehold needs from blob storage."""

    def put(self, key: str, data: bytes, content_type: str | None = None) -> None:
        """Write ``data`` at ``key`` atomically (replacing any old object)."""

    def put_file(self, key: str, path: Path, content_type: str | None = None) -> None:
        """Upload a local file atomically."""

    def create(self, key: str, data: bytes, content_type: str | None = None) -> bool:
        """Write only if ``key`` does not exist yet; ``True`` when this call created it."""

    def get(self, key: str) -> bytes:
        """The whole object; raises ``ObjectNotFound``."""

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """``length`` bytes of the object from ``offset`` (fewer at its end); raises ``ObjectNotFound``.

        One request however the object is laid out: a compacted CI log is read from the frame
        that holds a sequence number, not from its start.
        """

    def open_stream(self, key: str, chunk_size: int = 1 << 16) -> Iterator[bytes]:
        """The object in chunks (for streaming downloads); raises ``ObjectNotFound``."""

    def size(self, key: str) -> int:
        """Size in bytes; raises ``ObjectNotFound``."""

    def exists(self, key: str) -> bool:
        """Whether ``key`` exists."""

    def list(self, prefix: str) -> list[str]:
        """All keys starting with ``prefix``, sorted."""

    def delete(self, key: str) -> None:
        """Delete one key; deleting a missing key is not an error."""

    def delete_prefix(self, prefix: str) -> int:
        """Delete every key under ``prefix``; returns how many were deleted."""

    def delete_interrupted(self, prefix: str, older_than_seconds: float = INTERRUPTED_WRITE_AGE_SECONDS) -> int:
        """Delete what writes under ``prefix`` that were killed half-way left behind, if older
        than ``older_than_seconds``; returns how many went. Idempotent."""

    def signed_url(self, key: str, ttl_seconds: int, filename: str | None = None) -> str:
        """A URL that downloads ``key`` without an API key until it expires."""


class LocalObjectStore:
    """Objects as files under one directory; signed URLs are HMAC-signed API links."""

    _TMP_PREFIX = ".tmp-"

    def __init__(self, root: Path, signing_key: bytes, public_base_url: str) -> None:
        self.root = root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._signing_key = signing_key
        self._base_url = public_base_url.rstrip("/")

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _write_temp(self, path: Path, data: bytes | None, source: Path | None) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=self._TMP_PREFIX, dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                if source is not None:
                    with source.open("rb") as src:
                        while chunk := src.read(1 << 20):
                            f.write(chunk)
                else:
                    assert data is not None
                    f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return Path(tmp)

    def put(self, key: str, data: bytes, content_type: str | None = None) -> None:
        path = self._path(key)
        tmp = self._write_temp(path, data, None)
        os.replace(tmp, path)

    def put_file(self, key: str, path: Path, content_type: str | None = None) -> None:
        target = self._path(key)
        tmp = self._write_temp(target, None, path)
        os.replace(tmp, target)

    def create(self, key: str, data: bytes, content_type: str | None = None) -> bool:
        path = self._path(key)
        tmp = self._write_temp(path, data, None)
        try:
            # link() fails if the target exists: an atomic compare-and-create.
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        _check_range(offset, length)
        try:
            with self._path(key).open("rb") as f:
                f.seek(offset)
                return f.read(length)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None

    def open_stream(self, key: str, chunk_size: int = 1 << 16) -> Iterator[bytes]:
        path = self._path(key)
        try:
            f = path.open("rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None

        def chunks() -> Iterator[bytes]:
            with f:
                while chunk := f.read(chunk_size):
                    yield chunk

        return chunks()

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            raise ObjectNotFound(key) from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str) -> list[str]:
        # Walk only the directory the prefix names, not the whole store.
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root / base if base else self.root
        if not start.is_dir():
            return []
        keys = []
        for dirpath, _dirnames, filenames in os.walk(start):
            for name in filenames:
                if name.startswith(self._TMP_PREFIX):
                    continue
                key = Path(dirpath, name).relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> int:
        keys = self.list(prefix)
        for key in keys:
            self.delete(key)
        return len(keys)

    def delete_interrupted(self, prefix: str, older_than_seconds: float = INTERRUPTED_WRITE_AGE_SECONDS) -> int:
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root / base if base else self.root
        if not start.is_dir():
            return 0
        cutoff = time.time() - older_than_seconds
        deleted = 0
        for dirpath, _dirnames, filenames in os.walk(start):
            for name in filenames:
                if not name.startswith(self._TMP_PREFIX):
                    continue
                path = Path(dirpath, name)
                # A temporary's name does not say which key it was for, only its directory does:
                # only directories the prefix covers whole are swept.
                if not (Path(dirpath).relative_to(self.root).as_posix() + "/").startswith(prefix):
                    continue
                try:
                    if path.stat().st_mtime < cutoff:
                        path.unlink()
                        deleted += 1
                except FileNotFoundError:
                    pass  # renamed into place or deleted meanwhile: not ours to count
        return deleted

    # Signed URLs -------------------------------------------------------------------------

    def _signature(self, key: str, expires: int) -> str:
        mac = hmac.new(self._signing_key, f"{key}\n{expires}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def signed_url(self, key: str, ttl_seconds: int, filename: str | None = None) -> str:
        check_key(key)
        expires = int(time.time()) + ttl_seconds
        query: dict[str, Any] = {"key": key, "expires": expires, "sig": self._signature(key, expires)}
        if filename:
            query["filename"] = filename
        return f"{self._base_url}/v1/files?{urllib.parse.urlencode(query)}"

    def verify_signature(self, key: str, expires: int, signature: str) -> bool:
        """Whether a signed URL's parameters are authentic and unexpired."""
        if expires < time.time():
            return False
        return hmac.compare_digest(self._signature(key, expires), signature)


class S3ObjectStore:
    """Objects in an S3 bucket (AWS, MinIO, or any S3-protocol server)."""

    def __init__(
        self,
        bucket: str,
        region: str,
        endpoint_url: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        create_bucket: bool = False,
        public_endpoint_url: str | None = None,
    ) -> None:
        import boto3  # boto3 stays off the workflow import path
        from botocore.config import Config

        self.bucket = bucket

        def make_client(endpoint: str | None) -> Any:
            return boto3.client(
                "s3",
                region_name=region,
                endpoint_url=endpoint,
                aws_access_key_id=access_key_id,
                aws_secret_access_key=secret_access_key,
                config=Config(
                    retries={"max_attempts": 5, "mode": "standard"},
                    connect_timeout=5,
                    read_timeout=30,
                    s3={"addressing_style": "path"} if endpoint else None,
                    signature_version="s3v4",
                ),
            )

        self._client = make_client(endpoint_url)
        # A SigV4 signature covers the host, so links for users outside the deployment's
        # network must be signed for the address they will use.
        self._presign_client = make_client(public_endpoint_url) if public_endpoint_url else self._client
        if create_bucket:
            self.ensure_bucket(region)

    def ensure_bucket(self, region: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError:
            kwargs: dict[str, Any] = {"Bucket": self.bucket}
            if region != "us-east-1":
                kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
            self._client.create_bucket(**kwargs)

    @staticmethod
    def _is_missing(exc: Exception) -> bool:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        return code in ("NoSuchKey", "404", "NotFound")

    def put(self, key: str, data: bytes, content_type: str | None = None) -> None:
        extra = {"ContentType": content_type} if content_type else {}
        self._client.put_object(Bucket=self.bucket, Key=check_key(key), Body=data, **extra)

    def put_file(self, key: str, path: Path, content_type: str | None = None) -> None:
        extra = {"ExtraArgs": {"ContentType": content_type}} if content_type else {}
        self._client.upload_file(str(path), self.bucket, check_key(key), **extra)  # type: ignore[arg-type]

    def create(self, key: str, data: bytes, content_type: str | None = None) -> bool:
        from botocore.exceptions import ClientError

        extra = {"ContentType": content_type} if content_type else {}
        try:
            self._client.put_object(Bucket=self.bucket, Key=check_key(key), Body=data, IfNoneMatch="*", **extra)
            return True
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                return False
            raise

    def get(self, key: str) -> bytes:
        from botocore.exceptions import ClientError

        try:
            return self._client.get_object(Bucket=self.bucket, Key=check_key(key))["Body"].read()
        except ClientError as exc:
            if self._is_missing(exc):
                raise ObjectNotFound(key) from None
            raise

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        from botocore.exceptions import ClientError

        _check_range(offset, length)
        if length == 0:
            self.size(key)  # a missing object is missing whatever the length
            return b""
        try:
            response = self._client.get_object(
                Bucket=self.bucket, Key=check_key(key), Range=f"bytes={offset}-{offset + length - 1}"
            )
            return bytes(response["Body"].read())
        except ClientError as exc:
            if self._is_missing(exc):
                raise ObjectNotFound(key) from None
            # A range that starts at or past the end: S3 answers 416, the local store b"".
            if exc.response.get("Error", {}).get("Code", "") == "InvalidRange":
                return b""
            raise

    def open_stream(self, key: str, chunk_size: int = 1 << 16) -> Iterator[bytes]:
        from botocore.exceptions import ClientError

        try:
            body = self._client.get_object(Bucket=self.bucket, Key=check_key(key))["Body"]
        except ClientError as exc:
            if self._is_missing(exc):
                raise ObjectNotFound(key) from None
            raise
        return iter(body.iter_chunks(chunk_size))

    def size(self, key: str) -> int:
        from botocore.exceptions import ClientError

        try:
            return int(self._client.head_object(Bucket=self.bucket, Key=check_key(key))["ContentLength"])
        except ClientError as exc:
            if self._is_missing(exc):
                raise ObjectNotFound(key) from None
            raise

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
            return True
        except ObjectNotFound:
            return False

    def list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
        return sorted(keys)

    def delete(self, key: str) -> None:
        self._client.delete_object(Bucket=self.bucket, Key=check_key(key))

    def delete_prefix(self, prefix: str) -> int:
        keys = self.list(prefix)
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            self._client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
            )
        return len(keys)

    def delete_interrupted(self, prefix: str, older_than_seconds: float = INTERRUPTED_WRITE_AGE_SECONDS) -> int:
        # A PUT is all or nothing; an interrupted multipart upload keeps its parts (billed,
        # never listed) until it is aborted.
        cutoff = time.time() - older_than_seconds
        aborted = 0
        paginator = self._client.get_paginator("list_multipart_uploads")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            for upload in page.get("Uploads", []):
                if upload["Initiated"].timestamp() < cutoff:
                    self._client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    aborted += 1
        return aborted

    def signed_url(self, key: str, ttl_seconds: int, filename: str | None = None) -> str:
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": check_key(key)}
        if filename:
            params["ResponseContentDisposition"] = f'attachment; filename="{filename}"'
        return str(self._presign_client.generate_presigned_url("get_object", Params=params, ExpiresIn=ttl_seconds))


def open_store(settings: Settings) -> ObjectStore:
    """The object store the settings name."""
    if settings.store_backend == "s3":
        return S3ObjectStore(
            bucket=settings.s3_bucket,
            region=settings.s3_region,
            endpoint_url=settings.s3_endpoint_url,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=(
                settings.s3_secret_access_key.get_secret_value() if settings.s3_secret_access_key else None
            ),
            public_endpoint_url=settings.s3_public_endpoint_url,
        )
    return LocalObjectStore(settings.resolved_store_dir, settings.signing_key(), settings.resolved_public_base_url)
