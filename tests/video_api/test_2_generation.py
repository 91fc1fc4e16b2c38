"""/v1/videos with a GPU worker: the openai SDK end to end, running cancel, SSE, delete."""

from __future__ import annotations

import io
import math
import time
from pathlib import Path
from typing import Any

import av
import httpx
import openai
import PIL.Image
import pytest

from tests.video_api.conftest import (
    FAST_STEPS,
    MEDIUM_STEPS,
    MODEL,
    SECONDS,
    SIZE,
    SLOW_STEPS,
    Caller,
    VideoStack,
    create,
    sse_events,
    wait_for,
)
from workflows.video.models import get_model
from workflows.video.types import job_object_prefix


def _decode(data: bytes) -> tuple[str, int, int, int]:
    """(codec, width, height, frames) of an MP4 held in memory."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        frames = sum(1 for _ in container.decode(stream))
        return stream.codec_context.name, stream.codec_context.width, stream.codec_context.height, frames


def _objects(stack: VideoStack, video_id: str) -> list[str]:
    return stack.store().list(job_object_prefix(video_id) + "/")


def test_openai_sdk_create_and_poll_then_download(gpu_stack: VideoStack, tmp_path: Path) -> None:
    caller = gpu_stack.caller()
    video = caller.sdk.videos.create_and_poll(
        prompt="a lighthouse at dusk, waves",
        model=MODEL,
        seconds=str(SECONDS),  # type: ignore[arg-type]
        size=SIZE,  # type: ignore[arg-type]
        extra_body={"seed": 7, "steps": FAST_STEPS},
        poll_interval_ms=250,
    )
    assert video.status == "completed", video
    assert video.progress == 100
    assert video.completed_at is not None and video.completed_at >= video.created_at
    assert video.expires_at is not None and video.expires_at > video.completed_at
    assert video.error is None
    extra = video.model_extra or {}
    assert extra["attempt"] >= 1
    assert extra["eta_seconds"] is None

    content = caller.sdk.videos.download_content(video.id)
    target = tmp_path / "video.mp4"
    content.write_to_file(target)
    codec, width, height, frames = _decode(target.read_bytes())
    spec = get_model(MODEL)
    assert spec is not None
    assert codec == "h264"
    assert f"{width}x{height}" == SIZE
    assert frames == spec.frame_count(SECONDS)

    thumbnail = caller.sdk.videos.download_content(video.id, variant="thumbnail").read()
    assert thumbnail[:4] == b"RIFF" and thumbnail[8:12] == b"WEBP"

    # The spritesheet (OpenAI's third variant): a JPEG grid of frames, the same bytes each time.
    sheet = caller.sdk.videos.download_content(video.id, variant="spritesheet").read()
    assert sheet[:3] == b"\xff\xd8\xff", sheet[:8]
    grid = PIL.Image.open(io.BytesIO(sheet))
    tiles = min(16, frames)
    columns, tile_w = math.ceil(math.sqrt(tiles)), min(256, width)
    grid_w, grid_h = columns * tile_w, math.ceil(tiles / columns) * round(height * tile_w / width)
    assert grid.size == (grid_w + grid_w % 2, grid_h + grid_h % 2), grid.size
    assert caller.sdk.videos.download_content(video.id, variant="spritesheet").read() == sheet

    # The same job through plain HTTP, and one the listing knows as completed.
    assert caller.http.get(f"/v1/videos/{video.id}").json()["status"] == "completed"
    assert "openai-poll-after-ms" not in caller.http.get(f"/v1/videos/{video.id}").headers
    deadline = time.monotonic() + 20
    while caller.sdk.videos.list().data[0].status != "completed" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [(v.id, v.status, v.progress) for v in caller.sdk.videos.list()] == [(video.id, "completed", 100)]

    # Delete removes the assets; the job is gone for every call.
    assert _objects(gpu_stack, video.id)
    deleted = caller.sdk.videos.delete(video.id)
    assert (deleted.id, deleted.deleted) == (video.id, True)
    assert _objects(gpu_stack, video.id) == []
    with pytest.raises(openai.NotFoundError):
        caller.sdk.videos.retrieve(video.id)
    with pytest.raises(openai.NotFoundError):
        caller.sdk.videos.download_content(video.id)


def test_cancel_of_a_running_job_stops_generation(gpu_stack: VideoStack) -> None:
    caller = gpu_stack.caller()
    video_id = create(caller, steps=SLOW_STEPS, prompt="a very long take")["id"]
    running = wait_for(caller, video_id, lambda v: v["status"] == "in_progress" and v["progress"] > 0)
    assert running["attempt"] == 1
    response = caller.http.post(f"/v1/videos/{video_id}/cancel")
    assert response.status_code == 200, response.text
    # The GPU learns of the cancel from its next heartbeat; the job ends once it stopped.
    cancelled = wait_for(caller, video_id, lambda v: v["status"] == "cancelled", timeout=10)
    assert cancelled["progress"] < 100
    assert cancelled["error"]["code"] == "cancelled"
    assert _objects(gpu_stack, video_id) == []
    # The worker is free again: the next job runs and completes.
    follow_up = create(caller, prompt="after the cancel")["id"]
    done = wait_for(caller, follow_up, lambda v: v["status"] in ("completed", "failed", "cancelled"))
    assert done["status"] == "completed", done


def test_events_stream_progress_and_resume_from_last_event_id(gpu_stack: VideoStack) -> None:
    caller = gpu_stack.caller()
    video_id = create(caller, steps=MEDIUM_STEPS, prompt="clouds over hills")["id"]
    url = f"/v1/videos/{video_id}/events"
    seen: list[dict[str, Any]] = []
    with caller.http.stream("GET", url, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in sse_events(response):
            seen.append(event)
            assert event["data"]["status"] in ("queued", "in_progress"), f"ended before the test could drop: {seen}"
            if event["data"]["status"] == "in_progress" and event["data"]["progress"] > 0:
                break  # drop the connection mid-job
    assert seen, "no events before the disconnect"
    assert all(e["event"] == "video.updated" and e["data"]["id"] == video_id for e in seen)
    last_id = seen[-1]["id"]

    resumed: list[dict[str, Any]] = []
    with caller.http.stream("GET", url, headers={"Last-Event-ID": last_id}, timeout=120) as response:
        assert response.status_code == 200
        resumed = list(sse_events(response))
    assert resumed, "the resumed stream sent nothing"
    assert resumed[0]["id"] != last_id
    assert resumed[-1]["data"]["status"] == "completed"
    assert resumed[-1]["data"]["progress"] == 100
    ids = [e["id"] for e in seen + resumed]
    assert len(ids) == len(set(ids)), ids
    progress = [e["data"]["progress"] for e in seen + resumed if e["data"]["attempt"] == 1]
    assert progress == sorted(progress)

    # A finished job's stream replays its final state once, or nothing when the client has it.
    with caller.http.stream("GET", url, timeout=30) as response:
        final = list(sse_events(response))
    assert [e["data"]["status"] for e in final] == ["completed"]
    with caller.http.stream("GET", url, headers={"Last-Event-ID": final[0]["id"]}, timeout=30) as response:
        assert list(sse_events(response)) == []


def test_content_of_an_unfinished_job_is_a_conflict(gpu_stack: VideoStack) -> None:
    caller: Caller = gpu_stack.caller()
    video_id = create(caller, steps=SLOW_STEPS)["id"]
    try:
        response = caller.http.get(f"/v1/videos/{video_id}/content")
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "video_not_ready"
        bad_variant = caller.http.get(f"/v1/videos/{video_id}/content", params={"variant": "gif"})
        assert bad_variant.status_code == 400
        assert bad_variant.json()["error"]["param"] == "variant"
        early = caller.http.get(f"/v1/videos/{video_id}/content", params={"variant": "spritesheet"})
        assert early.status_code == 409, early.text
        assert early.json()["error"]["code"] == "video_not_ready"
    finally:
        # Delete of a running job cancels it first, then forgets it.
        assert caller.http.delete(f"/v1/videos/{video_id}").status_code == 200
    assert caller.http.get(f"/v1/videos/{video_id}").status_code == 404
    assert _objects(gpu_stack, video_id) == []
    with pytest.raises(httpx.HTTPStatusError):
        caller.http.get(f"/v1/videos/{video_id}/events").raise_for_status()
