"""Replicate's Files API, as far as model inputs need it: upload, read, delete.

The ``replicate`` client sends a file input (``input={"image": open(...)}``) by uploading it
to ``POST /v1/files`` and passing the file's ``urls.get`` as the input, unless asked for a
data URI (``file_encoding_strategy="base64"``, which it honours only with ``version=``). So a
prediction's ``image`` may be such a URL of this server: ``image_bytes`` reads it back from
the store, for its owner only.

Uploads live in the object store under the owner (``uploads/<owner>/<file id>``, the file
object beside it as JSON), so another caller's id is a 404. They stay until deleted: unlike
Replicate's, they do not expire after a day. Their size is held by the API's body limit.
Listing (``GET /v1/files``) is not served: that path is the signed-download route.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from datetime import UTC, datetime
from typing import Any

from api.replicate.problems import invalid_input, not_found
from leasehold.records.api_keys import Principal
from leasehold.storage import ObjectNotFound, ObjectStore

_ROOT = "uploads"
_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def _owner_prefix(principal: Principal) -> str:
    digest = hashlib.sha256(f"replicate-files\0{principal.tenant_id}\0{principal.user_id}".encode()).hexdigest()
    return f"{_ROOT}/{digest[:32]}"


def _is_file_id(file_id: str) -> bool:
    return len(file_id) == 26 and all(c in _ID_ALPHABET for c in file_id)


def _keys(principal: Principal, file_id: str) -> tuple[str, str]:
    """(the content's key, the file object's key); 404 for an id this API never gives out."""
    if not _is_file_id(file_id):
        raise not_found(f"file {file_id}")
    base = f"{_owner_prefix(principal)}/{file_id}"
    return base, f"{base}.json"


def files_url(base_url: str, file_id: str) -> str:
    return f"{base_url}/v1/files/{file_id}"


def create(
    store: ObjectStore, principal: Principal, base_url: str, data: bytes, name: str, content_type: str, metadata: Any
) -> dict[str, Any]:
    """Store an upload; its file object (Replicate's shape)."""
    file_id = "".join(secrets.choice(_ID_ALPHABET) for _ in range(26))
    content_key, object_key = _keys(principal, file_id)
    record = {
        "id": file_id,
        "name": name,
        "content_type": content_type,
        "size": len(data),
        "etag": hashlib.md5(data, usedforsecurity=False).hexdigest(),
        "checksums": {"sha256": hashlib.sha256(data).hexdigest()},
        "metadata": metadata if isinstance(metadata, dict) else {},
        "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "expires_at": None,
    }
    store.put(content_key, data, content_type)
    store.put(object_key, json.dumps(record).encode(), "application/json")
    return {**record, "urls": {"get": files_url(base_url, file_id)}}


def get(store: ObjectStore, principal: Principal, base_url: str, file_id: str) -> dict[str, Any]:
    """The caller's file object; 404 for anyone else's."""
    _content, object_key = _keys(principal, file_id)
    try:
        record = json.loads(store.get(object_key))
    except ObjectNotFound:
        raise not_found(f"file {file_id}") from None
    return {**record, "urls": {"get": files_url(base_url, file_id)}}


def delete(store: ObjectStore, principal: Principal, file_id: str) -> None:
    content_key, object_key = _keys(principal, file_id)
    if not store.exists(object_key):
        raise not_found(f"file {file_id}")
    store.delete(content_key)
    store.delete(object_key)


def image_bytes(store: ObjectStore, principal: Principal, base_url: str, url: str) -> bytes | None:
    """The bytes of a Files API URL of this server (``None``: the URL is not one); 422 naming
    ``input.image`` when it names no file of the caller's."""
    prefix = f"{base_url}/v1/files/"
    if not url.startswith(prefix):
        return None
    file_id = url[len(prefix) :].split("?", 1)[0].rstrip("/")
    if _is_file_id(file_id):
        try:
            return store.get(_keys(principal, file_id)[0])
        except ObjectNotFound:
            pass
    raise invalid_input("input.image", f"no file {file_id!r} of yours is stored here (deleted?)")
