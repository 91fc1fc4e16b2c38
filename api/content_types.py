"""The ``Content-Type`` a stored object is served with, by its key's suffix.

Shared by the signed-download router and the video content route.
"""

from __future__ import annotations

_CONTENT_TYPES = {
    ".mp4": "video/mp4",
    ".webp": "image/webp",
    ".jpg": "image/jpeg",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
    ".log": "text/plain; charset=utf-8",
}


def content_type_for(key: str) -> str:
    """The media type of the object at ``key``; ``application/octet-stream`` when unknown."""
    for suffix, ctype in _CONTENT_TYPES.items():
        if key.endswith(suffix):
            return ctype
    return "application/octet-stream"
