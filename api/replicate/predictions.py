"""A video job as a Replicate prediction: the same ``JobView`` ``/v1/videos`` answers from.

Statuses: ``queued`` -> ``starting``, ``in_progress`` -> ``processing``, ``completed`` ->
``succeeded``, ``failed`` -> ``failed``, ``cancelled`` -> ``canceled``; an ``expired`` job
succeeded once and its files are gone (``data_removed``, no output). The output is a signed
URL of the MP4 from the object store, minted at each read (it expires; the job does not).
``logs`` is derived from the snapshot (queue, attempts, progress as a tqdm line, which the
client's ``Prediction.progress`` parses), so a poll, a stream and a webhook tell one story.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from api.replicate.catalogue import version_id
from api.video.views import JobView
from leasehold.storage import ObjectStore
from workflows.video.models import format_size, get_model
from workflows.video.types import VideoStatus

STATUSES = {
    VideoStatus.QUEUED: "starting",
    VideoStatus.IN_PROGRESS: "processing",
    VideoStatus.COMPLETED: "succeeded",
    VideoStatus.FAILED: "failed",
    VideoStatus.CANCELLED: "canceled",
    VideoStatus.EXPIRED: "succeeded",
}
TERMINAL = frozenset({"succeeded", "failed", "canceled"})
PROGRESS_BAR_WIDTH = 20


def iso(value: datetime | float | None) -> str | None:
    """Replicate's timestamps: ISO 8601 in UTC with microseconds and ``Z``."""
    if value is None:
        return None
    at = datetime.fromtimestamp(value, UTC) if isinstance(value, int | float) else value.astimezone(UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def predict_seconds(view: JobView) -> float | None:
    """Seconds the model ran for the winning attempt (``metrics.predict_time``)."""
    result = view.state.result if view.state is not None else None
    return round(result.gpu_seconds, 3) if result is not None and result.gpu_seconds > 0 else None


def logs_of(view: JobView) -> str:
    """The prediction's log, rebuilt from the snapshot; the progress line is rewritten as it
    grows, as tqdm's is."""
    memo = view.memo
    lines = [f"queued: {memo.model} {format_size(memo.width, memo.height)}, {memo.seconds}s, seed {memo.seed}"]
    for attempt in range(1, view.attempt + 1):
        lines.append(f"attempt {attempt}: generating" + (" (resumed from its checkpoint)" if attempt > 1 else ""))
    if view.attempt > 0 or view.status is VideoStatus.COMPLETED:
        done = view.progress * PROGRESS_BAR_WIDTH // 100
        bar = "█" * done + " " * (PROGRESS_BAR_WIDTH - done)
        lines.append(f"{view.progress:3d}%|{bar}| {view.progress}/100")
    result = view.state.result if view.state is not None else None
    if view.status is VideoStatus.COMPLETED and result is not None:
        lines.append(f"generated {result.frames} frames at {result.width}x{result.height} in {result.gpu_seconds:.1f}s")
    elif view.status is VideoStatus.FAILED and view.state is not None and view.state.error_message:
        lines.append(f"failed: {view.state.error_message}")
    elif view.status is VideoStatus.CANCELLED:
        lines.append("canceled")
    return "\n".join(lines) + "\n"


def input_of(view: JobView) -> dict[str, Any]:
    """The input the job runs with, defaults resolved (what the model was given)."""
    memo = view.memo
    fields: dict[str, Any] = {
        "prompt": memo.prompt,
        "seconds": memo.seconds,
        "size": format_size(memo.width, memo.height),
        "seed": memo.seed,
    }
    if memo.steps is not None:
        fields["num_inference_steps"] = memo.steps
    return fields


def output_url(view: JobView, store: ObjectStore, ttl_seconds: int) -> str | None:
    """A signed URL of the finished MP4 (``None`` before it exists and once it expired)."""
    result = view.state.result if view.state is not None else None
    if view.status is not VideoStatus.COMPLETED or result is None:
        return None
    return store.signed_url(result.video_key, ttl_seconds, filename=f"{view.job_id}.mp4")


def prediction_of(view: JobView, store: ObjectStore, base_url: str, ttl_seconds: int) -> dict[str, Any]:
    """The prediction object for ``view``; ``base_url`` prefixes its ``urls``."""
    status = STATUSES[view.status]
    spec = get_model(view.memo.model)
    predict_time = predict_seconds(view)
    completed_at = view.completed_at if status in TERMINAL else None
    started_at: datetime | float | None = None
    if view.attempt_started_at is not None:
        started_at = view.attempt_started_at
    elif completed_at is not None and predict_time is not None:
        # The winning attempt's start, from its end and its run time (the row keeps the two).
        started_at = completed_at - timedelta(seconds=predict_time)
    error = None
    if status == "failed":
        error = (view.state.error_message if view.state is not None else None) or "generation failed"
    url = f"{base_url}/v1/predictions/{view.job_id}"
    return {
        "id": view.job_id,
        "model": f"{spec.owned_by}/{spec.name}" if spec is not None else view.memo.model,
        "version": version_id(spec) if spec is not None else "",
        "input": input_of(view),
        "logs": logs_of(view),
        "output": output_url(view, store, ttl_seconds),
        "data_removed": view.status is VideoStatus.EXPIRED,
        "error": error,
        "status": status,
        "source": "api",
        "created_at": iso(view.memo.created_at),
        "started_at": iso(started_at),
        "completed_at": iso(completed_at),
        "urls": {"get": url, "cancel": f"{url}/cancel", "stream": f"{url}/stream"},
        "metrics": {"predict_time": predict_time} if predict_time is not None else {},
    }
