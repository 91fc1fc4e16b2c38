"""Downloads through HMAC-signed, expiring links (the local object store's presigned URLs)."""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from api.content_types import content_type_for
from api.deps import StoreDep
from api.errors import ApiError
from leasehold.storage import InvalidKey, LocalObjectStore, ObjectNotFound

router = APIRouter(tags=["files"])


@router.get("/v1/files", include_in_schema=False)
def signed_download(
    store: StoreDep,
    key: str = Query(...),
    expires: int = Query(...),
    sig: str = Query(...),
    filename: str | None = Query(None),
) -> StreamingResponse:
    """Serve an object when the link's signature is valid and unexpired (no API key needed)."""
    if not isinstance(store, LocalObjectStore) or not store.verify_signature(key, expires, sig):
        raise ApiError(403, "invalid_signature", "the download link is invalid or has expired")
    try:
        size = store.size(key)
        body = store.open_stream(key)
    except (ObjectNotFound, InvalidKey):
        raise ApiError(404, "not_found", "file not found") from None
    headers = {"Content-Length": str(size), "Cache-Control": "private, max-age=60"}
    if filename:
        headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    return StreamingResponse(body, media_type=content_type_for(key), headers=headers)
