"""Remix (``POST /v1/videos/{id}/remix``): a new video job whose source is a finished video.

The source must be the caller's (else 404, as for any read), completed and not expired (else
400 naming ``video_id``). The remix takes the source's model, size and seconds unless the
body gives its own, and a model that cannot remix is a 400 naming ``model``. The source's
MP4 is copied under the remix's own job (``reference_key(..., kind="source")``) just before
the job's row is reserved, as an image-to-video job's image is, so deleting the source
later changes nothing for the remix; the copy goes when the remix ends. Everything else
(admission, idempotency, the read model) is the submit path of every job.
"""

from __future__ import annotations

import hashlib

from api.errors import invalid
from api.schemas.video import VideoCreateRequest
from api.video.views import JobView
from workflows.video.models import REMIX_FAMILIES, VideoModelSpec, format_size
from workflows.video.types import GenerateResult, SourceVideo, VideoStatus, reference_key

FIELD = "video_id"


def remixable(source: JobView) -> GenerateResult:
    """The finished result of the video to remix; 400 naming ``video_id`` when it has none."""
    result = source.state.result if source.state is not None else None
    if source.status is not VideoStatus.COMPLETED or result is None:
        raise invalid(
            FIELD,
            f"video {source.job_id} is {source.status.value}: only a completed video can be remixed",
        )
    return result


def remix_body(source: JobView, result: GenerateResult, body: VideoCreateRequest) -> VideoCreateRequest:
    """The remix's request: the body's fields, else the source video's model, size and seconds."""
    memo = source.memo
    return body.model_copy(
        update={
            "model": body.model or memo.model,
            "size": body.size or format_size(result.width, result.height),
            "seconds": body.seconds if body.seconds is not None else memo.seconds,
        }
    )


def check_remixes(spec: VideoModelSpec) -> None:
    """400 naming ``model`` when ``spec`` cannot remix."""
    if not spec.remixes:
        families = ", ".join(sorted(REMIX_FAMILIES))
        raise invalid("model", f"{spec.name} cannot remix a video (models of family {families} can)")


def source_video(job_id: str, source: JobView, result: GenerateResult, data: bytes) -> SourceVideo:
    """What the remix job ``job_id`` records of its source: where its copy goes, and what it is."""
    sha256 = hashlib.sha256(data).hexdigest()
    return SourceVideo(
        key=reference_key(job_id, sha256, "mp4", kind="source"),
        sha256=sha256,
        content_type="video/mp4",
        width=result.width,
        height=result.height,
        size_bytes=len(data),
        video_id=source.job_id,
        frames=result.frames,
    )
