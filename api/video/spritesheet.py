"""The ``spritesheet`` content variant (OpenAI's): a JPEG grid of up to 16 frames taken evenly
across a finished video. The GPU worker makes it with the MP4 (``worker_gpu.encoding``) and
records its key in the job's result; the API only serves it (it never decodes video: no codec
in the API). The job's deletion and expiry remove it with the rest of the job's objects."""

from __future__ import annotations

from api.errors import ApiError


def spritesheet_of(key: str | None) -> str:
    """The spritesheet's key from a job's result; 404 for a video made before they were kept."""
    if not key:
        raise ApiError(
            404, "spritesheet_not_available", "this video has no spritesheet (it was made before they were kept)"
        )
    return key
